"""Which backend the installed TVM runs: Relay (TVM 0.19) or Relax (apache-tvm 0.27).

Both stacks install the module ``tvm`` and cannot share an environment. The Relay backend is the
package's top level (``tvm_fuse.build``, ...); the Relax backend is ``tvm_fuse.relax``, whose
submodules import only under apache-tvm. Asking imports ``tvm`` (not Relay nor Relax).
"""

from __future__ import annotations

import importlib.util

#: The Relax backend's subpackage; its submodules need apache-tvm
RELAX_PACKAGE = "tvm_fuse.relax"


def installed() -> str:
    """``"relay"`` when the installed TVM has Relay (TVM 0.19), else ``"relax"``."""
    return "relay" if importlib.util.find_spec("tvm.relay") is not None else "relax"


def importable(module: str, stack: str | None = None) -> bool:
    """Whether ``module`` (a dotted name of this package) imports under ``stack`` (None: the
    installed one). Under Relay, the Relax backend's submodules do not; under Relax, every
    module of the Relay backend that imports Relay does not (only the Relax backend and the
    foundation are meant for it)."""
    stack = stack or installed()
    relax_only = module.startswith(RELAX_PACKAGE + ".")
    return stack == "relax" or not relax_only
