"""The Relax backend's kernel half: the fused kernel as a TensorIR schedule of the shared TE.

``prim_func(spec)`` is the PrimFunc a fused call runs (``LowerFusedConv`` puts it into the module
with ``call_tir``). Its computation is the Relay backend's, built by the same code:
``schedules.fused_te`` on the packed ``OHWI{VL}o`` weight, or, when the weight stayed HWIO (the fast
kernel refused the spec: ``fast_path_refusal``), ``schedules.generic`` (TOPI's NHWC conv); both end
in ``schedules.epilogue``; a Winograd spec (a ``WINO{m}_{VL}o`` weight) runs
``schedules.winograd_te``, scheduled by ``relax.winograd``; a depthwise spec (an ``OHW{VL}o``
weight) runs ``schedules.depthwise``, scheduled as the Relay backend schedules it. The tiles are the
tile model's (``schedules.tiling``), and the loop nests are the Relay schedule's, written with
``tvm.s_tir.Schedule``:

- along Wo: (N, Ho, Co blocks) fused and parallel, rows first so that the cores split the map
  as its producer and consumer do, Co blocks first where the weight outweighs the input and a
  third of the L2 (``tiling.co_blocks_outside_rows``, as the Relay schedule's default;
  ``schedules.conv2d_nhwc_fused`` says why); at each Wo tile the conv's ``owb`` x ``ocb``
  register tile (a ``local`` buffer) accumulates over (Kh, Kw, Ci), unrolled, the channel lanes
  vectorized; the epilogue is applied to it on its single store; a padded input is padded whole
  up front, in parallel by rows, unless it is large (``tiling.pads_by_rows``: then row by row in
  the parallel loop; ``schedules.conv2d_nhwc_fused`` says why);
- flat (small maps, ragged Co): the conv over (N, Ho*Wo tiles, Co blocks) in parallel (Co
  blocks first by the same rule), the tile in a local cache, then a vectorized epilogue pass.

The generic fallback is scheduled too (parallel rows, vectorized channels, the reduction outside
a row of accumulators): never the default loop nest. The PrimFunc carries the spec as JSON
(``SPEC_ATTR``) and says it is scheduled, so that Relax's default pipeline neither reschedules it
nor fuses it with its neighbours.
"""

from __future__ import annotations

import math

from tvm import te

from .. import lowering
from ..schedules import depthwise, fused_te, generic, register_transpose, tiling, transposes
from ..schedules import winograd_te
from ..schedules import winograd_tiling
from ..spec import KernelSpec
from . import compat, winograd

#: PrimFunc attribute holding the KernelSpec as JSON
SPEC_ATTR = "tvm_fuse.spec"
FAST_NAME = "conv2d_nhwc_fused.x86"
GENERIC_NAME = "conv2d_nhwc_fused.generic"
#: Relax's TIR operator pattern "opaque": FuseOps leaves such a call alone
OPAQUE = 8


def prim_func(spec: KernelSpec, tiles: tiling.Tiles | None = None, cores: int | None = None):
    """The scheduled PrimFunc of ``spec``: the Winograd kernel on a Winograd-domain weight
    (planned for ``cores``), the fast kernel on a packed weight (tiles: the model's unless
    given), else the scheduled generic one on an HWIO weight."""
    tensors = {
        name: te.placeholder(getattr(spec, name).shape, getattr(spec, name).dtype, name=name)
        for name in spec.argument_names
    }
    args = {"bias": None, "residual": None, **tensors}
    if spec.algorithm == "winograd":
        plan = winograd_tiling.plan_for_spec(spec, cores)
        out = winograd_te.compute(spec, **args, block_rows=plan.block_rows, tile_p=plan.tile_p)
        sch = compat.Schedule(te.create_prim_func([*tensors.values(), out]))
        blocks = _blocks(sch)
        winograd.schedule(sch, spec, plan, blocks, _output_block(sch, blocks, "wino_acc"))
    elif spec.lanes is None:
        out = generic.compute(spec, **args)
        func = te.create_prim_func([*tensors.values(), out])
        sch = compat.Schedule(func)
        _schedule_generic(sch, spec)
    elif spec.depthwise:
        out = depthwise.compute(spec, **args)
        sch = compat.Schedule(te.create_prim_func([*tensors.values(), out]))
        _schedule_depthwise(sch, spec)
    else:
        tiles = tiles or tiling.tiles_for(spec)
        out = fused_te.compute(spec, **args, owb=tiles.owb, flat=tiles.flat)
        sch = compat.Schedule(te.create_prim_func([*tensors.values(), out]))
        (_schedule_flat if tiles.flat else _schedule_rows)(sch, spec, tiles)
    return sch.mod["main"].with_attrs(
        {
            SPEC_ATTR: spec.to_json(),
            "tvm_fuse.kernel": kernel_name(spec),
            compat.IS_SCHEDULED: True,
            "op_pattern": OPAQUE,
        }
    )


