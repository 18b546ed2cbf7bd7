"""The packed weight layouts the fast kernels ask for: ``[Co/VL, Kh, Kw, Ci, VL]`` (``OHWI{VL}o``),
and the depthwise kernel's ``[C/VL, Kh, Kw, VL]`` (``OHW{VL}o``).

VL is the target's SIMD width in fp32 lanes, so one VL-slice of the last axis is one vector
register of output-channel weights. ``tvm_fuse.strategy.preferred_spec`` names this layout in the
spec and the graph half's ``PackWeights`` computes it from the HWIO weight; this module gives the
layout, the packed tensor's description and the NumPy reference of the transform (for tests). A
Co that is not a multiple of VL is padded with zero output channels up to whole vectors; the
kernel computes them and never stores them.
"""

import dataclasses

import numpy as np

from ..spec import TensorSpec


def packed_layout(lanes: int) -> str:
    """The TVM layout string of the packed weight for ``lanes`` fp32 lanes, e.g. ``OHWI8o``."""
    return f"OHWI{int(lanes)}o"


def padded_channels(channels: int, lanes: int) -> int:
    """``channels`` rounded up to a multiple of ``lanes``: the Co of the packed weight."""
    return -(-int(channels) // int(lanes)) * int(lanes)


def packed_weight(spec, lanes: int) -> TensorSpec:
    """The packed weight of a conv ``spec`` (HWIO weight) for ``lanes`` fp32 lanes."""
    kh, kw = spec.kernel_size
    co_vectors = padded_channels(spec.out_channels, lanes) // lanes
    shape = (co_vectors, kh, kw, spec.in_channels, lanes)
    return TensorSpec(shape, packed_layout(lanes), spec.weight.dtype)


def pack_hwio(weight: np.ndarray, lanes: int) -> np.ndarray:
    """NumPy reference of zero-padding Co to :func:`padded_channels`, then
    ``layout_transform(weight, "HWIO", "OHWI{lanes}o")``."""
    kh, kw, ci, co = weight.shape
    co_pad = padded_channels(co, lanes)
    weight = np.pad(weight, ((0, 0), (0, 0), (0, 0), (0, co_pad - co)))
    blocked = weight.reshape(kh, kw, ci, co_pad // lanes, lanes)
    return np.ascontiguousarray(blocked.transpose(3, 0, 1, 2, 4))


# -- the depthwise kernel's weight: [C/VL, Kh, Kw, VL] (``OHW{VL}o``) ---------------------------
#: The narrowest vector the depthwise kernel uses: a C that 4 does not divide takes the generic
#: kernel (the data has exactly C channels, so C cannot be padded as Co is above).
MIN_DEPTHWISE_LANES = 4


def depthwise_lanes(channels: int, lanes: int) -> int | None:
    """VL of the depthwise kernel for ``channels``: the widest of ``lanes``, ``lanes / 2``, ...
    down to ``MIN_DEPTHWISE_LANES`` that divides ``channels``, or None."""
    while lanes >= MIN_DEPTHWISE_LANES:
        if channels % lanes == 0:
            return lanes
        lanes //= 2
    return None


def packed_depthwise_weight(spec, lanes: int) -> TensorSpec:
    """The packed weight of a depthwise ``spec`` (HWIO weight ``[Kh, Kw, 1, C]``) for ``lanes``
    lanes (a divisor of C: :func:`depthwise_lanes`)."""
    kh, kw = spec.kernel_size
    shape = (spec.out_channels // lanes, kh, kw, lanes)
    return TensorSpec(shape, f"OHW{int(lanes)}o", spec.weight.dtype)


def with_finite_weight(wanted, weight: np.ndarray):
    """``wanted`` (a packed spec) with ``finite_weight`` set from the values of its constant
    ``weight`` where its kernel reads the fact: the depthwise one, which then reads a padded
    input in place (``schedules.depthwise``); other specs as they are."""
    if not wanted.depthwise:
        return wanted
    return dataclasses.replace(wanted, finite_weight=bool(np.isfinite(weight).all()))


def pack_depthwise_hwio(weight: np.ndarray, lanes: int) -> np.ndarray:
    """NumPy reference of packing a depthwise ``[Kh, Kw, 1, C]`` weight to ``[C/VL, Kh, Kw,
    VL]``."""
    kh, kw, _, channels = weight.shape
    blocked = weight.reshape(kh, kw, channels // lanes, lanes)
    return np.ascontiguousarray(blocked.transpose(2, 0, 1, 3))
