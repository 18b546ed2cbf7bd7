"""The bytes of a module's weights: what a build holds, and what a run reads (both backends).

A Winograd kernel's stored weight holds its transformed points and, after them, the conv's 3x3
taps, which only the non-finite fallback reads (``schedules.winograd_weights``): the module holds
them, a finite run never reads them. ``tvm-fuse explain`` prints :func:`weights_table` on either
backend; the benchmarks' profiles count the bytes a run reads with :func:`fallback_bytes`.
"""

from __future__ import annotations

from ..schedules import winograd_weights
from .liveness import tensor_bytes


def fallback_bytes(kernels) -> int:
    """Bytes of the weights of ``kernels`` (``KernelSpec``s, one per kernel) that only a
    non-finite fallback reads: a whole run reads the module's weights less these."""
    shapes = [(winograd_weights.fallback_tap_shape(s), s.weight.dtype) for s in kernels]
    return sum(tensor_bytes(shape, dtype) for shape, dtype in shapes if shape is not None)


def weights_table(model: int, fused: int, fallback: int) -> str:
    """The ``weights`` section of ``tvm-fuse explain``: the bytes of the model's constants
    against tvm_fuse's (weights packed, transformed, BatchNorm folded in), and the ``fallback``
    bytes among the latter."""
    lines = [
        f"{'':<22}{'the model':>16}{'tvm_fuse':>16}",
        f"{'constants':<22}{model:>16,}{fused:>16,}",
    ]
    if fallback:
        lines.append(f"{'  of which fallback':<22}{'':>16}{fallback:>16,}")
        lines.append("(fallback: the Winograd kernels' direct taps, read only for a tile whose")
        lines.append(" input is not finite)")
    lines.append("(bytes of the constants; params left unbound are not counted)")
    return "\n".join(lines)
