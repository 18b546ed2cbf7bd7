"""The ``tvm-fuse`` command (also ``python -m tvm_fuse``).

    tvm-fuse demo                                   the seed's conv+BN+ReLU through the pipeline
    tvm-fuse compile MODEL.onnx -o out.tar [--target T] [--input-shapes S] [--tuning-records F]
    tvm-fuse explain MODEL.onnx [--input-shapes S] [--target T]
    tvm-fuse bench [layers|models|all] [--quick] [script options...]
    tvm-fuse tvmc ARGS...                           stock tvmc with the tvm_fuse composite target

This module only parses the command line and keeps the error boundary: a
:class:`~tvm_fuse.errors.UserError` (or a command-line mistake) is one line on stderr and exit
status 2, never a traceback. The work is in ``package``, ``explain``, ``demo`` and ``tvmc``,
imported when a command runs so that ``--help`` stays fast (the lazy imports).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


from .errors import UserError
from .progress import Progress
from .shape_text import parse_input_shapes
from .tuning import add_cli as add_tune_cli

PROG = "tvm-fuse"
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SUITES = {"layers": "bench_layers.py", "models": "bench_models.py"}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and exit status 2) like every user error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- the commands ----------------------------------------------------------------------------
def _demo(_args, _extra) -> int:
    from . import demo  # pylint: disable=import-outside-toplevel

    return demo.main()


def _compile(args, _extra) -> int:
    from . import package  # pylint: disable=import-outside-toplevel

    package.quiet_tvm_loggers()
    output = Path(args.model).with_suffix(".tar").name if args.output is None else args.output
    done = package.compile_onnx(
        args.model,
        output,
        target=args.target,
        input_shapes=args.input_shapes,
        tuning_records=args.tuning_records,
        progress=Progress(quiet=args.quiet),
        force=args.force,
    )
    print(
        f"wrote {done.package}: a tvmc package with {len(done.kernels)} fused kernels for "
        f"{done.target}\nrun it with: python -m tvm.driver.tvmc run --inputs INPUTS.npz "
        f"--print-top 5 {done.package}"
    )
    return 0


def _explain(args, _extra) -> int:
    from . import explain, package, user_inputs  # pylint: disable=import-outside-toplevel

    package.quiet_tvm_loggers()
    progress = Progress(quiet=args.quiet)
    target = user_inputs.check_target(args.target)
    model = package.load_checked(args.model, args.input_shapes, progress)
    with progress.stage("optimizing and planning memory"):
        report = explain.explain(model.mod, model.params, target, memory=not args.no_memory)
    print(f"model: {args.model}")
    print(report)
    return 0


def bench_commands(suite: str, quick: bool, extra) -> list[list[str]]:
    """The benchmark script command lines ``tvm-fuse bench`` runs."""
    if not BENCHMARKS.is_dir():
        raise UserError(
            f"{BENCHMARKS}: the benchmarks are not installed; run 'tvm-fuse bench' from a "
            "source checkout installed with 'pip install -e .'"
        )
    names = list(SUITES) if suite == "all" else [suite]
    flags = (["--quick"] if quick else []) + list(extra)
    return [[sys.executable, str(BENCHMARKS / SUITES[name]), *flags] for name in names]


def _bench(args, extra) -> int:
    status = 0
    for command in bench_commands(args.suite, args.quick, extra):
        script = Path(command[1]).name
        print(f"{PROG} bench: running {script} {' '.join(command[2:])}", file=sys.stderr)
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

    flags = _tvmc_flags(argv)
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


class _Flags(dict):
    """Flag -> value of a tvmc command line, and the indices the values sit at."""

    values_at: set


def _tvmc_flags(argv) -> _Flags:
    """``--target`` and ``--output`` (also ``-o``, ``--flag=value``) of a tvmc command line."""
    names = {"-o": "--output", "--output": "--output", "--target": "--target"}
    flags = _Flags()
    flags.values_at = set()
    for index, arg in enumerate(argv):
        name, sep, value = arg.partition("=")
        if name in names and sep:
            flags[names[name]] = value
        elif arg in names and index + 1 < len(argv):
            flags[names[arg]] = argv[index + 1]
            flags.values_at.add(index + 1)
    return flags


# -- the parser ------------------------------------------------------------------------------
def _add_model_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    command.add_argument(
        "--target", help="llvm target string (default: this CPU, e.g. 'llvm -mcpu=znver3')"
    )
    command.add_argument(
        "--input-shapes",
        type=parse_input_shapes,
        help='static input shapes, tvmc syntax: "data:[1,3,224,224] other:[1,10]"',
    )
    command.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog=PROG, description="Fused conv+BN+activation NHWC kernels for TVM Relay.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="take the seed's conv+BN+ReLU through the pipeline")
    demo.set_defaults(run=_demo)

    compile_ = commands.add_parser("compile", help="compile an ONNX model into a tvmc package")
    _add_model_options(compile_)
    compile_.add_argument(
        "-o",
        "--output",
        help="package path (default: MODEL.tar here); an existing file there is replaced only if "
        "it is a tvmc package, never if it is the model",
    )
    compile_.add_argument(
        "--force", action="store_true", help="replace an existing -o file of any kind"
    )
    compile_.add_argument("--tuning-records", metavar="PATH", help="AutoTVM tuning log")
    compile_.set_defaults(run=_compile)

    explain = commands.add_parser("explain", help="what tvm_fuse fuses in a model, and why not")
    _add_model_options(explain)
    explain.add_argument("--no-memory", action="store_true", help="skip the memory plan")
    explain.set_defaults(run=_explain)

    bench = commands.add_parser(
        "bench", help="run the benchmarks (other options go to the scripts)"
    )
    bench.add_argument("suite", nargs="?", default="all", choices=[*SUITES, "all"])
    bench.add_argument("--quick", action="store_true", help="few short repeats")
    bench.set_defaults(run=_bench)

    add_tune_cli(commands)

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
