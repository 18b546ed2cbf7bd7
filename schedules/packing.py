"""The packed weight layout the fast kernel asks for: ``[Co/VL, Kh, Kw, Ci, VL]`` (``OHWI{VL}o``).

VL is the target's SIMD width in fp32 lanes, so one VL-slice of the last axis is one vector
register of output-channel weights. ``tvm_fuse.strategy`` asks Relay to transform the HWIO
constant into this layout at compile time; this module only names the layout and gives the NumPy
reference of the transform (for tests). It refuses channel counts that are not a multiple of VL.
"""

import re

import numpy as np

_PACKED = re.compile(r"^OHWI(\d+)o$")


def packed_layout(lanes: int) -> str:
    """The TVM layout string of the packed weight for ``lanes`` fp32 lanes, e.g. ``OHWI8o``."""
    return f"OHWI{int(lanes)}o"


def packed_lanes(layout: str) -> int | None:
    """VL of a packed layout string, or None when ``layout`` is not packed."""
    match = _PACKED.match(layout)
    return int(match.group(1)) if match else None


def pack_hwio(weight: np.ndarray, lanes: int) -> np.ndarray:
    """NumPy reference of ``layout_transform(weight, "HWIO", "OHWI{lanes}o")``."""
    kh, kw, ci, co = weight.shape
    if co % lanes:
        raise ValueError(
            f"pack_hwio: Co={co} of weight {weight.shape} is not a multiple of {lanes}"
        )
    blocked = weight.reshape(kh, kw, ci, co // lanes, lanes)
    return np.ascontiguousarray(blocked.transpose(3, 0, 1, 2, 4))
