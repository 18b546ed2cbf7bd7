"""tvm_fuse inside tvmc: a composite target, and tvmc with it loaded.

tvmc has no flag for custom passes; its extension point is the composite-target registry
(``tvm.driver.tvmc.composite_target.REGISTERED_CODEGEN``). :func:`register` adds ``tvm_fuse`` to
it, so that ``--target "tvm_fuse, llvm -mcpu=<cpu>"`` runs ``tvm_fuse.optimize`` on the model
before tvmc's own ``relay.build`` (``compile``) or task extraction (``tune``). ``tvm_fuse`` is not
a TVM target kind, so tvmc's target parser treats it as an extra target and builds everything
for the ``llvm`` one: the pipeline does not partition the graph and there is no external codegen
— the fused op is an ordinary Relay op whose strategy compiles it for llvm. The package tvmc
writes is an ordinary tvmc package that the stock ``tvmc run`` runs.

    tvm-fuse tvmc compile --target "tvm_fuse, llvm -mcpu=$CPU" -o out.tar model.onnx
    tvm-fuse tvmc tune --target "tvm_fuse, llvm -mcpu=$CPU" -o records.log model.onnx
    tvm-fuse tvmc compile --target "tvm_fuse, llvm -mcpu=$CPU" --tuning-records records.log ...

(``CPU=$(python -c "import tvm; print(tvm.target.codegen.llvm_get_system_cpu())")``.) Every stock
option stays. ``tune`` finds the fused kernels' tasks (``conv2d_nhwc_fused.x86``) besides the
stock ones; its records and ``tvm-fuse tune``'s are the same records. :func:`main` runs tvmc
under the ``--target``'s TVM target, so the pipeline packs the weights for it; it resolves
``-mcpu=native`` (which TVM's LLVM would turn into ``generic``, no AVX) to this machine's CPU,
tunes with ``--tuner ga`` where tvmc's default, ``xgb``, lacks the xgboost package, and
gives tvmc's ``tune`` the TVM target where tvmc 0.19 passes the whole composite string to the
auto-scheduler's hardware parameters (it crashes there otherwise). With the ``tvm_fuse`` target,
``compile`` builds with tvm_fuse's lower pass (``tvm_fuse.lowering``), gives the graph executor
tvm_fuse's memory plan (``tvm_fuse.memory``) and applies
``--tuning-records`` by tvm_fuse's rule (each workload's config of lowest median time, the
analytic default kept unless that is clearly faster: ``tuning.records``), as ``tvm_fuse.build``
does. The composite target takes no options of its own: ``--target "tvm_fuse -x=1, llvm"`` is
refused.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from unittest import mock

import tvm
from tvm import autotvm
from tvm.driver import tvmc as stock_tvmc
from tvm.driver.tvmc import autotuner, compiler, composite_target
from tvm.driver.tvmc import main as tvmc_main
from tvm.driver.tvmc.target import target_from_cli

from . import onnx_compat
from .dispatch import build_context
from .api import optimize
from .errors import UserError
from .lowering import lowering_context
from .memory.apply import apply_to_factory
from .tuning.records import chosen_configs, default_indices, read_records
from .tuning.tuner import INSTALL_XGB, default_tuner

NAME = "tvm_fuse"


def pass_pipeline(mod: tvm.IRModule, params=None, mod_name: str = "default", **opts):
    """The composite target's pipeline: ``tvm_fuse.optimize(mod, params)``.

    tvmc calls it inside its ``PassContext`` with ``mod_name`` (``tvmc compile``) or without
    (``tvmc tune``) and the options written after the name in ``--target``; it builds the
    returned module for the llvm target with the same ``params``. The weights are packed for
    the current target (:func:`main` enters the ``--target``'s), else the host.
    """
    del mod_name  # one module per package; the fused kernels need no name of their own
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise stock_tvmc.TVMCException(
            f"composite target {NAME!r} takes only the options {', '.join(OPTIONS)}, got "
            f'{unknown}; write e.g. --target "{NAME} -algorithm=direct, llvm -mcpu=..."'
        )
    try:
        return optimize(mod, params, **opts)
    except ValueError as err:  # an unknown algorithm or precision
        raise stock_tvmc.TVMCException(str(err)) from None


#: The composite target's options (``--target "tvm_fuse -algorithm=direct, llvm"``), as
#: ``tvm_fuse.optimize`` takes them.
OPTIONS = ("algorithm", "precision")

ENTRY = {
    "config_key": None,  # no PassContext config of its own
    "pass_default": False,
    "default_target": "llvm",
    "pass_pipeline": pass_pipeline,
}


def register() -> None:
    """Add ``tvm_fuse`` to tvmc's composite targets (idempotent). Must run before tvmc parses
    its command line: tvmc builds its ``--target-*`` options from the registry."""
    composite_target.REGISTERED_CODEGEN[NAME] = ENTRY


_NATIVE = re.compile(r"-mcpu=native\b")


def resolve_native(argv: list[str]) -> list[str]:
    """``argv`` with ``-mcpu=native`` in a ``--target`` value (and ``--target-llvm-mcpu
    native``) replaced by this machine's CPU, which TVM's LLVM does not do itself."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    resolved, previous = [], None
    for arg in argv:
        if previous == "--target" or arg.startswith("--target="):
            arg = _NATIVE.sub(f"-mcpu={cpu}", arg)
        elif previous == "--target-llvm-mcpu" and arg == "native":
            arg = cpu
        resolved.append(arg)
        previous = arg
    return resolved


def _parsed_target(argv: list[str]):
    """tvmc's reading of ``argv``'s ``--target``: (TVM target, composite targets), or None."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--target=") else None
        if arg == "--target" and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None:
            try:
                target, extra = target_from_cli(value)
                return tvm.target.Target(target), [part["name"] for part in extra]
            except (stock_tvmc.TVMCException, ValueError, tvm.TVMError):
                return None  # tvmc reports a bad --target itself
    return None


@contextlib.contextmanager
def _around_compiler_build(around):
    """tvmc's ``compile`` builds with its own ``compiler.build``: it runs as
    ``around(build, *args, **kwargs)`` instead, ``build`` being the one in place before."""
    with mock.patch.object(compiler, "build", functools.partial(around, compiler.build)):
        yield


def _memory_plan():
    """The graph executor tvmc's ``compile`` builds gets tvm_fuse's memory plan where that is
    smaller than TVM's, as from ``tvm_fuse.build``."""
    return _around_compiler_build(lambda build, *args, **kw: apply_to_factory(build(*args, **kw)))


def _lowered(build, *args, **kwargs):
    with lowering_context():
        return build(*args, **kwargs)


def lowering_in_build():
    """tvmc's ``compile`` builds inside a PassContext of its own, which lacks tvm_fuse's lower
    pass (the weight prefetch, ``tvm_fuse.lowering``): its build step gets it back."""
    return _around_compiler_build(_lowered)


@contextlib.contextmanager
def _tvm_target_for_hardware_params():
    """tvmc 0.19's ``tune`` builds the auto-scheduler's ``HardwareParams`` from the raw
    ``--target`` string, which fails for every composite target; give it the TVM target."""
    stock = autotuner.auto_scheduler.HardwareParams

    def hardware_params(*args, target=None, **kwargs):
        if isinstance(target, str):
            target = target_from_cli(target)[0]
        return stock(*args, target=target, **kwargs)

    with mock.patch.object(autotuner.auto_scheduler, "HardwareParams", hardware_params):
        yield


@contextlib.contextmanager
def _config_choice():
    """tvmc's ``compile`` applies a log with AutoTVM's rule (each workload's fastest record);
    the ``tvm_fuse`` target applies it with ``tvm_fuse.build``'s (``records.chosen_configs``)."""
    stock = autotvm.apply_history_best

    def apply_history_best(records):
        if isinstance(records, (str, os.PathLike)):
            records = chosen_configs(read_records(records), default_indices())
        return stock(records)

    with mock.patch.object(autotvm, "apply_history_best", apply_history_best):
        yield


class Flags(dict):
    """Flag -> value of a tvmc command line, and the indices the values sit at."""

    values_at: set


def flags_of(argv: list[str], spellings: dict[str, str]) -> Flags:
    """The flags of a tvmc command line that ``spellings`` names (spelling -> flag, e.g.
    ``{"-o": "--output", "--output": "--output"}``), given as ``--flag value`` or
    ``--flag=value``; the last one counts, as in tvmc's argparse."""
    flags = Flags()
    flags.values_at = set()
    for index, arg in enumerate(argv):
        name, sep, value = arg.partition("=")
        if name in spellings and sep:
            flags[spellings[name]] = value
        elif arg in spellings and index + 1 < len(argv):
            flags[spellings[arg]] = argv[index + 1]
            flags.values_at.add(index + 1)
    return flags


def tuner_for_here(argv: list[str]) -> list[str]:
    """``argv`` of a tvmc ``tune`` whose tuner can run here. tvmc's default tuner, ``xgb``,
    needs the xgboost package; without it, ``--tuner ga`` is added, as ``tvm-fuse tune``
    chooses (a note on stderr says so), and an explicit ``xgb*`` tuner is refused in one line."""
    if argv[:1] != ["tune"] or default_tuner() == "xgb":
        return argv
    chosen = flags_of(argv, {"--tuner": "--tuner"}).get("--tuner")
    if chosen is None and "--tuner" not in argv:  # a bare last --tuner: tvmc's own error
        print(f"tvm_fuse.tvmc: xgboost is not installed, so --tuner ga ({INSTALL_XGB} for xgb)",
              file=sys.stderr)
        return argv[:1] + ["--tuner", "ga"] + argv[1:]
    if chosen and chosen.startswith("xgb"):
        raise UserError(f"--tuner {chosen} needs xgboost: {INSTALL_XGB} (or --tuner ga)")
    return argv


def main(argv=None) -> int:
    """tvmc with tvm_fuse registered: ``main(["compile", ...])``; returns tvmc's exit code."""
    register()
    onnx_compat.install()
    argv = tuner_for_here(resolve_native(list(sys.argv[1:] if argv is None else argv)))
    target, composites = _parsed_target(argv) or (None, [])
    with contextlib.ExitStack() as scope:
        scope.enter_context(build_context())  # TopHub off: a build without records downloads it
        scope.enter_context(_tvm_target_for_hardware_params())
        if target is not None:
            scope.enter_context(target)
        if NAME in composites:
            scope.enter_context(_memory_plan())
            scope.enter_context(lowering_in_build())
            scope.enter_context(_config_choice())
        # tvmc's ``main()`` reads sys.argv and exits; ``_main(argv)`` is the same without that.
        code = tvmc_main._main(argv)  # pylint: disable=protected-access  (argv-taking entry)
    return int(code or 0)  # tvmc's tune returns None when it is done


if __name__ == "__main__":
    sys.exit(main())