def kernel_name(spec: KernelSpec) -> str:
    """The name of the kernel that runs ``spec``."""
    if spec.algorithm == "winograd":
        return winograd.NAME
    if spec.lanes is None:
        return GENERIC_NAME
    return depthwise.NAME if spec.depthwise else FAST_NAME


def boundary_transpose(name: str, shape, dtype: str, lanes: int):
    """The graph's entry or exit transpose ``name`` (of ``schedules.transposes.TRANSPOSES``) of a
    ``shape`` tensor as the Relay backend's kernel: parallel over (N, H); blocks transposed in
    registers where ``transposes.register_plan`` finds one (``schedules.register_transpose``),
    else tiles of up to ``lanes`` x ``lanes`` values, the input's contiguous axis unrolled, the
    output's vectorized."""
    plan = transposes.register_plan(name, shape, dtype, lanes)
    attrs = {"tvm_fuse.kernel": transposes.implementation(name), compat.IS_SCHEDULED: True}
    if plan is None:
        return _tiled_transpose(name, shape, dtype, lanes).with_attrs(attrs)
    # opaque: its loops are not TensorIR blocks that Relax's pattern analysis could read
    return _register_transpose(name, shape, dtype, *plan).with_attrs(
        {**attrs, "op_pattern": OPAQUE}
    )


def _tiled_transpose(name: str, shape, dtype: str, lanes: int):
    data = te.placeholder(tuple(shape), dtype, name="data")
    transpose = transposes.TRANSPOSES[name]
    out = transpose.compute(data)
    sch = compat.Schedule(te.create_prim_func([data, out]))
    loops = sch.get_loops(sch.get_sblock(name))
    row, unrolled, vectorized = transpose.tile_axes
    u_blk, u_in = sch.split(
        loops[unrolled], [None, transposes.tile_size(int(out.shape[unrolled]), lanes)]
    )
    v_blk, v_in = sch.split(
        loops[vectorized], [None, transposes.tile_size(int(out.shape[vectorized]), lanes)]
    )
    sch.reorder(loops[0], loops[row], u_blk, v_blk, u_in, v_in)
    sch.parallel(sch.fuse(loops[0], loops[row]))
    sch.unroll(u_in)
    sch.vectorize(v_in)
    return sch.mod["main"]


def _register_transpose(name: str, shape, dtype: str, plane, block: int):
    """The in-register kernel as a PrimFunc ``(data, out)``, written with the script builder,
    with TensorIR's semantics and root block (as ``te.create_prim_func``'s: Relax's analyses
    expect them)."""
    builder = compat.ScriptTIR
    out_shape = [shape[a] for a in transposes.TRANSPOSES[name].axes]
    with compat.IRBuilder() as ib:
        with builder.prim_func(s_tir=True):
            builder.func_name("main")
            builder.func_attr({"global_symbol": "main", compat.NOALIAS: True})
            data = builder.arg("data", builder.buffer(tuple(shape), dtype))
            out = builder.arg(name, builder.buffer(tuple(out_shape), dtype))
            with builder.sblock("root"):
                emitter = _ScriptEmitter()
                src, dst = emitter.flat(data), emitter.flat(out)
                register_transpose.emit(emitter, plane, block, src, dst)
    return ib.get()


