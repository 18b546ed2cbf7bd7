"""tvm_fuse: conv -> BatchNorm -> activation chains compiled into fused NHWC kernels for TVM Relay.

Importing the package registers the fused Relay op and its TOPI strategy, and nothing else: it
leaves the process environment alone. How the pieces fit: ``docs/architecture.md``.
"""

from . import op, strategy  # noqa: F401  (importing them registers the fused op and strategy)
from .pipeline import build, describe, optimize, pipeline
from .spec import KernelSpec, TensorSpec
from .target import host_target
from .tuning import tune

__all__ = [
    "KernelSpec",
    "TensorSpec",
    "build",
    "describe",
    "host_target",
    "optimize",
    "pipeline",
    "tune",
]
