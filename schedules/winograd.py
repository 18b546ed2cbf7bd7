"""The fused Winograd kernel: NHWC conv2d 3x3 (stride 1 or 2) + bias + [residual] + activation.

F(m x m, 3x3) computes each m x m output tile from an alpha x alpha input tile with ``alpha^2``
products per channel pair instead of ``9 m^2``: alpha = m + 2 at stride 1, 2m + 1 at stride 2
(the polyphase form of ``schedules.winograd_weights``). The weight arrives already in the
Winograd domain, ``U = G g G^T`` computed at compile time (``schedules.winograd_weights``), laid
out ``[points, Co/VL, Ci, VL]`` (``WINO{m}_{VL}o``, ``WINO{m}S2_{VL}o``). Per parallel
block of tiles (``block_rows`` whole tile rows x a chunk of ``Co / co_chunks`` channels) the kernel:

- transforms the block's input tiles, ``V = B^T d B``, vectorized over Ci (NHWC keeps it
  contiguous), into a block buffer that stays in cache (or, knob ``v_root``, the whole input
  once up front, where blocks along Co would each repeat it). It reads the tiles from the
  input itself, a point off the map reading 0, not from a padded copy that a parallel pass
  writes first as the direct kernel's does: on emeraldrapids (2 threads, kernels alone) the
  56x56x64 and 28x28x128 F(4x4) convs ran in 0.83-0.88x the time, the 56x56 -> 28x28 stride-2
  F(2x2) in 0.92x, 14x14 and 7x7 ones alike; ResNet-18 in 0.960x and 0.987x, ResNet-50 in
  0.972x (interleaved, 21-31 rounds);
- runs the alpha^2 GEMMs ``M = V U`` over Ci, vectorized over Co with a register tile of
  ``tile_p`` tiles x ``tile_co`` vectors (the direct kernel's scheme, tiles in place of pixels);
- transforms each tile back, ``Y = A^T M A``, and applies the epilogue before the one store;
  a tile whose transform is not finite (NaN or Inf in its input) takes the direct conv's values
  instead, computed on the spot (``schedules.winograd_te``).

Tiles that overhang the map are computed on zero padding and never stored; a Co that is not a
whole number of vectors arrives zero-padded in the weight, its extra channels are never stored.
The computation is ``schedules.winograd_te`` (shared with the Relax backend). Tile sizes are
AutoTVM knobs whose fallback is the analytic model of ``schedules.winograd_tiling``. Refuses
anything but float32 data and a Winograd-domain weight (the strategy never sends other convs
here).
"""

import tvm
from tvm import autotvm, te
from tvm.autotvm.task.space import OtherOptionEntity

from .. import lowering
from ..spec import KernelSpec
from . import winograd_te, winograd_tiling, winograd_weights

NAME = "conv2d_nhwc_winograd.x86"
#: Tag of the HWIO stand-in for the transformed weight that the template receives at build time.
LOGICAL_WEIGHT_TAG = "conv2d_nhwc_winograd_hwio_view"

#: The AutoTVM workload after the task name: the template's arguments, the logical task.
#: ``strides`` is left out of a stride-1 workload (the template's default).
WORKLOAD_FIELDS = ("data", "weight", "bias", "residual", "padding", "activation", "alpha")
WORKLOAD_FIELDS += ("lanes", "winograd_tile", "strides")


def compute(spec: KernelSpec, data, weight, bias, residual):
    """The Winograd kernel of ``spec`` on its ``[points, Co/VL, Ci, VL]`` weight.

    The template sees the logical task: the weight enters as an HWIO view of the direct taps
    stored in the transformed tensor (never computed: the template reads the tensor under it),
    so the AutoTVM workload and the tuning records name the conv as the graph had it."""
    if (
        spec.algorithm != "winograd"
        or spec.lanes is None
        or {data.dtype, weight.dtype} != {"float32"}
    ):
        raise ValueError(
            f"{NAME}: needs float32 data and a WINO{{m}}_{{VL}}o weight, got data "
            f"{data.dtype}{list(data.shape)} and weight {spec.weight.layout} {weight.dtype}"
            f"{list(weight.shape)}"
        )
    return conv2d_nhwc_winograd_x86(
        *workload_args(spec, data, _hwio_view(spec, weight), bias, residual)
    )


def workload_args(spec: KernelSpec, data, weight, bias, residual) -> tuple:
    """The template's arguments (``WORKLOAD_FIELDS``) for ``spec``: tensors, then named fields."""
    fields = (spec.padding, spec.activation, spec.alpha, spec.lanes, spec.winograd_tile)
    strided = () if spec.strides == (1, 1) else (spec.strides,)
    return (data, weight, bias, residual, *fields, *strided)


def describe_workload(workload) -> dict:
    """A workload of this template (``(NAME, *args)``) as a dict of ``WORKLOAD_FIELDS``."""
    return dict(zip(WORKLOAD_FIELDS, workload[1:]))


