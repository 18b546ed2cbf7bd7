"""The ``tvm-fuse`` command (also ``python -m tvm_fuse``).

    tvm-fuse demo [--backend relay|relax]           the seed's conv+BN+ReLU through the pipeline
    tvm-fuse compile MODEL.onnx [-o module.tar] [--target T] [--input-shapes S]
                     [--tuning-records F] [--backend relay|relax]
    tvm-fuse explain MODEL.onnx [--input-shapes S] [--target T] [--backend relay|relax]

``--backend`` defaults to the one the installed TVM has (TVM 0.19: Relay; apache-tvm: Relax,
``tvm_fuse.relax``); on Relax, ``compile`` writes a Relax VM library (default ``module.so``).
    tvm-fuse tune MODEL.onnx -o LOG [--trials N] [--rpc-tracker HOST:PORT --rpc-key KEY]
                  [--backend relay|relax]
    tvm-fuse bench [layers|models|tuning|zoo|peak|all] [--quick] [--results DIR] [--json PATH]
    tvm-fuse tvmc ARGS...                           stock tvmc with the tvm_fuse composite target

Flags are spelled as tvmc spells them where they mean the same (``-o``, ``--target``,
``--input-shapes``, ``--tuning-records``, ``--rpc-tracker``, ``--rpc-key``, ``-v``). This
module only parses the command line and keeps the error boundary: a
:class:`~tvm_fuse.errors.UserError` (or a command-line mistake) is one line on stderr and exit
status 2, never a traceback. The work is in ``package``, ``explain``, ``demo`` and ``tvmc``,
imported when a command runs, and nothing imported here imports TVM, so that ``--help``
answers at once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from .bench import RESULTS
from .cli_options import (
    add_algorithm_options,
    add_backend_option,
    add_model_options,
    add_verbosity,
    apply_verbosity,
)
from .errors import UserError
from .progress import Progress
from .tuning.cli import add_cli as add_tune_cli

PROG = "tvm-fuse"
#: ``tvm-fuse bench`` suite -> its module in ``tvm_fuse.bench`` (the repository's benchmarks/)
SUITES = {
    "layers": "bench_layers",
    "models": "bench_models",
    "onnx": "bench_onnx",
    "tuning": "bench_tuning",
    "zoo": "zoo",
    "peak": "fma_peak",
}
#: what ``tvm-fuse bench`` (``all``) runs
ALL = ("layers", "models")
#: tvmc's default package name
DEFAULT_PACKAGE = "module.tar"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and exit status 2) like every user error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- the commands ----------------------------------------------------------------------------
def _relax_backend(args) -> bool:
    """Whether the command runs on the Relax backend (``--backend``, else the installed TVM's);
    a backend the installed TVM lacks is a user error."""
    from . import backend  # pylint: disable=import-outside-toplevel

    installed = backend.installed()
    wanted = getattr(args, "backend", None) or installed
    if wanted != installed:
        needs = {"relay": "TVM 0.19 (xtc-tvm-python-bindings)", "relax": "apache-tvm 0.27"}
        raise UserError(
            f"--backend {wanted} needs {needs[wanted]}, but this environment has the {installed} "
            f"stack; the Relax backend's venv is made by .ci/relax-env DIR"
        )
    return wanted == "relax"


def _demo(args, _extra) -> int:
    if _relax_backend(args):
        from .relax import commands  # pylint: disable=import-outside-toplevel

        return commands.demo()
    from . import demo  # pylint: disable=import-outside-toplevel

    return demo.main()


def _compile_relax(args) -> int:
    from . import output_files  # pylint: disable=import-outside-toplevel
    from .relax import commands  # pylint: disable=import-outside-toplevel

    output = commands.DEFAULT_LIBRARY if args.output == DEFAULT_PACKAGE else args.output
    output = output_files.check_output(
        output,
        args.model,
        kind="a shared library",
        example="model.so",
        is_kind=commands.is_shared_library,
        force=args.force,
    )
    with output_files.scratch_dir(output) as scratch:
        built = Path(scratch) / output.name
        commands.compile_onnx(
            args.model,
            built,
            args.target,
            args.input_shapes,
            args.tuning_records,
            algorithm=args.algorithm,
            precision=args.precision,
        )
        os.replace(built, output)
    print(
        f"wrote {output}: a Relax VM library; run it with relax.VirtualMachine("
        f"tvm.runtime.load_module({str(output)!r}), tvm.cpu())"
    )
    return 0


def _tune(args, extra) -> int:
    if _relax_backend(args):
        from .relax import commands  # pylint: disable=import-outside-toplevel

        return commands.tune_onnx(args)
    from .tuning import cli  # pylint: disable=import-outside-toplevel

    return cli.run(args, extra)


def _compile(args, _extra) -> int:
    if _relax_backend(args):
        return _compile_relax(args)
    from . import package  # pylint: disable=import-outside-toplevel

    apply_verbosity(args, package.QUIET_LOGGERS)
    done = package.compile_onnx(
        args.model,
        args.output,
        target=args.target,
        input_shapes=args.input_shapes,
        tuning_records=args.tuning_records,
        progress=Progress(quiet=args.quiet),
        force=args.force,
        algorithm=args.algorithm,
        precision=args.precision,
    )
    print(
        f"wrote {done.package}: a tvmc package with {len(done.kernels)} fused kernels for "
        f"{done.target}\nrun it with: python -m tvm.driver.tvmc run --inputs INPUTS.npz "
        f"--print-top 5 {done.package}"
    )
    return 0


def _explain(args, _extra) -> int:
    if _relax_backend(args):
        from .relax import commands  # pylint: disable=import-outside-toplevel

        mod = commands.load(args.model, args.input_shapes)
        print(f"model: {args.model}")
        print(commands.explain(mod, commands.target_of(args.target)))
        return 0
    from . import explain, package, user_inputs  # pylint: disable=import-outside-toplevel

    apply_verbosity(args, package.QUIET_LOGGERS)
    progress = Progress(quiet=args.quiet)
    target = user_inputs.check_target(args.target)
    model = package.load_checked(args.model, args.input_shapes, progress)
    with progress.stage("optimizing and planning memory"):
        report = explain.explain(
            model.mod,
            model.params,
            target,
            memory=not args.no_memory,
            algorithm=args.algorithm,
            precision=args.precision,
        )
    print(f"model: {args.model}")
    print(report)
    return 0


def bench_commands(args, extra) -> list[list[str]]:
    """The command lines ``tvm-fuse bench`` runs: one ``python -m tvm_fuse.bench.X`` per suite."""
    names = list(ALL) if args.suite == "all" else [args.suite]
    if args.json and len(names) > 1:
        raise UserError(
            f"--json {args.json}: one file for {len(names)} suites ({', '.join(names)}); name "
            "one suite, or give --results DIR to get DIR/SUITE.json for each"
        )
    flags = ["--results", str(args.results)] + (["--quick"] if args.quick else [])
    flags += ["--json", str(args.json)] if args.json else []
    module = f"{__package__}.bench."
    return [[sys.executable, "-m", module + SUITES[name], *flags, *extra] for name in names]


def _bench(args, extra) -> int:
    status = 0
    for command in bench_commands(args, extra):
        script = command[2]
        print(f"{PROG} bench: running {script} {' '.join(command[3:])}", file=sys.stderr)
        start = time.perf_counter()
        code = subprocess.call(command)
        print(
            f"{PROG} bench: {script} finished in {time.perf_counter() - start:.1f} s "
            f"(exit status {code})",
            file=sys.stderr,
        )
        status = status or code
    return status


def _tvmc(argv) -> int:
    """Stock tvmc, after the checks it lacks: the composite target's llvm part (the shared
    target check), ONNX external data, an ``-o`` that would overwrite the model or a file that
    is not a tvmc package (stock tvmc overwrites anything)."""
    from . import target, tvmc, user_inputs  # pylint: disable=import-outside-toplevel

    spellings = {"-o": "--output", "--output": "--output", "--target": "--target"}
    flags = tvmc.flags_of(argv, spellings)
    if flags.get("--target", "").replace(" ", "").startswith(target.COMPOSITE_PREFIX):
        target.as_target(flags["--target"], spelled="--target ")
    for index, arg in enumerate(argv):
        if index in flags.values_at or not Path(arg).is_file():
            continue
        if arg.lower().endswith(".onnx"):
            user_inputs.read_onnx(arg)  # tvmc's loader reads external data wherever it points
        if argv[:1] == ["compile"] and "--output" in flags:
            user_inputs.check_output(flags["--output"], arg, force=None)
    return tvmc.main(argv)


# -- the parser ------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    top = _Parser(prog=PROG, description="Fused conv+BN+activation NHWC kernels for TVM Relay.")
    add_verbosity(top)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="take the seed's conv+BN+ReLU through the pipeline")
    add_backend_option(demo)
    demo.set_defaults(run=_demo)

    compile_ = commands.add_parser("compile", help="compile an ONNX model into a tvmc package")
    add_model_options(compile_)
    add_algorithm_options(compile_)
    compile_.add_argument(
        "-o",
        "--output",
        default=DEFAULT_PACKAGE,
        metavar="PATH",
        help=f"the tvmc package to write (default: {DEFAULT_PACKAGE}, as tvmc); an existing file "
        "there is replaced only if it is a tvmc package, never if it is the model",
    )
    compile_.add_argument(
        "--force", action="store_true", help="replace an existing -o file of any kind"
    )
    compile_.add_argument(
        "--tuning-records",
        metavar="PATH",
        help="tuning records of 'tvm-fuse tune' (Relay: an AutoTVM log; Relax: its JSON records)",
    )
    add_backend_option(compile_)
    compile_.set_defaults(run=_compile)

    explain = commands.add_parser("explain", help="what tvm_fuse fuses in a model, and why not")
    add_model_options(explain)
    add_algorithm_options(explain)
    explain.add_argument("--no-memory", action="store_true", help="skip the memory plan")
    add_backend_option(explain)
    explain.set_defaults(run=_explain)

    bench = commands.add_parser(
        "bench",
        help="run the benchmarks (other options go to the suite)",
        description="Benchmarks against stock TVM, PyTorch and ONNX Runtime. Options not listed "
        "here go to the suite: see 'python -m tvm_fuse.bench.bench_layers --help' etc.",
    )
    bench.add_argument(
        "suite",
        nargs="?",
        default="all",
        choices=[*SUITES, "all"],
        help=f"what to run (all: {' and '.join(ALL)})",
    )
    bench.add_argument(
        "--quick", action="store_true", help="a short subset of each suite, few repeats"
    )
    bench.add_argument(
        "--results",
        default=str(RESULTS),
        metavar="DIR",
        help=f"folder for the JSON results (default: ./{RESULTS})",
    )
    bench.add_argument("--json", metavar="PATH", help="JSON file of a single suite")
    bench.set_defaults(run=_bench)

    add_tune_cli(commands)
    add_backend_option(commands.choices["tune"])
    commands.choices["tune"].set_defaults(run=_tune)

    commands.add_parser(
        "tvmc",
        add_help=False,
        help='tvmc with tvm_fuse loaded: tvm-fuse tvmc compile --target "tvm_fuse, llvm" ...',
    )
    return top


def main(argv=None) -> int:
    """Run the ``tvm-fuse`` command line ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["tvmc"]:  # everything after it is tvmc's, --help included
            return _tvmc(argv[1:])
        top = parser()
        args, extra = top.parse_known_args(argv)
        if extra and args.command != "bench":
            top.error(f"unrecognized arguments: {' '.join(extra)}")
        return args.run(args, extra)
    except UserError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
