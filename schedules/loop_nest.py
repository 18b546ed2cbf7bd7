"""The kernel half's loop nest for a task, in words: what ``tvm-fuse explain`` prints under each
fast kernel, so that the report shows the local decisions beside the graph half's global ones.

These are the tile models' choices, the ones both backends' schedules take when no tuning record
applies (``tiling.tiles_for`` for the direct kernel, ``winograd_tiling.choose_plan`` for the
Winograd kernel); a tuning log may override them. Plain Python, shared by both backends.
"""

from __future__ import annotations

from ..spec import KernelSpec
from . import tiling, winograd_tiling


def describe(spec: KernelSpec, cores: int) -> str | None:
    """The default loop nest of the fast kernel of ``spec`` (weight packed or transformed) on
    ``cores`` cores (0: the tile model's default); None for a kernel without a tile model here
    (the depthwise one, the generic fallback)."""
    if spec.lanes is None or spec.depthwise:
        return None
    if spec.algorithm == "winograd":
        return _winograd(spec, cores)
    return _direct(spec)


def _direct(spec: KernelSpec) -> str:
    tiles = tiling.tiles_for(spec)
    along, unit = ("Ho*Wo", "pixel tiles") if tiles.flat else ("Wo", "rows")
    ci = f", Ci in blocks of {tiles.icb}" if tiles.icb < spec.in_channels else ""
    co_blocks_first = tiling.co_blocks_outside_rows(spec)
    first, then = ("Co blocks", unit) if co_blocks_first else (unit, "Co blocks")
    return (
        f"register tile {tiles.owb} pixels along {along} x {tiles.ocb} vectors of {spec.lanes} "
        f"channels{ci}; parallel over {first}, then {then}"
    )


def _winograd(spec: KernelSpec, cores: int) -> str:
    plan = winograd_tiling.plan_for_spec(spec, cores)
    co_vectors = spec.weight.shape[1]
    chunk, tile_co = winograd_tiling.chunk_and_tile_co(co_vectors, plan.co_chunks, plan.tile_co)
    tile_rows, _ = winograd_tiling.tile_grid(spec)
    blocks = spec.data.shape[0] * -(-tile_rows // plan.block_rows) * plan.co_chunks
    where = "up front, shared by the blocks" if plan.v_root else "in each block"
    return (
        f"register tile {plan.tile_p} tiles x {tile_co} vectors of {spec.lanes} channels; "
        f"{blocks} parallel blocks of {plan.block_rows} tile row{'s' * (plan.block_rows > 1)} "
        f"x {chunk} Co vectors (planned for {cores} cores); input transformed {where}"
    )
