"""The Relax backend's meeting point: which kernel runs a spec on a target, and its weight layout.

The Relax counterpart of ``tvm_fuse.strategy`` (which registers a Relay op strategy and cannot be
imported without Relay), with the same rules and the same refusal sentences: the fast kernel on
x86 LLVM targets for float32 specs whose output is not tiny, its weight packed as ``OHWI{VL}o``
(``schedules.packing``), VL from the target's CPU features (``compat.simd_lanes``); else the
generic kernel on the HWIO weight. Winograd is not ported yet: every spec runs direct.
"""

from __future__ import annotations

import dataclasses

from ..schedules import packing, tiling
from ..spec import KernelSpec
from . import compat


def fast_path_refusal(spec: KernelSpec, target) -> str | None:
    """Why the fast kernel does not apply to ``spec`` on ``target``, or None when it does
    (the rule: ``tiling.fast_path_refusal``, shared with the Relay backend)."""
    return tiling.fast_path_refusal(
        spec, str(target), compat.is_x86_llvm(target), compat.num_cores(target)
    )


def preferred_spec(spec: KernelSpec, target) -> KernelSpec:
    """``spec`` with the weight layout its kernel wants on ``target``: packed ``OHWI{VL}o`` for
    the fast kernel, HWIO (``spec`` unchanged, direct) for the generic one."""
    spec = dataclasses.replace(spec, algorithm="direct", winograd_tile=0)
    if spec.weight.layout != "HWIO" or fast_path_refusal(spec, target):
        return spec
    return dataclasses.replace(spec, weight=packing.packed_weight(spec, compat.simd_lanes(target)))
