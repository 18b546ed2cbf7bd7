"""The analytic tile model of the Winograd kernel: register tile and parallel block.

The kernel's GEMM (``schedules.winograd``) is the direct kernel's register tile with Winograd
tiles in place of output pixels: ``tile_p`` tiles of a block x ``tile_co`` vectors of VL output
channels, so ``schedules.tiling.best_tile`` chooses it, the block's tiles playing Wo (a register
spilled where the machine allows it: :func:`gemm_spill`). Where the block's share of the weight
overflows the L2, one register tile takes all the block's tiles if one fits, so that each weight
vector is read once, in one pass, as the memory delivers it (``_in_one_pass``).

The parallel block decides how often the transformed weight (alpha^2 x Ci x Co, larger than the
3x3 weight) is streamed: once per block. Maps with at least ``BLOCKS_PER_CORE`` tile rows per
core take one tile row per block, its input transformed inside the block (cache-resident).
Smaller maps, whose tiles are few, put every tile row in one block and split Co into chunks
instead, so that the cores share the weight rather than each streaming all of it. One chunk per
core where Co allows, each transforming the whole input itself: the cores then share nothing
they write. The alternative, the input transformed once up front (``v_root``) by both cores
and each chunk's GEMM reading it all, has a core read the half the other wrote, after a
barrier; on emeraldrapids (2 threads, kernels alone, the FMA peak timed in the same rounds) a
chunk per core ran the 28x28x128, 14x14x256 and 7x7x512 convs (F(4x4), F(2x2), F(2x2)) in
0.95x, 0.87x and 0.96x the time of the up-front transform with 2, 4 and 8 chunks (on 1 thread,
which does both transforms, 1.04-1.11x), ResNet-18 in 0.975x and ResNet-50 in 0.985x
(interleaved, 21 rounds). Where no chunk count matches the cores, Co is split into at least
``BLOCKS_PER_CORE`` chunks per core with the input transformed up front, not once per chunk
(on Zen 3, up-front transforms were 10-50 % faster than per-chunk ones at 28x28 and below; at
56x56 per-block transforms 8-25 % faster than up-front ones); and where Co gives fewer chunks
than cores, the tile rows are split into blocks as well, or a core would idle.
This module is plain Python: it knows nothing of TE.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from . import tiling, winograd_weights

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


def _held(_tile_p, tile_co) -> int:
    """The GEMM keeps its ``tile_co`` weight vectors in registers and streams the inputs (its
    loop order is fixed: no ``vec_outer`` as in the direct kernel)."""
    return tile_co


def gemm_spill(machine: tiling.Machine) -> int:
    """Registers the GEMM's register tile may spill: ``machine.streaming_spill`` where the
    machine has the L2 weight model (Intel's AVX-512 spills one, Zen 5 none), else none. On an
    Intel Xeon (reported as ``rocketlake``) 7 x 4 tiles (28 accumulators, 4 weight vectors and a
    broadcast: one register spilled) in place of 5 x 4 ran the 49-tile blocks of ResNet-50's
    F(2x2) 14x14x256 and F(4x4) 28x28x128 convs in 0.908-0.927x and 0.934-0.963x the time
    within whole runs (three processes of 7-11 rounds; the same build timed twice: 0.96-1.04x per
    conv), 0.938x and 0.932x alone with their weights flushed; the 14-tile blocks of its 56x56x64
    F(4x4) convs alike (1.003x flushed, 0.978-1.016x within runs)."""
    return machine.streaming_spill if machine.l2_weight_model else 0


def choose_plan(
    lanes: int, nh: int, nw: int, co_vectors: int, cores: int = DEFAULT_CORES, weight_bytes: int = 0
) -> Plan:
    """The model's plan for an ``nh x nw`` grid of tiles and ``co_vectors`` Co vectors, the
    transformed weight being ``weight_bytes`` in all (0: small, never streamed from memory)."""
    machine = tiling.machine_for(lanes)
    plan = _blocks_and_tile(machine, nh, nw, co_vectors, cores)
    return _in_one_pass(machine, plan, nw, co_vectors, weight_bytes)


def _blocks_and_tile(machine: tiling.Machine, nh: int, nw: int, co_vectors: int, cores: int):
    """The parallel blocks (the module's docstring) and the best register tile for them."""
    wanted = BLOCKS_PER_CORE * cores
    best_tile = functools.partial(tiling.best_tile, held=_held, spill=gemm_spill(machine))
    if nh >= wanted:
        _, tile_p, tile_co = best_tile(machine, nw, co_vectors)
        return Plan(tile_p, tile_co, block_rows=1, co_chunks=1, v_root=0)
    _, tile_p, tile_co = best_tile(machine, nh * nw, co_vectors)
    chunks = [d for d in range(1, co_vectors // tile_co + 1) if co_vectors % (d * tile_co) == 0]
    if cores in chunks:  # a Co chunk per core, each transforming the whole input itself
        return Plan(tile_p, tile_co, block_rows=nh, co_chunks=cores, v_root=0)
    co_chunks = min((d for d in chunks if d >= wanted), default=chunks[-1])
    block_rows = nh
    if co_chunks < cores:  # too few Co chunks to keep every core busy: split the rows too
        block_rows = -(-nh // min(nh, -(-wanted // co_chunks)))
        _, tile_p, tile_co = best_tile(machine, block_rows * nw, co_vectors)
    return Plan(tile_p, tile_co, block_rows, co_chunks, v_root=int(co_chunks > 1))


def _in_one_pass(machine: tiling.Machine, plan: Plan, nw: int, co_vectors: int, weight_bytes: int):
    """``plan`` with a register tile of all the block's tiles (and the most Co vectors that fit
    the registers) where the block's share of the weight overflows the L2 and such a tile
    exists: the block then reads each weight vector once, in one pass over its tiles, rather
    than a slice from memory in its first pass and again from cache in the others, with the
    memory idle meanwhile. On an Intel Xeon (reported as ``rocketlake``) 16 x 1 in place of 4 x 4
    ran the 16-tile blocks of ResNet-50's F(2x2) 7x7x512 convs (8.4 MB of weight points per
    core) in 0.861x, 0.864x and 0.956x the time within whole runs (three processes of 7-11
    rounds; the same build timed twice: 0.96-1.04x), 0.887-0.903x alone with their weights
    flushed and 0.903x warm; 8 x 2 (two passes) 0.935x flushed."""
    tiles, chunk = plan.block_rows * nw, co_vectors // plan.co_chunks
    if weight_bytes // plan.co_chunks <= machine.l2_bytes:
        return plan
    spill = gemm_spill(machine)
    fitting = tiling.register_tiles(machine, tiles, chunk, lambda ocb: spill, held=_held)
    tile_co = max((ocb for owb, ocb in fitting if owb == tiles), default=0)
    return dataclasses.replace(plan, tile_p=tiles, tile_co=tile_co) if tile_co else plan


def tile_grid(spec) -> tuple[int, int]:
    """The output tiles of a Winograd ``spec`` (a ``KernelSpec``), rows x columns: m x m each,
    the last ones overhanging the output."""
    m, (ho, wo) = spec.winograd_tile, spec.out_hw
    return -(-ho // m), -(-wo // m)


def plan_for_spec(spec, cores: int = 0) -> Plan:
    """The plan for a Winograd ``spec`` (a ``KernelSpec`` whose weight is transformed) on
    ``cores`` cores (0: ``DEFAULT_CORES``): the kernel's tile grid and Co vectors."""
    weight_bytes = math.prod(spec.weight.shape) * 4  # float32
    args = (spec.lanes, *tile_grid(spec), spec.weight.shape[1], cores or DEFAULT_CORES)
    return choose_plan(*args, weight_bytes=weight_bytes)


def chunk_and_tile_co(co_vectors: int, co_chunks: int, tile_co: int) -> tuple[int, int]:
    """Co vectors per parallel chunk, and the register tile's ``tile_co`` made a divisor of the
    chunk (a tuned config may pair knobs the plan would not)."""
    chunk = co_vectors // co_chunks
    while chunk % tile_co:
        tile_co -= 1
    return chunk, tile_co


def gemm_prefetches_into_l1(lanes: int) -> bool:
    """Whether the GEMM prefetches the next weight slice into L1 as well as L2
    (``tvm_fuse.lowering``) on the x86 machine of ``lanes`` fp32 lanes: its
    ``tiling.Machine.prefetch_into_l1``. On Zen 5, chains of 512 -> 512 convs on 7x7 (F(2x2),
    16.8 MB of weight points from memory per conv) ran in 0.93-0.95x the time with it (3
    interleaved runs); 256 on 14x14, 128 on 28x28 and 64 on 56x56 in 0.98-1.00x; the 7x7 and
    14x14 ones as AVX2 code (``-mcpu=znver3``) in 0.98-0.99x. Intel's AVX-512 cores prefetch into
    L2 only (see ``tiling.machine_for``)."""
    return tiling.machine_for(lanes).prefetch_into_l1


def gemm_prefetch_distance(co_vectors: int, ci: int, lanes: int, chunk: int, tile_co: int):
    """How far ahead (weight elements) the GEMM of a block prefetches the slice it reads next,
    or None where it does not: the chunk's next ``tile_co`` vectors, or the next point's slice
    where the chunk is one register tile wide; only where two slices fit in L2
    (``tiling.prefetches_next_slice``)."""
    if not tiling.prefetches_next_slice(tile_co * ci * lanes):
        return None
    return (tile_co if chunk > tile_co else co_vectors) * ci * lanes


# -- which algorithm: the cost model the graph half asks ------------------------------------------
#: Multiply-adds per ns that both kernels' inner loops reach with 8 lanes (one Zen 3 core,
#: measured: about 70 GFLOP/s direct; Winograd's GEMM alike), assumed to scale with the lanes
#: an FMA pipe retires per cycle (``tiling.Machine.fma_lanes``).
#: Only ratios of costs matter.
MACS_PER_NS = 35.0
#: Bytes per ns at which a kernel streams a weight too large to stay in cache (Zen 3, fitted to
#: the 7x7x512 layer, where the Winograd weights are 1.8x (F(2x2)) and 4x (F(4x4)) the direct);
#: other machines scale it by their ``tiling.Machine.memory_speed``.
WEIGHT_BYTES_PER_NS = 22.0
#: ns per transformed value (input and output transforms: per tile, point and channel).
TRANSFORM_NS = 0.25
#: How much faster (estimated) Winograd must be to be chosen: the model is rough. It estimates
#: F(2x2) on 7x7x512 at 1.19x the direct kernel on AVX2 and on Zen 4; on Zen 3 that layer
#: measured 1.15x with its weights flushed from cache (1.3x warm) and ResNet-18 ran ~6 % faster
#: with it, so AVX2 takes F(2x2) there. On Zen 4 it measured 1.41x (warm, ``bench_winograd``).
#: On Zen 5 and Intel's AVX-512 (their memory speed, ``tiling.Machine.memory_speed``) the
#: estimate is 1.16x; ResNet-50 ran 1.006x as long with its 7x7x512 convs direct on Zen 5
#: (15 interleaved rounds), and on emeraldrapids F(2x2) ran 1.40x faster than direct alone.
MIN_GAIN = 1.15
#: The tile sizes the kernel supports.
TILES = (2, 4)
#: At stride 2 the polyphase F(2x2) is taken wherever the model expects it to pay, F(4x4) only
#: where F(2x2) does not: estimated (and measured alone, warm) the faster of the two on 28x28
#: outputs, F(4x4) lost to it in whole models. With F(2x2) on their 56x56 -> 28x28 convs ONNX
#: ResNet-50 ran in 0.976x and 0.982x the time and ResNet-18 in 0.967x; with them direct,
#: 0.969-0.991x and 0.980-0.983x (znver5, interleaved with the same build using F(4x4), 31-41
#: rounds each).
STRIDE_2_FIRST = 2
#: The cost of a stride-2 transform per point, as a share of a stride-1 one: in the polyphase
#: form (``winograd_weights``) m of the 2m + 1 points of each axis carry an input sample through
#: unchanged. Fitted on znver5 to 12 stride-2 3x3 convs (C 3-512, maps 7-112, F(2x2) and F(4x4),
#: 16 and 8 lanes): with 1.0 the model put Winograd at 0.8-0.9x the measured speed-up.
STRIDED_TRANSFORM_SHARE = 0.5


def estimated_ns(
    m: int, n: int, ho: int, wo: int, ci: int, co: int, lanes: int, cores: int = DEFAULT_CORES,
    stride: int = 1,
) -> float:
    """Estimated time of a 3x3 conv of ``stride`` (1 or 2): direct for ``m == 0``, else
    Winograd F(m x m).

    The MACs at ``MACS_PER_NS`` per core and the transforms, both shared by ``cores``, plus the
    weight streamed once at the machine's rate (memory bandwidth is not shared out: on
    small maps with many channels the larger Winograd weight is what costs). Fitted to CPU
    times of the layer benchmark's 3x3 layers on Zen 3 (one thread: each within ~20 %); the
    stride-2 transforms (``STRIDED_TRANSFORM_SHARE``) to 12 stride-2 convs on znver5."""
    co_pad = -(-co // lanes) * lanes
    machine = tiling.machine_for(lanes)
    macs_per_ns = MACS_PER_NS * machine.fma_lanes / 8 * cores
    if m == 0:
        macs, weight_bytes, transformed = n * ho * wo * ci * co * 9, 9 * ci * co_pad * 4, 0
    else:
        alpha, tiles = winograd_weights.points(m, stride), n * -(-ho // m) * -(-wo // m)
        macs = alpha * alpha * tiles * ci * co_pad
        weight_bytes = winograd_weights.weight_rows(m) ** 2 * ci * co_pad * 4
        transformed = alpha * alpha * tiles * (ci + co_pad)
        transformed *= STRIDED_TRANSFORM_SHARE if stride == 2 else 1.0
    compute = macs / macs_per_ns + transformed * TRANSFORM_NS / cores
    return compute + weight_bytes / (WEIGHT_BYTES_PER_NS * machine.memory_speed)


def choose_winograd_tile(
    n: int,
    ho: int,
    wo: int,
    ci: int,
    co: int,
    lanes: int,
    cores: int = DEFAULT_CORES,
    tiles=TILES,
    stride: int = 1,
) -> int:
    """m of the fastest Winograd F(m x m, 3x3) among ``tiles`` when the model expects it at least
    ``MIN_GAIN`` times faster than the direct kernel, else 0 (direct); at stride 2,
    ``STRIDE_2_FIRST`` wherever it is among ``tiles`` and pays."""

    def cost(m):
        return estimated_ns(m, n, ho, wo, ci, co, lanes, cores, stride)

    def pays(m):
        return cost(m) * MIN_GAIN <= cost(0)

    if stride == 2 and STRIDE_2_FIRST in tiles and pays(STRIDE_2_FIRST):
        return STRIDE_2_FIRST
    best = min(tiles, key=cost, default=0)
    return best if best and pays(best) else 0


def tile_for_spec(spec, lanes: int, cores: int = 0, tiles=TILES) -> int:
    """m of the Winograd tile (one of ``tiles``) the model picks for the conv of ``spec`` (a
    ``KernelSpec`` whose weight is HWIO) with ``lanes`` fp32 lanes on ``cores`` cores (0:
    ``DEFAULT_CORES``), or 0: direct. Winograd applies to 3x3 dilation-1 convs of stride 1 or 2
    (the same along H and W) with groups=1 only; whether the fast path applies at all is the
    caller's (each backend reads its target)."""
    conv = (spec.kernel_size, spec.dilation, spec.weight.layout, spec.groups)
    stride = spec.strides[0]
    square = spec.strides == (stride, stride) and stride in winograd_weights.STRIDES
    if conv != ((3, 3), (1, 1), "HWIO", 1) or not square:
        return 0
    n, (ho, wo) = spec.data.shape[0], spec.out_hw
    args = (n, ho, wo, spec.in_channels, spec.out_channels, lanes, cores or DEFAULT_CORES)
    return choose_winograd_tile(*args, tiles=tiles, stride=stride)