class _ScriptEmitter:
    """``schedules.register_transpose.emit``'s emitter on apache-tvm's script builder. Its
    stages bind their vectors to variables (:class:`_BoundStage`): a ``local`` buffer, even of
    64 bytes, is lowered there to a heap workspace per parallel iteration (measured 2.4-3x
    slower than the tiled schedule), never to registers."""

    expr = compat.tirx

    @staticmethod
    def flat(buf):
        size = math.prod(int(dim) for dim in buf.shape)
        return compat.ScriptTIR.decl_buffer((size,), buf.dtype, data=buf.data)

    @staticmethod
    def loop(extent: int, name: str, parallel: bool = False):
        del name  # the builder names its loop variables itself
        return (compat.ScriptTIR.parallel if parallel else compat.ScriptTIR.serial)(0, extent)

    @staticmethod
    def store(buf, value, index) -> None:
        compat.ScriptTIR.buffer_store(buf, value, [index])

    @staticmethod
    def stage(dtype: str, block: int, name: str) -> "_BoundStage":
        del dtype, name
        return _BoundStage(block)


class _BoundStage:
    """``block`` vectors, each bound to a variable where it is set."""

    def __init__(self, block: int):
        self.vectors = [None] * block

    def set(self, index: int, value) -> None:
        self.vectors[index] = compat.ScriptTIR.Bind(value)

    def get(self, index: int):
        return self.vectors[index]


def spec_of(func) -> KernelSpec | None:
    """The KernelSpec a PrimFunc of :func:`prim_func` carries, or None."""
    attrs = func.attrs
    if attrs is None or SPEC_ATTR not in attrs:
        return None
    return KernelSpec.from_json(str(attrs[SPEC_ATTR]))


# -- schedules -----------------------------------------------------------------------------------
def _blocks(sch):
    return {sch.get(b).name_hint: b for b in sch.get_child_blocks(sch.get_sblock("root"))}


def _output_block(sch, blocks, acc="acc"):
    """The block that stores the output; with an epilogue, the accumulator's elementwise
    block (named ``acc``) is inlined into it first, so the epilogue reads the conv directly."""
    if "epilogue" not in blocks:
        return blocks[acc]
    sch.compute_inline(blocks[acc])
    return blocks["epilogue"]


def _register_tile(sch, block, loops, tiles, lanes, split_lanes=True):
    """``loops`` = (pixels, channels, ry, rx, rc) of the conv ``block`` (None: a loop of extent
    1 that TIR left out): the reduction outside, the tile's pixels x channel vectors unrolled
    (order: the model's ``vector_outer``), the lanes vectorized, then the accumulator's
    initialisation split off."""
    pixels, channels, *reduction = loops
    if split_lanes:
        c_vec, c_lane = sch.split(channels, [None, lanes])
    else:
        c_vec, c_lane = channels
    tile = (c_vec, pixels) if tiles.vector_outer else (pixels, c_vec)
    reduction = [r for r in reduction if r is not None]
    sch.reorder(*reduction, *[l for l in tile if l is not None], c_lane)
    for loop in tile:
        if loop is not None:
            sch.unroll(loop)
    sch.vectorize(c_lane)
    if reduction:
        sch.decompose_reduction(block, reduction[0])


def _tile_loops(sch, block, outer, extents):
    """The loops of ``block`` inside the loop ``outer``, one per expected extent of ``extents``
    (in order), None where an extent-1 loop is absent (TIR drops those in ``compute_at``)."""
    loops = sch.get_loops(block)
    at = [sch.get(l).same_as(sch.get(outer)) for l in loops].index(True)
    inner = list(loops[at + 1 :])
    found = []
    for extent in extents:
        if inner and int(sch.get(inner[0]).extent) == extent:
            found.append(inner.pop(0))
        elif extent == 1:
            found.append(None)
        else:
            raise ValueError(f"tvm_fuse.relax kernel: no loop of extent {extent} in {inner}")
    if inner:
        raise ValueError(f"tvm_fuse.relax kernel: unexpected loops {inner}")
    return found


