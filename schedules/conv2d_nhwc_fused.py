"""The fast fused kernel: NHWC conv2d + bias + [residual] + activation on packed weights (x86).

``tvm_fuse.strategy`` chooses it when ``fast_path_refusal`` finds nothing and the weight has been packed to
``OHWI{VL}o`` (``schedules.packing``) at compile time. Vectorized over output channels: a
register tile of ``owb`` output pixels along Wo x ``ocb`` vectors of VL channels accumulates over
(Ci block, Kh, Kw, Ci) with one broadcast input feeding ``ocb`` FMAs; the epilogue is applied to
the accumulators before their single store; (N, Co blocks, Ho) are fused into one parallel loop.

The conv is computed on a width padded up to a multiple of ``owb`` (the extra columns are never
stored), so every register tile is full and its loops carry no bounds checks. The tile sizes are
AutoTVM knobs; the fallback config is the analytic model of ``schedules.tiling``. Refuses weights
that are not packed and non-float32 dtypes (the strategy never sends those here).
"""

from tvm import autotvm, te, topi
from tvm.autotvm.task.space import OtherOptionEntity, SplitEntity

from . import tiling
from .epilogue import apply_epilogue

NAME = "conv2d_nhwc_fused.x86"
CONV_TAG = "conv2d_nhwc_fused_packed"


def compute(
    data, weight, bias, residual, *, strides, padding, dilation, out_dtype, activation, alpha
):
    """The fused kernel on a packed ``[Co/VL, Kh, Kw, Ci, VL]`` weight (keyword calling)."""
    if len(weight.shape) != 5 or data.dtype != "float32" or weight.dtype != "float32":
        raise ValueError(
            f"{NAME}: needs float32 data and a packed OHWI{{VL}}o weight, got data "
            f"{data.dtype}{list(data.shape)} and weight {weight.dtype}{list(weight.shape)}"
        )
    args = (tuple(strides), tuple(padding), tuple(dilation), out_dtype, activation, float(alpha))
    return conv2d_nhwc_fused_x86(data, weight, bias, residual, *args)


def _out_size(size, pad, window, stride, dilation):
    return (size + pad - ((window - 1) * dilation + 1)) // stride + 1


def _define_knobs(cfg, wo, co_vectors, ci, lanes):
    """owb x ocb: the register tile; tile_ic: the Ci split; pad_at_row: pad the input rows a
    parallel iteration reads (1) or the whole input up front (0); ic_outside: Ci blocks outside
    the Wo tiles, accumulating in a row buffer (measured slower: the tile leaves registers)."""
    cfg.define_knob("owb", list(range(1, tiling.MAX_OWB + 1)))
    cfg.define_knob("ocb", [d for d in range(1, tiling.MAX_OCB + 1) if co_vectors % d == 0])
    cfg.define_split("tile_ic", ci, num_outputs=2)
    cfg.define_knob("pad_at_row", [0, 1])
    cfg.define_knob("ic_outside", [0, 1])
    if cfg.is_fallback:
        tiles = tiling.choose_tiles(tiling.machine_for(lanes), wo, co_vectors, ci)
        cfg["owb"] = OtherOptionEntity(tiles.owb)
        cfg["ocb"] = OtherOptionEntity(tiles.ocb)
        cfg["tile_ic"] = SplitEntity([-1, tiles.icb])
        cfg["pad_at_row"] = OtherOptionEntity(1)
        cfg["ic_outside"] = OtherOptionEntity(0)


