"""tvm_fuse: conv -> BatchNorm -> activation chains compiled into fused NHWC kernels for TVM Relay.

The public names (``build``, ``pipeline``, ...) load on first use, and with them the fused Relay
op and its TOPI strategy are registered; importing the bare package (as ``tvm-fuse --help``
does) imports no TVM and leaves the process environment alone. How the pieces fit:
``docs/architecture.md``.
"""

import importlib
import importlib.util

from . import interrupts
from .lazy import lazy_exports

if interrupts.is_command_line():  # before TVM loads: Ctrl-C while it imports is one line too
    interrupts.install()

#: public name -> the submodule that defines it
_EXPORTS = {
    "KernelSpec": "spec",
    "TensorSpec": "spec",
    "build": "api",
    "describe": "api",
    "optimize": "api",
    "pipeline": "api",
    "host_target": "target",
    "lowering_context": "lowering",
    "tune": "tuning",
}
__all__ = sorted(_EXPORTS)


def _register() -> None:
    """Register the fused op and its strategy, and the tuning layer's log checker (which
    ``build(..., tuning_records=...)`` uses through ``tvm_fuse.dispatch``). Under the Relax stack
    (apache-tvm, no ``tvm.relay``) there is nothing to register: its backend is
    ``tvm_fuse.relax``."""
    if importlib.util.find_spec("tvm.relay") is None:
        return
    importlib.import_module(".strategy", __name__)
    importlib.import_module(".tuning.records", __name__)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, before=_register)
