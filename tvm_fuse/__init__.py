"""tvm_fuse: conv -> BatchNorm -> activation chains compiled into fused NHWC kernels for TVM Relay.

Importing the package registers the fused Relay op and its TOPI strategy.
"""

import os

# No network here: without this, autotvm tries to download TopHub logs on every build.
os.environ.setdefault("TOPHUB_LOCATION", "NONE")

from . import op  # noqa: E402  (registers tvm_fuse.conv2d_nhwc_fused)
from .spec import KernelSpec, TensorSpec  # noqa: E402

__all__ = ["KernelSpec", "TensorSpec", "op"]
