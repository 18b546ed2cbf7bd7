"""tvm_fuse: conv -> BatchNorm -> activation chains compiled into fused NHWC kernels for TVM Relay.

The public names (``build``, ``pipeline``, ...) load on first use, and with them the fused Relay
op and its TOPI strategy are registered; importing the bare package (as ``tvm-fuse --help``
does) does not import TVM.
"""

import importlib
import os

from .lazy import lazy_exports

# No network here: without this, autotvm tries to download TopHub logs on every build.
os.environ.setdefault("TOPHUB_LOCATION", "NONE")

#: public name -> the submodule that defines it
_EXPORTS = {
    "KernelSpec": "spec",
    "TensorSpec": "spec",
    "build": "pipeline",
    "describe": "pipeline",
    "optimize": "pipeline",
    "pipeline": "pipeline",
    "host_target": "target",
    "tune": "tuning",
}
__all__ = sorted(_EXPORTS)


def _register_op() -> None:
    importlib.import_module(".strategy", __name__)  # registers the fused op and its strategy


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, before=_register_op)
