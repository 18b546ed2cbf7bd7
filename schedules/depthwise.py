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
A padded conv reads its input in place, each tap testing its bounds (:func:`_tap_product`),
where that is the faster: at stride 2, and at stride 1 when the graph half found the weight
finite (``KernelSpec.finite_weight``); otherwise it pads its whole input up front in a parallel
pass split by rows. Off the map a tap's product is 0 x w, which is 0 for a finite weight and NaN
otherwise; a weight not known finite needs a test of each tap's weight, which at stride 1 costs
more than the copy. On emeraldrapids (2 threads, kernels alone, 9 interleaved rounds) the copy
against the bound test: 112x112x96 stride 2 0.280 against 0.128 ms, 56x56x144 stride 2 0.056
against 0.024 (the copy writes the whole input for an output a quarter its size); at stride 1, a
finite weight: 56x56x144 0.096 against 0.041, 112x112x32 0.074 against 0.037, 14x14x576 0.030
against 0.011; with the weight test instead, 56x56x144 0.217 against 0.109 for the copy.
MobileNet-v2 ran in 0.938x the time with its strided convs in place, then 0.90-0.92x that with the
stride-1 ones too (interleaved with ONNX Runtime, 21 rounds).
``owb`` is the tile width of Wo with the fewest computed-and-dropped columns (:func:`tile_width`);
it is not a tuning knob: at 9 FMAs a pixel the tile hardly matters (owb 4-16 within ~10 % on Zen
4), the memory traffic does.

Measured on Zen 4 (AVX-512, 2 threads, conv + bias + ReLU6, the kernel alone): 112x112x32
0.059 ms against 0.81 for stock TVM's NHWC depthwise schedule; 56x56x144 0.070 against 0.24;
14x14x512 0.025 against 0.071. Refuses anything but float32 data and a packed depthwise spec
(the strategy never sends other convs here).
"""

from tvm import te

from ..spec import KernelSpec
from .epilogue import apply_epilogue
from .te_utils import Select, find_tagged, inline_all_but, pad_for_tiles, pad_rows_in_parallel

NAME = "depthwise_conv2d_nhwc_fused.x86"
#: Tag of the conv stage, by which the schedule finds it.
CONV_TAG = "depthwise_conv2d_nhwc_fused"
#: The one dtype the kernel computes in (an expression's own dtype is spelled differently in the
#: two TVM stacks, so the constants name it).
DTYPE = "float32"
#: The range of ``owb``, output pixels per register tile.
MIN_OWB, MAX_OWB = 4, 8


def tile_width(wo: int) -> int:
    """``owb`` for an output width ``wo``: the tile in ``MIN_OWB..MAX_OWB`` (at most ``wo``)
    whose tiles overhang Wo by the fewest columns, the widest of those."""
    widths = range(max(1, min(MAX_OWB, wo)), max(1, min(MIN_OWB, wo)) - 1, -1)
    return min(widths, key=lambda t: -(-wo // t) * t - wo)


def compute(spec: KernelSpec, data, weight, bias, residual):
    """TE of the depthwise kernel of ``spec`` on its packed ``[C/VL, Kh, Kw, VL]`` weight."""
    if not spec.depthwise or spec.lanes is None or {str(data.dtype), str(weight.dtype)} != {DTYPE}:
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
    if reads_in_place(spec):  # the last tile's columns past Wo fail the bound test too
        (top, left), clamp = spec.padding[:2], False
        product = _finite_tap_product if spec.finite_weight else _tap_product
    else:  # the last tile's columns past Wo: padded for, or read again from column Wo-1 (clamp)
        data, clamp = pad_for_tiles(data, spec, wo_pad)
        (top, left), product = (0, 0), _copy_product
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def element(b, y, x, c):
        if clamp:
            x = te.min(x, wo - 1)
        row, col = y * sh + ry * dh - top, x * sw + rx * dw - left
        tap = weight[c // lanes, ry, rx, c % lanes]
        return te.sum(product(data, b, row, col, c, tap), axis=[ry, rx])

    conv = te.compute((n, ho, wo_pad, channels), element, name="conv", tag=CONV_TAG)
    acc = te.compute((n, ho, wo, channels), lambda *i: conv(*i), name="acc")
    return apply_epilogue(acc, bias, residual, spec.activation, spec.alpha)


def reads_in_place(spec: KernelSpec) -> bool:
    """Whether the kernel of ``spec`` reads its padded input in place (:func:`_tap_product`)
    rather than from a padded copy: strided convs, whose copy writes the whole input for an
    output of a quarter its size, and convs of a weight known finite. At stride 1 the copy is
    faster than testing each tap's weight (see the module docstring)."""
    return any(spec.padding) and (max(spec.strides) > 1 or spec.finite_weight)


def _copy_product(data, b, row, col, c, tap):
    """``data[b, row, col, c] * tap`` on an input that needs no bound test (padded or valid)."""
    return data[b, row, col, c] * tap


def _tap_product(data, b, row, col, c, tap):
    """``data[b, row, col, c] * tap`` with the padding read as 0, without a padded copy: off the
    map the product is 0 x ``tap``, written as 0 for a finite tap and NaN otherwise, for TVM's
    simplifier folds ``0 * tap`` to 0 where it proves a tap off the map, which would drop a
    non-finite weight's NaN."""
    zero_times_tap = Select(
        te.isfinite(tap), te.const(0, DTYPE), te.const(float("nan"), DTYPE)
    )
    return _bounded_product(data, b, row, col, c, tap, zero_times_tap)


def _finite_tap_product(data, b, row, col, c, tap):
    """:func:`_tap_product` of a finite ``tap`` (``KernelSpec.finite_weight``): 0 off the map."""
    return _bounded_product(data, b, row, col, c, tap, te.const(0, DTYPE))


def _bounded_product(data, b, row, col, c, tap, off_map):
    """``data[b, row, col, c] * tap`` where (row, col) is on the map, else ``off_map``."""
    _, h, w, _ = data.shape
    inside = te.all(row >= 0, row < h, col >= 0, col < w)
    return te.if_then_else(inside, data[b, row, col, c] * tap, off_map)


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

