"""The fused depthwise kernel: NHWC depthwise conv2d + bias + [residual] + activation (x86).

A depthwise conv (groups == Ci == Co, one Kh x Kw filter per channel) does 9 multiply-adds per
output on a 3x3 filter: it is bound by memory, not by the FMA units. NHWC keeps the channels
contiguous, so the kernel is vectorized over them with no shuffles: a register tile of ``owb``
output pixels x one vector of VL channels accumulates over the Kh x Kw taps, each tap's weight
vector feeding ``owb`` FMAs, and the input vectors that neighbouring pixels share (stride 1) are
loaded once. The epilogue is applied to the accumulators before their single store. Loops: (N,
Ho) rows in parallel (the cores split the map by rows, as the kernels before and after do), then
Wo tiles, then channel vectors, so a tile's input rows stay in L1 across the channels.

The weight arrives packed ``[C/VL, Kh, Kw, VL]`` (``OHW{VL}o``, ``schedules.packing``), each
channel vector's taps contiguous; VL is the widest of the target's vector, its half or its
quarter that divides C (``packing.depthwise_lanes``), since the data has exactly C channels.
A padded conv pads its whole input up front in a parallel pass split by rows. ``owb`` is the
tile width of Wo with the fewest computed-and-dropped columns (:func:`tile_width`); it is not a
tuning knob: at 9 FMAs a pixel the tile hardly matters (owb 4-16 within ~10 % on Zen 4), the
memory traffic does.

Measured on Zen 4 (AVX-512, 2 threads, conv + bias + ReLU6, the kernel alone): 112x112x32
0.059 ms against 0.81 for stock TVM's NHWC depthwise schedule; 56x56x144 0.070 against 0.24;
14x14x512 0.025 against 0.071. Refuses anything but float32 data and a packed depthwise spec
(the strategy never sends other convs here).
"""

from tvm import te

from ..spec import KernelSpec
from .epilogue import apply_epilogue
from .te_utils import find_tagged, inline_all_but, pad_for_tiles, pad_rows_in_parallel

NAME = "depthwise_conv2d_nhwc_fused.x86"
#: Tag of the conv stage, by which the schedule finds it.
CONV_TAG = "depthwise_conv2d_nhwc_fused"
#: The range of ``owb``, output pixels per register tile.
MIN_OWB, MAX_OWB = 4, 8


def tile_width(wo: int) -> int:
    """``owb`` for an output width ``wo``: the tile in ``MIN_OWB..MAX_OWB`` (at most ``wo``)
    whose tiles overhang Wo by the fewest columns, the widest of those."""
    widths = range(max(1, min(MAX_OWB, wo)), max(1, min(MIN_OWB, wo)) - 1, -1)
    return min(widths, key=lambda t: -(-wo // t) * t - wo)


def compute(spec: KernelSpec, data, weight, bias, residual):
    """TE of the depthwise kernel of ``spec`` on its packed ``[C/VL, Kh, Kw, VL]`` weight."""
    if not spec.depthwise or spec.lanes is None or {data.dtype, weight.dtype} != {"float32"}:
        raise ValueError(
            f"{NAME}: needs a depthwise spec, float32 data and an OHW{{VL}}o weight, got "
            f"groups={spec.groups}, data {data.dtype}{list(data.shape)} and weight "
            f"{spec.weight.layout} {weight.dtype}{list(weight.shape)}"
        )
    n = spec.data.shape[0]
    kh, kw = spec.kernel_size
    ho, wo = spec.out_hw
    lanes, channels = spec.lanes, spec.out_channels
    (sh, sw), (dh, dw) = spec.strides, spec.dilation
    wo_pad = -(-wo // tile_width(wo)) * tile_width(wo)
    # the last tile's columns past Wo: padded for, or read again from column Wo-1 (clamp)
    data, clamp = pad_for_tiles(data, spec, wo_pad)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def element(b, y, x, c):
        if clamp:
            x = te.min(x, wo - 1)
        tap = data[b, y * sh + ry * dh, x * sw + rx * dw, c] * weight[c // lanes, ry, rx, c % lanes]
        return te.sum(tap, axis=[ry, rx])

    conv = te.compute((n, ho, wo_pad, channels), element, name="conv", tag=CONV_TAG)
    acc = te.compute((n, ho, wo, channels), lambda *i: conv(*i), name="acc")
    return apply_epilogue(acc, bias, residual, spec.activation, spec.alpha)


def schedule(outs):
    """The hand-written schedule of :func:`compute` (see the module docstring)."""
    outs = [outs] if isinstance(outs, te.Tensor) else outs
    s = te.create_schedule([x.op for x in outs])
    out = outs[0]
    conv = find_tagged(out, CONV_TAG, NAME)
    inline_all_but(s, out, conv)
    lanes = int(conv.op.input_tensors[1].shape[3])
    n, y, x, c = s[out].op.axis
    x_blk, x_pix = s[out].split(x, tile_width(int(out.shape[2])))
    c_vec, c_lane = s[out].split(c, lanes)
    s[out].reorder(n, y, x_blk, c_vec, x_pix, c_lane)
    rows = s[out].fuse(n, y)
    s[out].parallel(rows)
    s[out].unroll(x_pix)
    s[out].vectorize(c_lane)
    s[conv].compute_at(s[out], c_vec)
    _, _, pixels, channels = s[conv].op.axis
    _, channel_lane = s[conv].split(channels, lanes)
    ry, rx = s[conv].op.reduce_axis
    s[conv].reorder(ry, rx, pixels, channel_lane)
    for axis in (ry, rx, pixels):
        s[conv].unroll(axis)
    s[conv].vectorize(channel_lane)
    pad = conv.op.input_tensors[0]
    if pad.op.name == "data_pad":
        pad_rows_in_parallel(s, pad)
    return s

