"""The fast fused kernel: NHWC conv2d + bias + [residual] + activation on packed weights (x86).

``tvm_fuse.strategy`` chooses it when ``fast_path_refusal`` finds nothing and the graph half's
``PackWeights`` has packed the weight to the layout ``strategy.preferred_spec`` names,
``OHWI{VL}o`` (``schedules.packing``). Vectorized over output channels:
a register tile of ``owb`` output pixels x ``ocb`` vectors of VL channels accumulates over
(Ci block, Kh, Kw, Ci) with one broadcast input feeding ``ocb`` FMAs. Two tilings (knob ``flat``):

- along Wo (large maps): (N, Ho, Co blocks) fused into one parallel loop (order: see below); the
  conv is computed on a width padded up to a multiple of ``owb`` (extra columns never stored)
  at each Wo tile, and the epilogue is applied to the accumulators before their single store;
- along the flattened Ho*Wo axis (small maps, e.g. 7x7, where Wo tiles waste columns): the conv
  is its own parallel loop over (N, pixel tiles, Co blocks), tiles crossing rows, accumulators
  in a local cache; the epilogue is a second vectorized pass over the (small) output.

Rows outside Co blocks in the parallel loop: the cores split the map by rows, as the kernels
before and after do (the boundary transposes, the other convs), so a core reads mostly the rows
it wrote itself, from its own L2. Split by Co blocks first, each core read every row, half of
them from the other core's cache: on Zen 4 the single-conv layers ran up to 20 % slower that way
(``down`` 0.126 against 0.101 ms, ``r50_expand`` 0.73 against 0.64, ``seed`` 0.63 against
0.59; best of 21 interleaved runs), and the 3x3 layers and whole ResNets within the noise.
Where the weight is larger than the input (small maps, many channels: ResNet-50's last stages),
Co blocks go outside the rows instead (knob ``co_outer``, ``tiling.co_blocks_outside_rows``):
split by rows, each core streamed the whole weight, from L3 or memory, for each of its rows;
split by Co blocks, each streams its half once. On Zen 5 the 7x7 1x1 convs of ResNet-50 ran in
0.92x the time, l4 in 0.95x, and ResNet-50 as a whole in 0.95x (interleaved A/B, 21 rounds).
A weight that fits in a third of the L2 stays there whole, and the rows go outside again.

A padded conv pads its whole input up front, in a parallel pass split by rows as the conv is.
Padding the rows each parallel iteration reads, inside it, copies every input row Kh/Sh times
(3.5 on a 7x7 stride-2 stem) with the copy on the conv's critical path: on Zen 4 the single-conv
layers ran 3-4 % faster with the pass up front (stem, seed; best of 21 interleaved runs), AVX2
code 4-10 % (stem, l1 with the direct kernel), whole ResNets within the noise. A large input
(``tiling.pads_by_rows``) is still padded row by row: there the two run the same, and the
whole padded copy would be held while the kernel runs.

A Co that is not a multiple of VL arrives zero-padded in the packed weight (the spec's output
keeps the real Co): the padded channels are computed and never stored. Tile sizes are AutoTVM
knobs whose fallback config is the analytic model of ``schedules.tiling``. The AutoTVM template
takes the logical task (NHWC data, HWIO weight, the spec's named fields: ``WORKLOAD_FIELDS``), so
tasks are extracted from the graph as the pipeline leaves it, and records name the model's
convs, not their packed weights. Refuses weights that are not packed and non-float32 dtypes (the
strategy never sends those here).
"""

import dataclasses

from tvm import autotvm, te
from tvm.autotvm.task.space import OtherOptionEntity, SplitEntity

from .. import lowering
from ..spec import KernelSpec
from . import fused_te, packing, tiling, transposes
from .fused_te import CONV_TAG
from .te_utils import find_tagged, inline_all_but, pad_rows_in_parallel

