"""The Relax backend's meeting point: which kernel runs a spec on a target, and its weight layout.

The Relax counterpart of ``tvm_fuse.strategy`` (which registers a Relay op strategy and cannot be
imported without Relay), with the same rules and the same refusal sentences: the fast kernel on
x86 LLVM targets for float32 specs whose output is not tiny, its weight packed as ``OHWI{VL}o``
(``schedules.packing``), VL from the target's CPU features (``compat.simd_lanes``); else the
generic kernel on the HWIO weight. Which 3x3 convs (stride 1 or 2) run as Winograd, and with
which tile, is the Relay backend's cost model (``schedules.winograd_tiling``); their weight is
transformed to ``WINO{m}_{VL}o`` or ``WINO{m}S2_{VL}o`` (``schedules.winograd_weights``). A
depthwise conv's weight is packed ``OHW{VL}o`` for the depthwise kernel (``schedules.depthwise``).
"""

from __future__ import annotations

import dataclasses

from ..schedules import tiling, winograd_tiling
from ..spec import KernelSpec
from . import compat


def fast_path_refusal(spec: KernelSpec, target) -> str | None:
    """Why the fast kernel does not apply to ``spec`` on ``target``, or None when it does
    (the rule: ``tiling.fast_path_refusal``, shared with the Relay backend)."""
    return tiling.fast_path_refusal(
        spec, str(target), compat.is_x86_llvm(target), compat.num_cores(target)
    )


def cores(target) -> int:
    """The cores the kernels are planned for: the target's ``num-cores``, else the tile model's
    default (as the Relay backend reads its target)."""
    return int(target.attrs["num-cores"]) if "num-cores" in target.attrs else 0


def winograd_tile(spec: KernelSpec, target, tiles=winograd_tiling.TILES) -> int:
    """m of the Winograd F(m x m, 3x3) kernel (one of ``tiles``) the cost model expects to be
    faster than the direct kernel for the direct ``spec`` on ``target``, or 0 (direct)."""
    if fast_path_refusal(spec, target):
        return 0
    return winograd_tiling.tile_for_spec(spec, compat.simd_lanes(target), cores(target), tiles)


def with_algorithm(spec: KernelSpec, target, tiles=winograd_tiling.TILES) -> KernelSpec:
    """``spec`` (an HWIO conv) with the algorithm the cost model picks among ``tiles`` (none:
    direct) on ``target``."""
    m = winograd_tile(spec, target, tiles)
    if not m:
        return dataclasses.replace(spec, algorithm="direct", winograd_tile=0)
    return dataclasses.replace(spec, algorithm="winograd", winograd_tile=m)


def preferred_spec(spec: KernelSpec, target) -> KernelSpec:
    """``spec`` with the weight layout its kernel wants on ``target``: the Winograd-domain
    ``WINO{m}_{VL}o`` for a Winograd spec, packed ``OHWI{VL}o`` for the direct fast kernel,
    ``OHW{VL}o`` (VL a divisor of C: ``packing.depthwise_lanes``) for the depthwise one, HWIO
    (``spec`` unchanged, direct) for the generic one; the fast path's layouts are
    ``tiling.fast_weight_spec``'s, as on Relay."""
    if spec.weight.layout != "HWIO":
        return spec
    if fast_path_refusal(spec, target):
        return dataclasses.replace(spec, algorithm="direct", winograd_tile=0)
    mcpu = str(target.attrs.get("mcpu", ""))
    return tiling.fast_weight_spec(spec, compat.simd_lanes(target), mcpu)