def _hwio_view(spec: KernelSpec, transformed):
    """The [3, 3, Ci, Co] weight as a view of the direct taps in the transformed tensor, for the
    template's signature (nothing computes it: the template reads the tensor under it)."""
    lanes, m = spec.lanes, spec.winograd_tile
    tap = winograd_weights.tap_index
    return te.compute(
        (3, 3, spec.in_channels, spec.out_channels),
        lambda y, x, i, o: transformed[tap(m, y, x), o // lanes, i, o % lanes],
        name="weight_hwio",
        tag=LOGICAL_WEIGHT_TAG,
    )


def _transformed_weight(spec: KernelSpec, weight):
    """The transformed weight under the template's HWIO ``weight``: the real tensor at build
    time, a placeholder of its shape while tuning."""
    if weight.op.tag == LOGICAL_WEIGHT_TAG:
        return weight.op.input_tensors[0]
    return te.placeholder(spec.weight.shape, spec.weight.dtype, name="weight_winograd")


def _define_knobs(cfg, spec: KernelSpec):
    """tile_p x tile_co: the register tile (tiles of a block x Co vectors); block_rows,
    co_chunks: the parallel block (tile rows x a chunk of Co vectors)."""
    (nh, _), co_vectors = winograd_tiling.tile_grid(spec), spec.weight.shape[1]
    cfg.define_knob("tile_p", list(range(1, winograd_tiling.MAX_TILE_P + 1)))
    cfg.define_knob(
        "tile_co", [d for d in range(1, winograd_tiling.MAX_TILE_CO + 1) if co_vectors % d == 0]
    )
    cfg.define_knob("block_rows", list(range(1, nh + 1)))
    cfg.define_knob("co_chunks", [d for d in range(1, co_vectors + 1) if co_vectors % d == 0])
    cfg.define_knob("v_root", [0, 1])
    if cfg.is_fallback:
        target = tvm.target.Target.current(allow_none=True)
        cores = int(target.attrs.get("num-cores", 0)) if target is not None else 0
        plan = winograd_tiling.plan_for_spec(spec, cores)
        for knob in ("tile_p", "tile_co", "block_rows", "co_chunks", "v_root"):
            cfg[knob] = OtherOptionEntity(getattr(plan, knob))


def _tile_co(cfg, co_vectors):
    """The Co chunk and the register tile's Co vectors (a divisor of the chunk)."""
    return winograd_tiling.chunk_and_tile_co(co_vectors, cfg["co_chunks"].val, cfg["tile_co"].val)


@autotvm.register_topi_compute(NAME)
def conv2d_nhwc_winograd_x86(
    cfg, data, weight, bias, residual, padding, activation, alpha, lanes, winograd_tile,
    strides=(1, 1),
):
    """The AutoTVM template (positional arguments, ``WORKLOAD_FIELDS``: they form the
    workload): NHWC ``data``, HWIO ``weight``, optional bias and residual, the padding and
    epilogue fields of the spec, the transformed weight's ``lanes`` and m (``winograd_tile``),
    the ``strides`` (only in a stride-2 workload)."""
    strides = tuple(int(s) for s in strides)
    spec = KernelSpec.conv(tuple(data.shape), tuple(weight.shape), strides, padding, (1, 1))
    spec = spec.with_epilogue(
        bias is not None, residual is not None, activation=activation, alpha=float(alpha)
    )
    spec = winograd_weights.winograd_spec(spec, int(winograd_tile), int(lanes))
    return _kernel(cfg, spec, data, _transformed_weight(spec, weight), bias, residual)


def _kernel(cfg, spec: KernelSpec, data, weight, bias, residual):
    """TE of the Winograd kernel (``schedules.winograd_te``) with the knobs of ``cfg``."""
    _define_knobs(cfg, spec)
    block_rows, tile_p = cfg["block_rows"].val, cfg["tile_p"].val
    return winograd_te.compute(spec, data, weight, bias, residual, block_rows, tile_p)


@autotvm.register_topi_schedule(NAME)
def schedule(cfg, outs):
    """The hand-written schedule of :func:`conv2d_nhwc_winograd_x86`."""
    outs = [outs] if isinstance(outs, te.Tensor) else outs
    s = te.create_schedule([x.op for x in outs])
    out = outs[0]
    stages = _find_stages(out)
    if stages["wino_acc"].op != out.op:
        s[stages["wino_acc"]].compute_inline()
    _schedule_block(cfg, s, out, stages)
    return s


def _find_stages(out):
    stack, seen, found = [out.op], set(), {}
    while stack:
        op = stack.pop()
        found[op.name] = op.output(0)
        seen.add(op)
        stack += [t.op for t in op.input_tensors if t.op not in seen]
    if "wino_m" not in found:
        raise ValueError(f"{NAME}: no Winograd GEMM under {out.op.name}")
    return found


def _schedule_block(cfg, s, out, stages):
    gemm, v, rows_t, cols_t = (stages[k] for k in ("wino_m", "wino_v", "wino_rows", "wino_cols"))
    m = int(cols_t.shape[4])  # cols_t: [N, tile rows, tile cols, alpha, m, Co]
    lanes = int(gemm.op.input_tensors[1].shape[3])
    chunk, tile_co = _tile_co(cfg, int(gemm.shape[5]) // lanes)

    # the output: parallel blocks (batch, tile rows, Co chunk)
    b, y, x, c = s[out].op.axis
    th, hi = s[out].split(y, m)
    tw, wi = s[out].split(x, m)
    thb, thi = s[out].split(th, cfg["block_rows"].val)
    cv, cl = s[out].split(c, lanes)
    cc, cvi = s[out].split(cv, chunk)
    s[out].reorder(b, thb, cc, thi, tw, cvi, hi, wi, cl)
    block = s[out].fuse(b, thb, cc)
    s[out].parallel(block)
    s[out].unroll(hi)
    s[out].unroll(wi)
    s[out].vectorize(cl)

    # output transform of one tile and vector
    s[cols_t].compute_at(s[out], cvi)
    _, _, _, e, xx, co = s[cols_t].op.axis
    _, co_l = s[cols_t].split(co, lanes)
    s[cols_t].unroll(e)
    s[cols_t].unroll(xx)
    s[cols_t].vectorize(co_l)
    _schedule_fallback(s, out, cvi, stages, lanes)

    _schedule_gemm(cfg, s, gemm, lanes, tile_co, chunk)
    s[gemm].compute_at(s[out], block)
    _schedule_input(s, v, rows_t, lanes)
    if cfg["v_root"].val:  # the whole transformed input up front, in its own parallel loop
        s[v].parallel(s[v].fuse(*s[v].op.axis[2:5]))
    else:
        s[v].compute_at(s[out], block)
    pad = stages.get("data_pad")
    if pad is not None:  # no padded copy: the input transform reads the input (docstring)
        s[pad].compute_inline()


def _schedule_fallback(s, out, cvi, stages, lanes):
    """The non-finite check of a tile and Co vector after its column transform (lanes
    vectorized, then summed), and the direct conv for it, its lanes vectorized."""
    check, flag, direct = (stages[k] for k in ("wino_check", "wino_flag", "wino_direct"))
    s[check].compute_at(s[out], cvi)
    *_, c = s[check].op.axis
    _, c_l = s[check].split(c, lanes)
    e, x = s[check].op.reduce_axis
    s[check].reorder(e, x, c_l)
    s[check].unroll(e)
    s[check].unroll(x)
    s[check].vectorize(c_l)
    s[flag].compute_at(s[out], cvi)
    s[flag].unroll(s[flag].op.reduce_axis[0])
    s[direct].compute_at(s[out], cvi)
    _, y, x, c = s[direct].op.axis
    s[direct].reorder(*s[direct].op.reduce_axis, y, x, c)
    s[direct].vectorize(c)


def _schedule_gemm(cfg, s, gemm, lanes, tile_co, chunk):
    """The alpha^2 GEMMs of a block: register tiles of tile_p tiles x tile_co vectors, the
    accumulators in a local cache, the weight slice of a Co block reused across the tiles; the
    slice read next prefetched (``lowering``): the chunk's next tile_co vectors, or the next
    point's slice where the chunk is one register tile wide."""
    local = s.cache_write(gemm, "local")
    e, nu, b, blk, q, co = s[gemm].op.axis
    co_o, co_l = s[gemm].split(co, lanes)
    co_b, co_v = s[gemm].split(co_o, tile_co)
    tw_o, tw_i = s[gemm].split(q, cfg["tile_p"].val)
    s[gemm].reorder(e, nu, b, blk, co_b, tw_o, tw_i, co_v, co_l)
    s[gemm].unroll(tw_i)
    s[gemm].unroll(co_v)
    s[gemm].vectorize(co_l)
    s[local].compute_at(s[gemm], tw_o)
    _, _, _, _, ltw, lco = s[local].op.axis
    (rc,) = s[local].op.reduce_axis
    lco_v, lco_l = s[local].split(lco, lanes)
    s[local].reorder(rc, ltw, lco_v, lco_l)
    _, co_vectors, ci, _ = (int(d) for d in gemm.op.input_tensors[1].shape)
    ahead = winograd_tiling.gemm_prefetch_distance(co_vectors, ci, lanes, chunk, tile_co)
    if ahead is not None:
        lowering.mark(s[local], rc, ahead, into_l1=winograd_tiling.gemm_prefetches_into_l1(lanes))
    s[local].unroll(ltw)
    s[local].unroll(lco_v)
    s[local].vectorize(lco_l)


def _schedule_input(s, v, rows_t, lanes):
    """The input transform of a block, one Ci vector of one tile at a time."""
    e, nu, b, blk, q, c = s[v].op.axis
    c_o, c_l = s[v].split(c, lanes)
    s[v].reorder(b, blk, q, c_o, e, nu, c_l)
    s[v].unroll(e)
    s[v].unroll(nu)
    s[v].vectorize(c_l)
    s[rows_t].compute_at(s[v], c_o)
    *_, r, nu_r, c_r = s[rows_t].op.axis
    _, c_rl = s[rows_t].split(c_r, lanes)
    s[rows_t].unroll(r)
    s[rows_t].unroll(nu_r)
    s[rows_t].vectorize(c_rl)