NAME = "conv2d_nhwc_fused.x86"
#: Tag of the HWIO view of a packed weight that the template receives at build time.
LOGICAL_WEIGHT_TAG = "conv2d_nhwc_fused_hwio_view"

#: The AutoTVM workload after the task name: the template's arguments, the logical task.
WORKLOAD_FIELDS = (
    "data",
    "weight",
    "bias",
    "residual",
    "strides",
    "padding",
    "dilation",
    "activation",
    "alpha",
    "lanes",
)


def compute(spec: KernelSpec, data, weight, bias, residual):
    """The fused kernel of ``spec`` on its packed ``[Co/VL, Kh, Kw, Ci, VL]`` weight.

    The template sees the logical task: the weight enters as an HWIO view of the packed tensor
    (never computed: the template reads the packed tensor under it), and NCHW data
    (``KernelSpec.with_nchw_data``) as an NHWC view, so the AutoTVM workload, and the tuning
    records, name the NHWC data and HWIO weight as the graph had them."""
    if spec.lanes is None or {data.dtype, weight.dtype} != {"float32"}:
        raise ValueError(
            f"{NAME}: needs float32 data and a packed OHWI{{VL}}o weight, got data "
            f"{data.dtype}{list(data.shape)} and weight {weight.dtype}{list(weight.shape)}"
        )
    if spec.data.layout == "NCHW":  # an NHWC view, inlined into the pad pass that reads it
        data = transposes.entry_compute(data)
    return conv2d_nhwc_fused_x86(
        *workload_args(spec, data, _hwio_view(spec, weight), bias, residual)
    )


def workload_args(spec: KernelSpec, data, weight, bias, residual) -> tuple:
    """The template's arguments (``WORKLOAD_FIELDS``) for ``spec``: tensors, then named fields."""
    fields = (spec.strides, spec.padding, spec.dilation, spec.activation, spec.alpha, spec.lanes)
    return (data, weight, bias, residual, *fields)


def describe_workload(workload) -> dict:
    """A workload of this template (``(NAME, *args)``) as a dict of ``WORKLOAD_FIELDS``."""
    return dict(zip(WORKLOAD_FIELDS, workload[1:]))


