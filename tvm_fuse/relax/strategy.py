"""The Relax backend's meeting point: which kernel runs a spec on a target, and its weight layout.

The Relax counterpart of ``tvm_fuse.strategy`` (which registers a Relay op strategy and cannot be
imported without Relay), with the same rules and the same refusal sentences: the fast kernel on
x86 LLVM targets for float32 specs whose output is not tiny, its weight packed as ``OHWI{VL}o``
(``schedules.packing``), VL from the target's CPU features (``compat.simd_lanes``); else the
generic kernel on the HWIO weight. Winograd is not ported yet: every spec runs direct.
"""

from __future__ import annotations

import dataclasses

from ..schedules import packing
from ..spec import KernelSpec
from . import compat

#: Below this many output values per core the kernel launch and packing are not worth it.
MIN_OUTPUTS_PER_CORE = 64


def fast_path_refusal(spec: KernelSpec, target) -> str | None:
    """Why the fast kernel does not apply to ``spec`` on ``target``, or None when it does."""
    if not compat.is_x86_llvm(target):
        return f"target {target} is not x86 llvm"
    dtypes = {spec.data.dtype, spec.weight.dtype, spec.out.dtype}
    if dtypes != {"float32"}:
        return f"dtypes {sorted(dtypes)} are not float32"
    outputs = 1
    for dim in spec.out.shape:
        outputs *= dim
    if outputs < MIN_OUTPUTS_PER_CORE * max(1, compat.num_cores(target)):
        return f"output {spec.out.shape} is tiny"
    return None


def preferred_spec(spec: KernelSpec, target) -> KernelSpec:
    """``spec`` with the weight layout its kernel wants on ``target``: packed ``OHWI{VL}o`` for
    the fast kernel, HWIO (``spec`` unchanged, direct) for the generic one."""
    spec = dataclasses.replace(spec, algorithm="direct", winograd_tile=0)
    if spec.weight.layout != "HWIO" or fast_path_refusal(spec, target):
        return spec
    return dataclasses.replace(spec, weight=packing.packed_weight(spec, compat.simd_lanes(target)))
