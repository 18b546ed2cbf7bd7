"""tvm_fuse inside tvmc: a composite target, and tvmc with it loaded.

tvmc has no flag for custom passes; its extension point is the composite-target registry
(``tvm.driver.tvmc.composite_target.REGISTERED_CODEGEN``). :func:`register` adds
``tvm_fuse`` to it, so that ``--target "tvm_fuse, llvm -mcpu=znver3"`` runs ``tvm_fuse.optimize``
on the model before tvmc's own ``relay.build``. ``tvm_fuse`` is not a TVM target kind, so tvmc's
target parser treats it as an extra target and builds everything for the ``llvm`` one: the
pipeline does not partition the graph and there is no external codegen — the fused op is an
ordinary Relay op whose strategy compiles it for llvm. The package tvmc writes is an ordinary
tvmc package that the stock ``tvmc run`` runs.

    python -m tvm_fuse.tvmc compile --target "tvm_fuse, llvm -mcpu=znver3" -o out.tar model.onnx
    tvm-fuse tvmc compile ...          # the same

Every stock option stays (``--tuning-records``, ``--input-shapes``, ``--pass-config``, ...): AutoTVM
records of the fused kernel (``conv2d_nhwc_fused.x86``) apply to it like to any TOPI op. Not
covered: ``tvmc tune`` runs the pipeline too, but AutoTVM's task extraction disables
AlterOpLayout, where the fused op's weights are packed, so it finds no fused-kernel tasks. The
composite target takes no options of its own: ``--target "tvm_fuse -x=1, llvm"`` is refused.
"""

from __future__ import annotations

import sys

import tvm
from tvm.driver import tvmc as stock_tvmc
from tvm.driver.tvmc import composite_target
from tvm.driver.tvmc import main as tvmc_main

from . import onnx_compat
from .dispatch import build_context
from .pipeline import optimize

NAME = "tvm_fuse"


def pass_pipeline(mod: tvm.IRModule, params=None, mod_name: str = "default", **opts):
    """The composite target's pipeline: ``tvm_fuse.optimize(mod, params)``.

    tvmc calls it inside its ``PassContext`` with ``mod_name`` (``tvmc compile``) or without
    (``tvmc tune``) and the options written after the name in ``--target``; it builds the
    returned module for the llvm target with the same ``params``.
    """
    del mod_name  # one module per package; the fused kernels need no name of their own
    if opts:
        raise stock_tvmc.TVMCException(
            f"composite target {NAME!r} takes no options, got {sorted(opts)}; "
            f'write --target "{NAME}, llvm -mcpu=..."'
        )
    return optimize(mod, params)


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


def main(argv=None) -> int:
    """tvmc with tvm_fuse registered: ``main(["compile", ...])``; returns tvmc's exit code."""
    register()
    onnx_compat.install()
    # tvmc's ``main()`` reads sys.argv and exits; ``_main(argv)`` is the same without that.
    with build_context():  # TopHub off: a build without --tuning-records would download it
        return tvmc_main._main(  # pylint: disable=protected-access  (argv-taking entry point)
            list(sys.argv[1:] if argv is None else argv)
        )


if __name__ == "__main__":
    sys.exit(main())