def _hwio_view(spec: KernelSpec, packed):
    kh, kw = spec.kernel_size
    lanes = spec.lanes
    return te.compute(
        (kh, kw, spec.in_channels, spec.out_channels),
        lambda y, x, i, o: packed[o // lanes, y, x, i, o % lanes],
        name="weight_hwio",
        tag=LOGICAL_WEIGHT_TAG,
    )


def _packed_weight(spec: KernelSpec, weight):
    """The packed weight under the template's HWIO ``weight``: the real packed tensor at build
    time, a placeholder of the packed shape while tuning (as TVM's ``conv2d_NCHWc.x86`` does)."""
    if weight.op.tag == LOGICAL_WEIGHT_TAG:
        return weight.op.input_tensors[0]
    return te.placeholder(spec.weight.shape, spec.weight.dtype, name="weight_packed")


def _define_knobs(cfg, spec: KernelSpec):
    """owb x ocb: the register tile; flat: tile the flattened Ho*Wo pixel axis (tiles cross
    rows) instead of Wo; tile_ic: the Ci split; pad_at_row: pad the input rows a parallel
    iteration reads (1) or the whole input up front (0; the model: ``tiling.pads_by_rows``);
    ic_outside: Ci blocks outside the Wo tiles, accumulating in a row buffer (measured slower:
    the tile leaves registers; not used by flat tiles); vec_outer: loop over the tile's channel
    vectors outside its pixels, so that the broadcasts stay in registers and the weights stream
    (the model's choice when owb < ocb); co_outer: the parallel loop takes Co blocks before
    rows (or pixel tiles)."""
    co_vectors = spec.weight.shape[spec.weight.layout.index("O")]
    cfg.define_knob("owb", list(range(1, tiling.MAX_OWB + 1)))
    cfg.define_knob("ocb", [d for d in range(1, tiling.MAX_OCB + 1) if co_vectors % d == 0])
    cfg.define_knob("flat", [0, 1])
    cfg.define_split("tile_ic", spec.in_channels, num_outputs=2)
    cfg.define_knob("pad_at_row", [0, 1])
    cfg.define_knob("ic_outside", [0, 1])
    cfg.define_knob("vec_outer", [0, 1])
    cfg.define_knob("co_outer", [0, 1])
    if cfg.is_fallback:
        tiles = tiling.tiles_for(spec)
        cfg["owb"] = OtherOptionEntity(tiles.owb)
        cfg["ocb"] = OtherOptionEntity(tiles.ocb)
        cfg["flat"] = OtherOptionEntity(int(tiles.flat))
        cfg["tile_ic"] = SplitEntity([-1, tiles.icb])
        cfg["pad_at_row"] = OtherOptionEntity(int(tiling.pads_by_rows(spec, tiles)))
        cfg["ic_outside"] = OtherOptionEntity(0)
        cfg["vec_outer"] = OtherOptionEntity(int(tiles.vector_outer))
        cfg["co_outer"] = OtherOptionEntity(int(tiling.co_blocks_outside_rows(spec)))


@autotvm.register_topi_compute(NAME)
def conv2d_nhwc_fused_x86(
    cfg, data, weight, bias, residual, strides, padding, dilation, activation, alpha, lanes
):
    """The AutoTVM template (positional arguments, ``WORKLOAD_FIELDS``: they form the
    workload): NHWC ``data``, HWIO ``weight``, optional bias and residual, the conv and epilogue
    fields of the spec and the packed weight's ``lanes``."""
    spec = KernelSpec.conv(
        tuple(data.shape), tuple(weight.shape), strides, padding, dilation
    ).with_epilogue(
        bias is not None, residual is not None, activation=activation, alpha=float(alpha)
    )
    spec = dataclasses.replace(spec, weight=packing.packed_weight(spec, lanes))
    _define_knobs(cfg, spec)
    return _kernel(cfg, spec, data, _packed_weight(spec, weight), bias, residual)


def _kernel(cfg, spec: KernelSpec, data, weight, bias, residual):
    """TE of the fast kernel on the packed ``weight``, with the knobs of ``cfg``."""
    return fused_te.compute(spec, data, weight, bias, residual, cfg["owb"].val, cfg["flat"].val)


@autotvm.register_topi_schedule(NAME)
def schedule(cfg, outs):
    """The hand-written schedule of :func:`conv2d_nhwc_fused_x86`."""
    outs = [outs] if isinstance(outs, te.Tensor) else outs
    s = te.create_schedule([x.op for x in outs])
    out = outs[0]
    conv = find_tagged(out, CONV_TAG, NAME)
    inline_all_but(s, out, conv)
    _schedule_tile(cfg, s, out, conv)
    return s


def _split_out(s, out, lanes, ocb):
    """(c_blk, c_vec, c_lane) of the output's channel axis; c_lane vectorized."""
    c_outer, c_lane = s[out].split(out.op.axis[3], lanes)
    c_blk, c_vec = s[out].split(c_outer, ocb)
    s[out].vectorize(c_lane)
    return c_blk, c_vec, c_lane


def _schedule_register_tile(cfg, s, conv, pixels, channels, outer=()):
    """The reduction around the register tile: (Ci block, ``outer``, Kh, Kw, Ci) outside, the
    tile's ``pixels`` x ``channels`` (vectors, lanes) unrolled and vectorized, in the operand
    order of knob ``vec_outer``."""
    ry, rx, rc = s[conv].op.reduce_axis
    c_vec, c_lane = channels
    rc_blk, rc_in = cfg["tile_ic"].apply(s, conv, rc)
    tile = (c_vec, pixels) if cfg["vec_outer"].val else (pixels, c_vec)
    s[conv].reorder(rc_blk, *outer, ry, rx, rc_in, *tile, c_lane)
    s[conv].unroll(pixels)
    s[conv].unroll(c_vec)
    s[conv].vectorize(c_lane)
    # with Co blocks before rows, the next parallel iteration reads the same group of ocb Co
    # blocks again (rows of a Co block) or the next one (the packed weight's outermost axis):
    # prefetch the next group (with rows first every group stays in cache: no prefetch)
    packed = conv.op.input_tensors[1].shape
    ahead = tiling.next_group_prefetch(cfg["ocb"].val, packed, bool(cfg["co_outer"].val))
    if ahead is not None:
        lowering.mark(s[conv], rc_in, ahead)


def _schedule_rows(cfg, s, out, conv, lanes):
    """Tiles along Wo: parallel (N, Ho, Co blocks); the conv tile computed at each Wo tile, its
    accumulators stored once through the epilogue."""
    n, h, w, _ = s[out].op.axis
    c_blk, c_vec, c_lane = _split_out(s, out, lanes, cfg["ocb"].val)
    w_blk, w_pix = s[out].split(w, cfg["owb"].val)
    parallel = (c_blk, n, h) if cfg["co_outer"].val else (n, h, c_blk)
    s[out].reorder(*parallel, w_blk, w_pix, c_vec, c_lane)
    rows = s[out].fuse(*parallel)
    s[out].parallel(rows)
    s[out].unroll(w_pix)
    s[out].unroll(c_vec)
    cw, outer = s[conv].op.axis[2], ()
    if cfg["ic_outside"].val:  # Ci blocks outside the Wo tiles: accumulate in a row buffer
        s[conv].compute_at(s[out], rows)
        cw_blk, cw = s[conv].split(cw, cfg["owb"].val)
        outer = (cw_blk,)
    else:
        s[conv].compute_at(s[out], w_blk)
    channels = s[conv].split(s[conv].op.axis[3], lanes)
    _schedule_register_tile(cfg, s, conv, cw, channels, outer)
    return s[out], rows


def _schedule_flat(cfg, s, out, conv, lanes):
    """Tiles along Ho*Wo: the flat conv is its own parallel loop over (N, pixel tiles, Co
    blocks) with the register tile in a local cache; the epilogue is a second, vectorized pass
    (bound inference cannot map a flat tile back to (Ho, Wo) rows for compute_at)."""
    n, h, _, _ = s[out].op.axis
    _split_out(s, out, lanes, cfg["ocb"].val)
    s[out].parallel(s[out].fuse(n, h))
    local = s.cache_write(conv, "local")
    b, p, c_outer, c_lane = s[conv].op.axis
    p_blk, p_pix = s[conv].split(p, cfg["owb"].val)
    c_blk, c_vec = s[conv].split(c_outer, cfg["ocb"].val)
    parallel = (c_blk, b, p_blk) if cfg["co_outer"].val else (b, p_blk, c_blk)
    s[conv].reorder(*parallel, p_pix, c_vec, c_lane)
    tiles = s[conv].fuse(*parallel)
    s[conv].parallel(tiles)
    s[conv].vectorize(c_lane)
    s[local].compute_at(s[conv], tiles)
    _, pixels, *channels = s[local].op.axis
    _schedule_register_tile(cfg, s, local, pixels, channels)
    return s[conv], tiles


def _schedule_tile(cfg, s, out, conv):
    lanes = int(conv.op.input_tensors[1].shape[4])
    schedule_loops = _schedule_flat if cfg["flat"].val else _schedule_rows
    stage, rows = schedule_loops(cfg, s, out, conv, lanes)
    pad = conv.op.input_tensors[0]
    if pad.op.name == "data_pad":
        _schedule_pad(cfg, s, pad, stage, rows)


def _schedule_pad(cfg, s, pad, stage, rows):
    if cfg["pad_at_row"].val:
        s[pad].compute_at(stage, rows)
        return
    pad_rows_in_parallel(s, pad)