def _schedule_rows(sch, spec: KernelSpec, tiles: tiling.Tiles):
    lanes = spec.lanes
    blocks = _blocks(sch)
    out = _output_block(sch, blocks)
    n, h, w, c = sch.get_loops(out)
    c_blk, c_vec, c_lane = sch.split(c, [None, tiles.ocb, lanes])
    w_blk, w_pix = sch.split(w, [None, tiles.owb])
    co_first = tiling.co_blocks_outside_rows(spec)
    parallel = (c_blk, n, h) if co_first else (n, h, c_blk)
    sch.reorder(*parallel, w_blk, w_pix, c_vec, c_lane)
    rows = sch.fuse(*parallel)
    sch.parallel(rows)
    sch.unroll(w_pix)
    sch.unroll(c_vec)
    sch.vectorize(c_lane)
    conv = blocks["conv"]
    sch.compute_at(conv, w_blk)
    sch.set_scope(conv, 0, "local")
    kh, kw = spec.kernel_size
    extents = (1, 1, tiles.owb, tiles.ocb * lanes, kh, kw, spec.in_channels)
    _, _, *loops = _tile_loops(sch, conv, w_blk, extents)
    _register_tile(sch, conv, loops, tiles, lanes)
    _mark_prefetch(sch, loops[-1], spec, tiles, co_first)
    if "data_pad" in blocks and tiling.pads_by_rows(spec, tiles):
        sch.compute_at(blocks["data_pad"], rows)
        _vectorize_innermost(sch, blocks["data_pad"], lanes)
    else:
        _pad_up_front(sch, blocks, lanes)


def _schedule_flat(sch, spec: KernelSpec, tiles: tiling.Tiles):
    lanes = spec.lanes
    blocks = _blocks(sch)
    out = _output_block(sch, blocks)
    n, h, _, _ = sch.get_loops(out)
    sch.parallel(sch.fuse(n, h))
    _vectorize_innermost(sch, out, lanes)
    local = blocks["conv"]  # accumulates in a local cache, copied out by ``conv``
    conv = sch.cache_write(local, 0, "local")
    b, p, cv, cl = sch.get_loops(conv)
    p_blk, p_pix = sch.split(p, [None, tiles.owb])
    c_blk, c_vec = sch.split(cv, [None, tiles.ocb])
    co_first = tiling.co_blocks_outside_rows(spec)
    parallel = (c_blk, b, p_blk) if co_first else (b, p_blk, c_blk)
    sch.reorder(*parallel, p_pix, c_vec, cl)
    tile_loop = sch.fuse(*parallel)
    sch.parallel(tile_loop)
    sch.vectorize(cl)
    sch.compute_at(local, tile_loop)
    kh, kw = spec.kernel_size
    extents = (1, tiles.owb, tiles.ocb, lanes, kh, kw, spec.in_channels)
    _, pix, vec, lane, *reduction = _tile_loops(sch, local, tile_loop, extents)
    _register_tile(sch, local, (pix, (vec, lane), *reduction), tiles, lanes, split_lanes=False)
    _mark_prefetch(sch, reduction[-1], spec, tiles, co_first)
    _pad_up_front(sch, blocks, lanes)


def _mark_prefetch(sch, ci_loop, spec: KernelSpec, tiles: tiling.Tiles, co_first: bool):
    """As the Relay schedule does: with Co blocks first (``co_first``), the Ci loop (None: a
    loop of one step) prefetches the group of ``ocb`` Co blocks the next parallel iteration
    reads (``tiling.next_group_prefetch``, ``tvm_fuse.lowering``)."""
    ahead = tiling.next_group_prefetch(tiles.ocb, spec.weight.shape, co_first)
    if ci_loop is not None and ahead is not None:
        lowering.annotate(sch, ci_loop, ahead)