@autotvm.register_topi_compute(NAME)
def conv2d_nhwc_fused_x86(
    cfg, data, weight, bias, residual, strides, padding, dilation, out_dtype, activation, alpha
):
    """TE compute of the fast kernel (positional arguments: they form the AutoTVM workload)."""
    n, h, w, ci = (int(d) for d in data.shape)
    co_vectors, kh, kw, _, lanes = (int(d) for d in weight.shape)
    (sh, sw), (dh, dw), (top, left, bottom, right) = strides, dilation, padding
    ho = _out_size(h, top + bottom, kh, sh, dh)
    wo = _out_size(w, left + right, kw, sw, dw)
    _define_knobs(cfg, wo, co_vectors, ci, lanes)
    owb = cfg["owb"].val
    wo_pad = -(-wo // owb) * owb
    extra = max(0, (wo_pad - 1) * sw + (kw - 1) * dw + 1 - (w + left + right))
    pad_after = [0, bottom, right + extra, 0]
    if any((top, left, bottom, right + extra)):
        data = topi.nn.pad(data, [0, top, left, 0], pad_after, name="data_pad")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, ci), name="rc")
    conv = te.compute(
        (n, ho, wo_pad, co_vectors * lanes),
        lambda b, y, x, c: te.sum(
            data[b, y * sh + ry * dh, x * sw + rx * dw, rc].astype(out_dtype)
            * weight[c // lanes, ry, rx, rc, c % lanes].astype(out_dtype),
            axis=[ry, rx, rc],
        ),
        name="conv",
        tag=CONV_TAG,
    )
    acc = te.compute((n, ho, wo, co_vectors * lanes), lambda *i: conv(*i), name="acc")
    return apply_epilogue(acc, bias, residual, activation, alpha)


@autotvm.register_topi_schedule(NAME)
def schedule(cfg, outs):
    """The hand-written schedule of :func:`conv2d_nhwc_fused_x86`."""
    outs = [outs] if isinstance(outs, te.Tensor) else outs
    s = te.create_schedule([x.op for x in outs])
    out = outs[0]
    conv = _find_conv(out)
    for stage in s.stages:
        keep = stage.op in (out.op, conv.op) or stage.op.name == "data_pad"
        if isinstance(stage.op, te.ComputeOp) and not keep:
            stage.compute_inline()
    _schedule_tile(cfg, s, out, conv)
    return s


def _find_conv(out):
    stack, seen = [out.op], set()
    while stack:
        op = stack.pop()
        if op.tag == CONV_TAG:
            return op.output(0)
        seen.add(op)
        stack += [t.op for t in op.input_tensors if t.op not in seen]
    raise ValueError(f"{NAME}: no conv stage under {out.op.name}")


def _schedule_tile(cfg, s, out, conv):
    lanes = int(conv.op.input_tensors[1].shape[4])
    n, h, w, c = s[out].op.axis
    c_outer, c_lane = s[out].split(c, lanes)
    c_blk, c_vec = s[out].split(c_outer, cfg["ocb"].val)
    w_blk, w_pix = s[out].split(w, cfg["owb"].val)
    s[out].reorder(n, c_blk, h, w_blk, w_pix, c_vec, c_lane)
    rows = s[out].fuse(n, c_blk, h)
    s[out].parallel(rows)
    s[out].unroll(w_pix)
    s[out].unroll(c_vec)
    s[out].vectorize(c_lane)

    _, _, cw, cc = s[conv].op.axis
    ry, rx, rc = s[conv].op.reduce_axis
    cc_vec, cc_lane = s[conv].split(cc, lanes)
    rc_blk, rc_in = cfg["tile_ic"].apply(s, conv, rc)
    if cfg["ic_outside"].val:  # Ci blocks outside the Wo tiles: accumulate in a row buffer
        s[conv].compute_at(s[out], rows)
        cw_blk, cw = s[conv].split(cw, cfg["owb"].val)
        s[conv].reorder(rc_blk, cw_blk, ry, rx, rc_in, cw, cc_vec, cc_lane)
    else:
        s[conv].compute_at(s[out], w_blk)
        s[conv].reorder(rc_blk, ry, rx, rc_in, cw, cc_vec, cc_lane)
    s[conv].unroll(cw)
    s[conv].unroll(cc_vec)
    s[conv].vectorize(cc_lane)

    pad = conv.op.input_tensors[0]
    if pad.op.name == "data_pad":
        _schedule_pad(cfg, s, pad, out, rows)


def _schedule_pad(cfg, s, pad, out, rows):
    if cfg["pad_at_row"].val:
        s[pad].compute_at(s[out], rows)
        return
    n, h, w, c = s[pad].op.axis
    s[pad].parallel(s[pad].fuse(n, h))
