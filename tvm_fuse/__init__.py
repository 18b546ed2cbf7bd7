"""tvm_fuse: conv -> BatchNorm -> activation chains compiled into fused NHWC kernels for TVM Relay.

Importing the package registers the fused Relay op and its TOPI strategy, and nothing else: it
leaves the process environment alone. How the pieces fit: ``docs/architecture.md``.
"""

from . import interrupts

if interrupts.is_command_line():  # before TVM loads: Ctrl-C while it imports is one line too
    interrupts.install()

from . import op, strategy  # noqa: E402,F401  (importing them registers the fused op and strategy)
from .pipeline import build, describe, optimize, pipeline  # noqa: E402
from .spec import KernelSpec, TensorSpec  # noqa: E402
from .target import host_target  # noqa: E402
from .tuning import tune  # noqa: E402

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
