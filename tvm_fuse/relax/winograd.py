"""The Relax backend's Winograd kernel: the shared TE compute scheduled with TensorIR.

``relax.kernel.prim_func`` builds ``schedules.winograd_te`` (the computation the Relay backend's
AutoTVM template runs) with ``te.create_prim_func``; :func:`schedule` gives it the Relay
schedule's loop nests, written with ``tvm.s_tir.Schedule``. The knobs are the analytic plan of
``schedules.winograd_tiling`` (the Relay template's fallback config), so both backends run the
same tiling:

- the output: parallel blocks of (batch, ``block_rows`` tile rows, a chunk of Co vectors); in a
  block, per tile and Co vector, the output transform ``Y = A^T M A`` (unrolled, the lanes
  vectorized), its non-finite check and the direct fallback, and the epilogue on the single
  store;
- at each block, the alpha^2 GEMMs ``M = V U`` over Ci in register tiles of ``tile_p`` tiles x
  ``tile_co`` Co vectors (a ``local`` accumulator, the reduction outside, unrolled, the lanes
  vectorized);
- the input transform ``V = B^T d B`` per tile and Ci vector, at each block, or (``v_root``) for
  the whole input up front in its own parallel loop; it reads the input in place (no padded
  copy).
"""

from __future__ import annotations

from .. import lowering
from ..schedules import winograd_tiling
from ..spec import KernelSpec

NAME = "conv2d_nhwc_winograd.x86"


def schedule(sch, spec: KernelSpec, plan: winograd_tiling.Plan, blocks: dict, out):
    """Schedule ``sch``, the PrimFunc of ``schedules.winograd_te`` for ``spec`` and ``plan``
    (``blocks``: its blocks by name; ``out``: the block that stores the output, the output
    transform inlined into its epilogue)."""
    m, lanes = spec.winograd_tile, spec.lanes
    # every compute_at keeps unit loops (preserve_unit_loops): the loops below are picked from
    # the end of a block's nest, and a grid of one tile would otherwise drop its tile loop
    chunk, tile_co = winograd_tiling.chunk_and_tile_co(
        spec.weight.shape[1], plan.co_chunks, plan.tile_co
    )

    # the output: parallel blocks (batch, tile rows, Co chunk)
    b, y, x, c = sch.get_loops(out)
    th, hi = sch.split(y, [None, m])
    tw, wi = sch.split(x, [None, m])
    thb, thi = sch.split(th, [None, plan.block_rows])
    cc, cvi, cl = sch.split(c, [None, chunk, lanes])
    sch.reorder(b, thb, cc, thi, tw, cvi, hi, wi, cl)
    block = sch.fuse(b, thb, cc)
    sch.parallel(block)
    sch.unroll(hi)
    sch.unroll(wi)
    sch.vectorize(cl)

    # the output transform of one tile and vector, its non-finite check and fallback (each
    # block moved under the loop after its consumers)
    _schedule_fallback(sch, blocks, cvi)
    cols = blocks["wino_cols"]
    sch.compute_at(cols, cvi, preserve_unit_loops=True)
    *_, e, xx, co = sch.get_loops(cols)
    sch.unroll(e)
    sch.unroll(xx)
    sch.vectorize(co)

    gemm = blocks["wino_m"]
    copy = sch.cache_write(gemm, 0, "local")
    sch.compute_at(copy, block, preserve_unit_loops=True)
    rc = _schedule_gemm(sch, gemm, copy, plan.tile_p, tile_co, lanes)
    co_vectors, ci = spec.weight.shape[1], spec.weight.shape[2]
    ahead = winograd_tiling.gemm_prefetch_distance(co_vectors, ci, lanes, chunk, tile_co)
    if ahead is not None:
        lowering.annotate(sch, rc, ahead, into_l1=winograd_tiling.gemm_prefetches_into_l1(lanes))

    v, rows = blocks["wino_v"], blocks["wino_rows"]
    if not plan.v_root:
        sch.compute_at(v, block, preserve_unit_loops=True)
    _schedule_input(sch, v, rows, lanes, up_front=bool(plan.v_root))
    sch.compute_inline(blocks["data_pad"])  # no padded copy (``schedules.winograd``)


def _schedule_fallback(sch, blocks, cvi):
    """The direct conv of a tile and Co vector (its lanes vectorized), and before it the sums
    that decide whether it is needed: per lane (vectorized), then over the lanes."""
    direct, flag, check = (blocks[k] for k in ("wino_direct", "wino_flag", "wino_check"))
    sch.compute_at(direct, cvi, preserve_unit_loops=True)
    y, x, c, rc, kh, kw = sch.get_loops(direct)[-6:]
    sch.reorder(rc, kh, kw, y, x, c)
    sch.vectorize(c)
    sch.decompose_reduction(direct, rc)
    sch.compute_at(flag, cvi, preserve_unit_loops=True)
    sch.unroll(sch.get_loops(flag)[-1])
    sch.compute_at(check, cvi, preserve_unit_loops=True)
    c, e, x = sch.get_loops(check)[-3:]
    sch.reorder(e, x, c)
    sch.unroll(e)
    sch.unroll(x)
    sch.vectorize(c)
    sch.decompose_reduction(check, e)


def _schedule_gemm(sch, gemm, copy, tile_p, tile_co, lanes):
    """The GEMMs of a block: register tiles of tile_p tiles x tile_co vectors, accumulated in a
    local buffer (``gemm``) with the reduction outside and copied to the block's M (``copy``);
    the weight slice of a Co block is reused across the tiles. Returns the reduction loop."""
    e, nu, _, _, q, co = sch.get_loops(copy)[-6:]  # (e, nu, batch, block, tile, Co)
    co_b, co_v, co_l = sch.split(co, [None, tile_co, lanes])
    tw_o, tw_i = sch.split(q, [None, tile_p])
    sch.reorder(e, nu, co_b, tw_o, tw_i, co_v, co_l)
    sch.unroll(tw_i)
    sch.unroll(co_v)
    sch.vectorize(co_l)
    sch.compute_at(gemm, tw_o, preserve_unit_loops=True)
    ltw, lco, rc = sch.get_loops(gemm)[-3:]
    lco_v, lco_l = sch.split(lco, [None, lanes])
    sch.reorder(rc, ltw, lco_v, lco_l)
    sch.unroll(ltw)
    sch.unroll(lco_v)
    sch.vectorize(lco_l)
    sch.decompose_reduction(gemm, rc)
    return rc


def _schedule_input(sch, v, rows, lanes, up_front):
    """The input transform, one Ci vector of one tile at a time: of a block (``v`` computed
    at it), or of the whole input (``up_front``: the tiles in parallel)."""
    if up_front:
        e, nu, b, blk, q, c = sch.get_loops(v)
        tiles = sch.fuse(b, blk, q)
    else:
        e, nu, _, _, tiles, c = sch.get_loops(v)[-6:]  # the batch and block: unit loops
    c_o, c_l = sch.split(c, [None, lanes])
    sch.reorder(tiles, c_o, e, nu, c_l)
    if up_front:
        sch.parallel(tiles)
    sch.unroll(e)
    sch.unroll(nu)
    sch.vectorize(c_l)
    sch.compute_at(rows, c_o, preserve_unit_loops=True)
    r, nu_r, c_r = sch.get_loops(rows)[-3:]
    sch.unroll(r)
    sch.unroll(nu_r)
    sch.vectorize(c_r)