def _schedule_depthwise(sch, spec: KernelSpec):
    """The Relay schedule of ``schedules.depthwise``: (N, Ho) rows in parallel, then Wo tiles of
    ``depthwise.tile_width`` pixels, then channel vectors; at each vector the tile accumulates
    over (Kh, Kw), unrolled, and the epilogue is applied on its single store."""
    lanes = spec.lanes
    owb = depthwise.tile_width(spec.out_hw[1])
    blocks = _blocks(sch)
    out = _output_block(sch, blocks)
    n, h, w, c = sch.get_loops(out)
    w_blk, w_pix = sch.split(w, [None, owb])
    c_vec, c_lane = sch.split(c, [None, lanes])
    sch.reorder(n, h, w_blk, c_vec, w_pix, c_lane)
    sch.parallel(sch.fuse(n, h))
    sch.unroll(w_pix)
    sch.vectorize(c_lane)
    conv = blocks["conv"]
    sch.compute_at(conv, c_vec)
    sch.set_scope(conv, 0, "local")
    kh, kw = spec.kernel_size
    _, _, pixels, lane, *reduction = _tile_loops(sch, conv, c_vec, (1, 1, owb, lanes, kh, kw))
    reduction = [r for r in reduction if r is not None]
    tile = [] if pixels is None else [pixels]  # a tile of one pixel has no loop
    sch.reorder(*reduction, *tile, lane)
    for loop in (*reduction, *tile):
        sch.unroll(loop)
    sch.vectorize(lane)
    if reduction:
        sch.decompose_reduction(conv, reduction[0])
    _pad_up_front(sch, blocks, lanes)


def _pad_up_front(sch, blocks, lanes):
    """The padded input, if any, as its own pass: parallel by rows, channels vectorized."""
    if "data_pad" in blocks:
        pad = blocks["data_pad"]
        pn, ph, _, _ = sch.get_loops(pad)
        sch.parallel(sch.fuse(pn, ph))
        _vectorize_innermost(sch, pad, lanes)


def _vectorize_innermost(sch, block, lanes):
    """Vectorize the innermost loop of ``block`` by whole vectors where it has them."""
    inner = sch.get_loops(block)[-1]
    extent = int(sch.get(inner).extent)
    if extent % lanes == 0:
        _, vec = sch.split(inner, [None, lanes])
        sch.vectorize(vec)
    elif extent <= 64:
        sch.vectorize(inner)


def _schedule_generic(sch, spec: KernelSpec):
    """The fallback: NHWC conv (HWIO weight) rows in parallel, a row of accumulators in a local
    buffer with the reduction outside it and 4 channels vectorized where Co has whole vectors of
    4, the epilogue applied on the store, the padded rows computed in the parallel loop. A
    depthwise conv (TOPI's, on a per-channel view of the weight, inlined) reduces over (Kh, Kw)
    only."""
    blocks = _blocks(sch)
    if "weight_hwoi" in blocks:  # generic.compute's view of a depthwise weight
        sch.compute_inline(blocks.pop("weight_hwoi"))
    convs = ("conv2d_nhwc", "Conv2dOutput", "DepthwiseConv2d")
    conv = next(b for name, b in blocks.items() if name.startswith(convs))
    out = list(blocks.values())[-1]
    pads = [b for name, b in blocks.items() if "pad" in name.lower()]
    n, h, *_ = sch.get_loops(out)
    rows = sch.fuse(n, h)
    sch.parallel(rows)
    if not sch.get(out).same_as(sch.get(conv)):
        sch.compute_at(conv, rows)
        sch.set_scope(conv, 0, "local")
        kh, kw = spec.kernel_size
        reduction = (kh, kw) if spec.depthwise else (kh, kw, spec.in_channels)
        extents = (1, 1, spec.out_hw[1], spec.out_channels, *reduction)
        _, _, x, c, *reduction = _tile_loops(sch, conv, rows, extents)
        reduction = [r for r in reduction if r is not None]
        sch.reorder(*reduction, *[l for l in (x, c) if l is not None])
        if spec.out_channels % 4 == 0:
            _, lane = sch.split(c, [None, 4])
            sch.vectorize(lane)
        if reduction:
            sch.decompose_reduction(conv, reduction[0])
    for pad in pads:
        sch.compute_at(pad, rows)
    if spec.out_channels % 4 == 0:
        _vectorize_innermost(sch, out, 4)
