"""The analytic tile model of the Winograd kernel: register tile and parallel block.

The kernel's GEMM (``schedules.winograd``) is the direct kernel's register tile with Winograd
tiles in place of output pixels: ``tile_p`` tiles of a block x ``tile_co`` vectors of VL output
channels, so ``schedules.tiling.best_tile`` chooses it, the block's tiles playing Wo.

The parallel block decides how often the transformed weight (alpha^2 x Ci x Co, larger than the
3x3 weight) is streamed: once per block. Maps with at least ``BLOCKS_PER_CORE`` tile rows per
core take one tile row per block, its input transformed inside the block (cache-resident).
Smaller maps, whose tiles are few, put every tile row in one block and split Co into chunks
instead, so that the cores share the weight rather than each streaming all of it; their input
is transformed once up front (``v_root``), not once per chunk. Measured on Zen 3 (CPU time of
one thread, interleaved): per-block transforms are 8-25 % faster than up-front ones at 56x56,
and up-front ones 10-50 % faster than per-chunk ones at 28x28 and below.
This module is plain Python: it knows nothing of TE.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import tiling

#: Most tiles in one register tile.
MAX_TILE_P = tiling.MAX_OWB
#: Most channel vectors in one register tile.
MAX_TILE_CO = tiling.MAX_OCB
#: Parallel blocks per core the plan aims for (load balance on a shared machine).
BLOCKS_PER_CORE = 4
#: Cores the plan assumes where the target does not say.
DEFAULT_CORES = 2


@dataclass(frozen=True)
class Plan:
    tile_p: int  # tiles per register tile
    tile_co: int  # Co vectors per register tile
    block_rows: int  # tile rows per parallel block
    co_chunks: int  # Co chunks per block row (parallel blocks along Co)
    v_root: int  # transform the whole input up front (1) or inside each block (0)


def choose_plan(lanes: int, nh: int, nw: int, co_vectors: int, cores: int = DEFAULT_CORES) -> Plan:
    """The model's plan for an ``nh x nw`` grid of tiles and ``co_vectors`` Co vectors."""
    machine = tiling.machine_for(lanes)
    wanted = BLOCKS_PER_CORE * cores
    if nh >= wanted:
        _, tile_p, tile_co = tiling.best_tile(machine, nw, co_vectors)
        return Plan(tile_p, tile_co, block_rows=1, co_chunks=1, v_root=0)
    _, tile_p, tile_co = tiling.best_tile(machine, nh * nw, co_vectors)
    chunks = [d for d in range(1, co_vectors // tile_co + 1) if co_vectors % (d * tile_co) == 0]
    co_chunks = min((d for d in chunks if d >= wanted), default=chunks[-1])
    return Plan(tile_p, tile_co, block_rows=nh, co_chunks=co_chunks, v_root=int(co_chunks > 1))
