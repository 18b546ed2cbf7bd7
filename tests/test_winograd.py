"""The Winograd kernel and its weight transform against NumPy (float64 references).

Each kernel case is one LLVM build of the TE compute + schedule on a Winograd-domain weight made
by the NumPy transform. The cases cover Ci/Co 3, 16, 17, 64, 256, maps 7x7, 14x14, 56x56 and odd
ones (tiles overhanging the edge), batch 1 and 2, asymmetric and no padding, every epilogue kind
(none, bias, residual, each activation the reference knows), F(2x2) and F(4x4), VL 8 and 16,
stride 1 and 2 (the polyphase form: odd and even maps, tiles whose input overhangs or falls
short of the padded map), without a cross product. The error bound is relative to max
|reference| and depends on m: the larger tiles' transforms have larger coefficients (measured on
these cases: F(2x2) <= 6e-7, F(4x4) <= 6e-6).
"""

import re
from dataclasses import dataclass

import numpy as np
import pytest
import tvm
from test_kernel import host_target, reference
from test_kernel_tiling import host_is, machine_has
from tvm import autotvm, relay, te

from tvm_fuse import lowering, testing
from tvm_fuse.schedules import loop_nest, tiling, winograd, winograd_tiling
from tvm_fuse.spec import KernelSpec
from tvm_fuse.schedules import winograd_weights as weights

#: max |error| / max |float64 reference| asserted per m.
ERROR_BOUND = {2: 2e-6, 4: 2e-5}


@dataclass(frozen=True)
class Case:
    ci: int
    co: int
    hw: tuple = (7, 7)
    m: int = 2
    batch: int = 1
    padding: tuple = (1, 1, 1, 1)
    activation: str = "relu"
    bias: bool = True
    residual: bool = False
    lanes: int = 8
    stride: int = 1


CASES = {
    "ci3_co16_map7_f2": Case(3, 16),
    "ci16_co3_map7_f4_bias_only": Case(16, 3, m=4, activation="none"),
    "ci17_co17_odd_asym_batch2_residual_f2": Case(
        17, 17, hw=(9, 11), batch=2, padding=(2, 1, 0, 1), residual=True
    ),
    "ci17_co16_odd_asym_residual_f4": Case(
        17, 16, hw=(11, 9), m=4, padding=(0, 2, 1, 0), residual=True
    ),
    "ci64_co64_map14_leaky_f4": Case(64, 64, hw=(14, 14), m=4, activation="leaky_relu"),
    "ci64_co64_map14_batch2_nothing_f2": Case(
        64, 64, hw=(14, 14), batch=2, activation="none", bias=False
    ),
    "ci16_co64_map56_sigmoid_f4": Case(16, 64, hw=(56, 56), m=4, activation="sigmoid"),
    "ci16_co32_nopad_residual_vl16_f4": Case(
        16, 32, hw=(10, 13), m=4, padding=(0, 0, 0, 0), residual=True, lanes=16
    ),
    "ci16_co17_batch2_vl16_f2": Case(16, 17, batch=2, lanes=16),
    "s2_ci3_co16_map7_f2": Case(3, 16, stride=2),
    "s2_ci17_co17_odd_asym_batch2_residual_f2": Case(
        17, 17, hw=(9, 11), batch=2, padding=(2, 1, 0, 1), residual=True, stride=2
    ),
    # Wo 4 from a 10-wide map: the one F(4x4) tile's input ends before the map does
    "s2_ci16_co17_nopad_residual_f4": Case(
        16, 17, hw=(8, 10), m=4, padding=(0, 0, 0, 0), residual=True, stride=2
    ),
    "s2_ci64_co64_map56_leaky_f4": Case(
        64, 64, hw=(56, 56), m=4, activation="leaky_relu", stride=2
    ),
    "s2_ci16_co32_map14_nothing_vl16_f4": Case(
        16, 32, hw=(14, 14), m=4, activation="none", bias=False, lanes=16, stride=2
    ),
}
SLOW_CASES = {
    "ci256_co256_map14_residual_f4": Case(256, 256, hw=(14, 14), m=4, residual=True),
    "ci256_co256_map7_batch2_f2": Case(256, 256, batch=2),
    "s2_ci256_co256_map28_residual_f2": Case(256, 256, hw=(28, 28), residual=True, stride=2),
}


def make_inputs(rng, case):
    batch, hw, ci, co, padding = case.batch, case.hw, case.ci, case.co, case.padding
    data = rng.standard_normal((batch, *hw, ci)).astype("float32")
    weight = (rng.standard_normal((3, 3, ci, co)) / np.sqrt(9 * ci)).astype("float32")
    bias = rng.standard_normal(co).astype("float32") if case.bias else None
    out_shape = (
        batch,
        (hw[0] + padding[0] + padding[2] - 3) // case.stride + 1,
        (hw[1] + padding[1] + padding[3] - 3) // case.stride + 1,
        co,
    )
    residual = rng.standard_normal(out_shape).astype("float32") if case.residual else None
    return data, weight, bias, residual


def winograd_spec(data, weight, bias, residual, padding, activation, m, lanes, stride=1):
    spec = KernelSpec.conv(data.shape, weight.shape, (stride,) * 2, padding, (1, 1))
    spec = spec.with_epilogue(
        bias is not None, residual is not None, activation=activation, alpha=0.1
    )
    return weights.winograd_spec(spec, m, lanes)


def build_kernel(data, weight, bias, residual, padding, activation, m, lanes, stride=1):
    """Build the TE kernel; return its output on the NumPy inputs."""
    spec = winograd_spec(data, weight, bias, residual, padding, activation, m, lanes, stride)
    tensors = {
        "data": data,
        "weight": weights.transform_hwio(weight, m, lanes, stride),
        "bias": bias,
        "residual": residual,
    }
    holders = {k: te.placeholder(v.shape, name=k) for k, v in tensors.items() if v is not None}
    with lowering.lowering_context(), host_target():  # as tvm_fuse builds it: with the prefetch
        out = winograd.compute(spec, **{k: holders.get(k) for k in tensors})
        s = winograd.schedule([out])
        func = tvm.build(s, list(holders.values()) + [out], host_target())
    result = tvm.nd.empty([int(d) for d in out.shape], "float32")
    func(*[tvm.nd.array(tensors[k]) for k in holders], result)
    return result.numpy()


def check_case(case, rng):
    data, weight, bias, residual = make_inputs(rng, case)
    got = build_kernel(
        data, weight, bias, residual, case.padding, case.activation, case.m, case.lanes, case.stride
    )
    strides = (case.stride,) * 2
    want = reference(
        data, weight, bias, residual, strides, case.padding, (1, 1), case.activation, 0.1
    )
    assert got.shape == want.shape
    error = np.abs(got - want).max() / np.abs(want).max()
    assert error <= ERROR_BOUND[case.m], f"F({case.m}x{case.m}): relative error {error:.3g}"


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_kernel_matches_float64_reference(case, rng):
    check_case(case, rng)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES.values(), ids=SLOW_CASES.keys())
def test_kernel_large_channels(case, rng):
    check_case(case, rng)


#: NaN and +-Inf in the input: a tile's interior, a pixel two tiles share, the map's corner, and
#: an Inf that meets a zero tap (Inf x 0 is NaN in the direct conv).
SPECIALS = {(0, 5, 6, 3): np.inf, (0, 8, 4, 0): -np.inf, (0, 0, 12, 7): np.nan}
SPECIALS[0, 10, 10, 5] = np.inf


@pytest.mark.parametrize("stride, m, lanes", [(1, 2, 8), (1, 4, 16), (2, 2, 16), (2, 4, 8)])
def test_nan_and_inf_come_out_as_the_direct_conv_gives_them(stride, m, lanes, rng):
    """The tiles whose input holds NaN or Inf take the direct conv's values: NaN and +-Inf
    exactly where the float64 direct conv has them (not NaN across the tile), and every finite
    output, those of the same tiles included, within the bound."""
    case = Case(16, 24, (15, 13), m, activation="none", residual=True, lanes=lanes, stride=stride)
    data, weight, bias, residual = make_inputs(rng, case)
    for spot, special in SPECIALS.items():
        data[spot] = special
    weight[1, 1, 5, 2] = 0.0  # the centre tap of input channel 5, output channel 2
    got = build_kernel(data, weight, bias, residual, case.padding, "none", m, lanes, stride)
    want = reference(data, weight, bias, residual, (stride,) * 2, case.padding, (1, 1), "none", 0)
    assert np.isnan(want).any() and np.isposinf(want).any() and np.isneginf(want).any()
    assert np.isnan(want[0, 10 // stride, 10 // stride, 2])  # the Inf met the zero tap
    testing.assert_same_including_specials(got, want, ERROR_BOUND[m])


@pytest.mark.parametrize("stride, m", [(1, 2), (2, 4)])
def test_nan_and_inf_in_one_image_of_a_batch_stay_in_it(stride, m, rng):
    """Batch 2, Ci and Co 17 (Co padded to whole vectors), asymmetric padding: the specials in
    the second image come out as the direct conv gives them, and the first image, whose tiles
    share nothing with them, is all finite and within the bound."""
    case = Case(17, 17, (13, 11), m, batch=2, padding=(2, 1, 0, 1), activation="none",
                residual=True, lanes=16, stride=stride)
    data, weight, bias, residual = make_inputs(rng, case)
    for (_, y, x, c), special in SPECIALS.items():
        data[1, y % 13, x % 11, c] = special
    weight[1, 1, 5, 2] = 0.0
    got = build_kernel(data, weight, bias, residual, case.padding, "none", m, 16, stride)
    want = reference(data, weight, bias, residual, (stride,) * 2, case.padding, (1, 1), "none", 0)
    assert np.isfinite(want[0]).all() and np.isnan(want[1]).any() and np.isinf(want[1]).any()
    testing.assert_same_including_specials(got, want, ERROR_BOUND[m])
    assert np.isfinite(got[0]).all()


@pytest.mark.parametrize("stride, m", [(1, 4), (2, 2)])
def test_nan_and_inf_in_the_weight_come_out_as_the_direct_conv_gives_them(stride, m, rng):
    """A NaN tap (output channel 3) and an Inf tap (output channel 5, +-Inf where the input's
    sign decides) reach every tile's transform: those channels take the direct conv's values."""
    case = Case(16, 24, (9, 11), m, activation="none", lanes=16, stride=stride)
    data, weight, bias, residual = make_inputs(rng, case)
    weight[0, 0, 1, 3], weight[2, 1, 4, 5] = np.nan, np.inf
    got = build_kernel(data, weight, bias, residual, case.padding, "none", m, 16, stride)
    want = reference(data, weight, bias, residual, (stride,) * 2, case.padding, (1, 1), "none", 0)
    assert np.isnan(want[..., 3]).any() and np.isposinf(want[..., 5]).any()
    assert np.isneginf(want[..., 5]).any() and np.isfinite(want[..., :3]).all()
    testing.assert_same_including_specials(got, want, ERROR_BOUND[m])


@pytest.mark.parametrize(
    "knobs",
    [
        dict(tile_p=3, tile_co=1, block_rows=2, co_chunks=2, v_root=1),
        dict(tile_p=4, tile_co=2, block_rows=3, co_chunks=1, v_root=0),
    ],
)
@pytest.mark.parametrize("stride", [1, 2])
def test_tuned_configs_stay_correct(knobs, stride, rng):
    """A config other than the fallback (as a tuner would apply it) computes the same conv; a
    stride-2 workload names its strides, a stride-1 one does not."""
    case = Case(16, 32, hw=(13, 9) if stride == 1 else (25, 17), m=4, stride=stride)
    data, weight, bias, _ = make_inputs(rng, case)
    spec = winograd_spec(data, weight, bias, None, case.padding, case.activation, 4, 8, stride)
    args = winograd.workload_args(
        spec,
        *(te.placeholder(a.shape, name=n) for n, a in [("d", data), ("w", weight), ("b", bias)]),
        None,
    )
    task = autotvm.task.create(
        winograd.NAME, args=autotvm.task.serialize_args(args), target=host_target()
    )
    assert ("strides" in winograd.describe_workload(task.workload)) == (stride == 2)
    space = task.config_space
    assert set(space.space_map) == {"tile_p", "tile_co", "block_rows", "co_chunks", "v_root"}
    config = space.get(_flat_index(space, knobs))
    assert {k: config[k].val for k in knobs} == knobs
    with autotvm.task.ApplyConfig(config):
        check_case(case, rng)


def _gemm_prefetches(lanes: int, knobs: dict) -> tuple[list, str]:
    """(index, locality) of each weight prefetch in the lowered TIR of a 16 -> 32 channel
    F(4x4) kernel of ``lanes`` lanes with the template's ``knobs``, and that TIR."""
    case = Case(16, 32, hw=(13, 9), m=4)
    data, weight, bias, _ = make_inputs(np.random.default_rng(0), case)
    spec = winograd_spec(data, weight, bias, None, case.padding, case.activation, 4, lanes)
    holders = [te.placeholder(a.shape, name=n) for n, a in [("d", data), ("w", weight)]]
    args = winograd.workload_args(spec, *holders, te.placeholder(bias.shape, name="b"), None)
    task = autotvm.task.create(
        winograd.NAME, args=autotvm.task.serialize_args(args), target=host_target()
    )
    with lowering.lowering_context(), host_target():
        s, arg_bufs = task.instantiate(task.config_space.get(_flat_index(task.config_space, knobs)))
        text = str(tvm.lower(s, arg_bufs))
    return re.findall(r"T\.prefetch\(T\.address_of\(\w+\[(.*?)\]\), 0, (\d), 1\)", text), text


@pytest.mark.parametrize("tile_co, slices_ahead", [(1, 1), (2, 4)])
def test_the_gemm_prefetches_the_weight_slice_it_reads_next(tile_co, slices_ahead):
    """Co chunks of two vectors (of four): with one-vector register tiles the slice read next
    is the chunk's next vector (1 slice of Ci x VL ahead); with two-vector tiles, the next
    point's, all four Co vectors ahead (``lowering``); into L1 as well (locality 3)."""
    knobs = dict(tile_p=3, tile_co=tile_co, block_rows=2, co_chunks=2, v_root=1)
    ahead, text = _gemm_prefetches(8, knobs)
    assert {locality for _, locality in ahead} == {"3"}
    # the tile's vectors are Ci x VL apart: their prefetches too, from the distance on
    offsets = sorted(int(index.rpartition(" + ")[2]) for index, _ in ahead)
    vector = 16 * 8  # Ci x VL
    assert offsets == [slices_ahead * vector + j * vector for j in range(tile_co)], text


@pytest.mark.parametrize("amd, locality", [(False, "2"), (True, "3")], ids=["intel", "zen5"])
def test_intel_avx512_prefetches_the_gemm_slice_into_l2_only(amd, locality, monkeypatch):
    """16 lanes: an Intel host's GEMM prefetches its next weight slice into L2 only (locality
    2), a Zen 5 host's into L1 as well (3): ``tiling.Machine.prefetch_into_l1``."""
    host_is(monkeypatch, amd)
    knobs = dict(tile_p=3, tile_co=1, block_rows=2, co_chunks=2, v_root=1)
    ahead, text = _gemm_prefetches(16, knobs)
    assert ahead and {loc for _, loc in ahead} == {locality}, text


def _lowered_13x9(m, stride, co=24):
    """The spec and lowered TIR text of a 16 -> ``co`` channel kernel with a 13x9 output."""
    case = Case(16, co, hw=(13 * stride, 9 * stride), m=m, stride=stride)
    data, weight, bias, _ = make_inputs(np.random.default_rng(0), case)
    spec = winograd_spec(data, weight, bias, None, case.padding, case.activation, m, 8, stride)
    packed = weights.transform_hwio(weight, m, 8, stride)
    inputs = [("d", data), ("w", packed), ("b", bias)]
    holders = [te.placeholder(a.shape, name=n) for n, a in inputs]
    with lowering.lowering_context(), host_target():
        out = winograd.compute(spec, *holders, None)
        return spec, str(tvm.lower(winograd.schedule([out]), [*holders, out]))


@pytest.mark.parametrize("m, stride", [(4, 1), (2, 1), (4, 2)])
def test_the_fallback_loops_test_no_bounds_where_the_last_tiles_overhang(m, stride):
    """On a 13x9 output (tiles of 2 and 4 overhang it) the direct fallback runs over whole tiles:
    its loops hold no bound test, so LLVM moves the finite test out of them and a finite tile
    skips them (with the tests inside, a 55x55 F(4x4) conv ran them for every tile: 6x the
    time). The stores of the output keep their bound tests."""
    spec, text = _lowered_13x9(m, stride)
    assert spec.out_hw == (13, 9)
    loops = re.search(r"for rc_direct, kh_direct, kw_direct, y, x in T\.grid\(.*?\):\n(.*)\n", text)
    assert loops and " if " not in loops.group(1), text


@pytest.mark.parametrize("m, stride", [(4, 1), (2, 2)])
def test_the_input_transform_reads_the_input_in_place(m, stride):
    """No padded copy of the input: the lowered kernel allocates no ``data_pad`` and reads the
    padding as a bound test in the input transform (both backends; the Relax one in
    ``tests_relax/test_winograd.py``)."""
    spec, text = _lowered_13x9(m, stride)
    assert any(spec.padding)
    assert "data_pad" not in text and "wino_rows" in text, text


@pytest.mark.parametrize("m, stride, co", [(4, 1, 24), (2, 2, 24), (4, 1, 72), (4, 1, 128)])
def test_the_loop_nest_in_words_counts_the_lowered_kernels_parallel_blocks(m, stride, co):
    """``tvm-fuse explain``'s ``loops:`` line (``schedules.loop_nest``) says as many parallel
    blocks as the lowered kernel's block loop has iterations, and where the input is transformed
    as its parallel loops show (up front: a parallel loop of its own before the blocks'). Co of
    3 vectors: blocks of tile rows; 9: three Co chunks, the input up front; 16: a chunk per core."""
    spec, text = _lowered_13x9(m, stride, co)
    described = loop_nest.describe(spec, int(host_target().attrs["num-cores"]))
    blocks = int(re.search(r"(\d+) parallel blocks", described).group(1))
    parallel = re.findall(r"in T\.parallel\((\d+)\)", text)
    assert int(parallel[-1]) == blocks, (described, parallel)
    up_front = "transformed up front" in described
    assert len(parallel) == 1 + up_front and (up_front or "transformed in each block" in described)


def _flat_index(space, knobs):
    """The index in ``space`` of the config with ``knobs`` (AutoTVM's mixed-radix order)."""
    index, stride = 0, 1
    for name, knob in space.space_map.items():
        index += [e.val for e in knob.entities].index(knobs[name]) * stride
        stride *= len(knob.entities)
    return index


def test_plan_blocks_small_maps_along_co():
    """Large maps: a tile row per block. Small ones: every row in a block, a Co chunk per core
    that transforms the input itself; where Co has no chunk per core (9 vectors of 8 lanes in
    tiles of 3 on 2 cores), more chunks, the input transformed up front."""
    large = winograd_tiling.choose_plan(8, nh=14, nw=14, co_vectors=8)
    assert (large.block_rows, large.co_chunks, large.v_root) == (1, 1, 0)
    small = winograd_tiling.choose_plan(8, nh=4, nw=4, co_vectors=64, cores=2)
    assert (small.block_rows, small.co_chunks, small.v_root) == (4, 2, 0)
    odd = winograd_tiling.choose_plan(8, nh=4, nw=4, co_vectors=9, cores=2)
    assert (odd.block_rows, odd.co_chunks, odd.v_root) == (4, 3, 1)
    for plan, co_vectors in ((large, 8), (small, 64), (odd, 9)):
        assert co_vectors % (plan.co_chunks * plan.tile_co) == 0
        assert plan.tile_p * plan.tile_co + plan.tile_co + 1 <= 16  # fits 16 ymm registers


def test_plan_splits_rows_where_co_gives_fewer_chunks_than_cores():
    """64 Co (4 vectors of 16, one register tile) on a 7x7 grid: blocks of rows, not one block
    (which left a core idle: 1.5x the direct kernel's time, stride-2 F(4x4) on znver5)."""
    plan = winograd_tiling.choose_plan(16, nh=7, nw=7, co_vectors=4, cores=2)
    assert plan.co_chunks == 1 and -(-7 // plan.block_rows) >= 2 and plan.v_root == 0


@pytest.mark.parametrize("core, tile", [("intel", (7, 4)), ("zen5", (5, 4))])
def test_intel_avx512_gemm_tiles_may_spill_a_register(core, tile, monkeypatch):
    """49 tiles (a 7x7 grid) with Co chunks of 8 vectors: Intel's AVX-512 takes 7 x 4 (33
    registers: one spilled, no tile wasted), Zen 5 5 x 4 (25 registers, one tile in 50 wasted)."""
    host_is(monkeypatch, core != "intel")
    plan = winograd_tiling.choose_plan(16, nh=7, nw=7, co_vectors=16, cores=2)
    assert (plan.tile_p, plan.tile_co, plan.co_chunks) == (*tile, 2)


def test_a_block_whose_weight_overflows_l2_takes_its_tiles_in_one_pass(monkeypatch):
    """7x7x512 F(2x2) on 2 cores: 16 tiles a block, 8.4 MB of weight points per core. With a
    2 MiB L2 one register tile holds all 16 tiles (x 1 vector: 18 of 32 registers); a weight that
    fits keeps the model's 4 x 4; 16 ymm registers hold no 16-tile tile: AVX2 keeps its tile."""
    host_is(monkeypatch, amd=False)
    machine_has(monkeypatch, l2_bytes=2 * 1024 * 1024)
    weight_bytes = 16 * 512 * 512 * 4
    streamed = winograd_tiling.choose_plan(16, 4, 4, 32, 2, weight_bytes=weight_bytes)
    assert (streamed.tile_p, streamed.tile_co, streamed.block_rows) == (16, 1, 4)
    cached = winograd_tiling.choose_plan(16, 4, 4, 32, 2, weight_bytes=2 * 1024 * 1024)
    assert (cached.tile_p, cached.tile_co) == (4, 4)
    avx2 = winograd_tiling.choose_plan(8, 4, 4, 64, 2, weight_bytes=weight_bytes)
    assert avx2 == winograd_tiling.choose_plan(8, 4, 4, 64, 2) and avx2.tile_p < 16


@pytest.mark.parametrize(
    "case, tile",
    [
        (Case(32, 128, lanes=16, residual=True), (16, 1)),
        # batch 2, Co padded to 8 vectors, asymmetric padding: 4 x 4 tiles a block, 1 vector
        (
            Case(
                17, 120, hw=(7, 8), batch=2, padding=(2, 1, 0, 1), residual=True, lanes=16,
                activation="leaky_relu",
            ),
            (16, 1),
        ),
        # stride 2, batch 2: blocks of 2 tile rows (4 tiles), 4 vectors fit beside them
        (Case(16, 128, hw=(8, 8), batch=2, lanes=16, stride=2), (4, 4)),
    ],
    ids=["map7", "batch2_co120_asym", "s2_batch2"],
)
def test_the_one_pass_tile_computes_the_same_conv(case, tile, monkeypatch, rng):
    """F(2x2) convs whose weight overflows a (pretended) 1 KiB L2: the fallback config takes
    the one-pass tile (all of a block's tiles) and matches the float64 reference."""
    host_is(monkeypatch, amd=False)
    machine_has(monkeypatch, l2_bytes=1024)
    data, weight, bias, residual = make_inputs(rng, case)
    spec = winograd_spec(
        data, weight, bias, residual, case.padding, case.activation, case.m, case.lanes,
        case.stride,
    )
    plan = winograd_tiling.plan_for_spec(spec)
    assert (plan.tile_p, plan.tile_co) == tile
    assert plan.tile_p == plan.block_rows * winograd_tiling.tile_grid(spec)[1]
    check_case(case, rng)


@pytest.mark.parametrize(
    "hw, ci, co, lanes, core, want",
    [
        # out hw; measured on znver5 (16 lanes; 8: AVX2 code), Winograd's speed-up over direct
        # alone; F(2x2) wherever it pays (``STRIDE_2_FIRST``: F(4x4) lost in whole models)
        (28, 64, 128, 16, "zen5", 2),  # F(4x4) 1.35x, F(2x2) 1.18x
        (28, 128, 128, 16, "zen5", 2),  # 1.37x, 1.21x
        (55, 64, 64, 16, "zen5", 4),  # F(2x2) estimated 1.09x: below MIN_GAIN
        (14, 256, 256, 16, "zen5", 2),  # F(2x2) 1.27x, F(4x4) 0.86x
        (7, 512, 512, 16, "zen5", 0),  # 0.71x: its weight is 25 / 9 the direct one's
        (7, 256, 512, 8, "zen3", 0),  # 0.90x
        (14, 128, 256, 16, "intel", 2),  # emeraldrapids: with the 7x7x512 convs, ResNet-18 0.91x
        (28, 128, 128, 8, "zen3", 2),  # F(4x4) 1.62x
        (112, 3, 32, 8, "zen3", 0),  # 0.43x: too few input channels
    ],
)
def test_cost_model_choices_at_stride_2(hw, ci, co, lanes, core, want, monkeypatch):
    host_is(monkeypatch, core != "intel", core == "zen4")
    assert winograd_tiling.choose_winograd_tile(1, hw, hw, ci, co, lanes, stride=2) == want


@pytest.mark.parametrize(
    "hw, channels, lanes, core, want",
    [
        (56, 64, 8, "zen3", 4),
        (28, 128, 8, "zen3", 4),
        (14, 256, 8, "zen3", 2),
        (7, 512, 8, "zen3", 2),  # the F(4x4) weight (4x the direct one) costs too much to stream
        (7, 512, 16, "intel", 2),  # emeraldrapids: F(2x2) 1.40x alone, ResNet-18 0.91-0.93x
        (7, 512, 16, "zen4", 2),  # Zen 4 retires 8 lanes per FMA pipe, as AVX2 does
        (7, 512, 16, "zen5", 2),  # Zen 5's is twice as fast, and so is its memory
        (14, 256, 16, "zen5", 2),
        (28, 128, 16, "zen5", 4),
        (56, 3, 8, "zen3", 0),  # too few channels for the transforms to pay
    ],
)
def test_cost_model_choices_on_resnet_shapes(hw, channels, lanes, core, want, monkeypatch):
    host_is(monkeypatch, core != "intel", core == "zen4")
    got = winograd_tiling.choose_winograd_tile(1, hw, hw, channels, channels, lanes)
    assert got == want


# -- the weight transform ---------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("stride", [1, 2])
def test_numpy_transform_is_winograd(m, stride, rng):
    """1-D check of the matrices: A^T [(G g) * (B^T d)] is the correlation of d with g at
    ``stride``, for an input tile of alpha values."""
    a_mat, b_mat, g_mat = weights.transform_matrices(m, stride)
    alpha = weights.points(m, stride)
    assert a_mat.shape == (alpha, m) and b_mat.shape == (alpha, alpha) and g_mat.shape == (alpha, 3)
    d, g = rng.standard_normal(alpha), rng.standard_normal(3)
    direct = np.array([d[i * stride : i * stride + 3] @ g for i in range(m)])
    np.testing.assert_allclose(a_mat.T @ ((g_mat @ g) * (b_mat.T @ d)), direct, rtol=1e-12)


def test_stride2_transforms_are_exact_small_numbers():
    """F(2x2) at stride 2: every coefficient is 0 or +-1 (no rounding in any transform)."""
    for matrix in weights.transform_matrices(2, 2):
        assert set(np.unique(matrix)) <= {-1.0, 0.0, 1.0}
    with pytest.raises(ValueError, match="stride 3"):
        weights.transform_matrices(2, 3)


@pytest.mark.parametrize("m", [2, 4])
def test_stride2_weight_stores_the_odd_points_once(m, rng):
    """G's rows m+1..2m are all g1's (so the weight keeps row m + 1 for them): the stored
    weight is the full transform with those rows and columns dropped."""
    _, _, g_mat = weights.transform_matrices(m, 2)
    assert (g_mat[m + 1 :] == [0.0, 1.0, 0.0]).all()
    weight = rng.standard_normal((3, 3, 4, 8)).astype("float32")
    stored = weights.transform_hwio(weight, m, 8, 2)
    full = np.einsum("ei,ijab,nj->enab", g_mat, weight.astype("float64"), g_mat)
    rows = [min(e, m + 1) for e in range(2 * m + 1)]
    points = [[weights.point_index(m, e, nu) for nu in rows] for e in rows]
    np.testing.assert_allclose(stored[points, 0], full, rtol=1e-6)  # Co/VL 1


def test_numpy_transform_layout(rng):
    weight = rng.standard_normal((3, 3, 5, 11)).astype("float32")
    u = weights.transform_hwio(weight, 2, 8)
    assert u.shape == weights.transformed_shape(2, 8, 5, 11) == (16 + 9, 2, 5, 8)
    _, _, g_mat = weights.transform_matrices(2)
    want = g_mat @ weight[:, :, 3, 9].astype("float64") @ g_mat.T  # Ci 3, Co 9 = vector 1 lane 1
    np.testing.assert_allclose(u[:16, 1, 3, 1].reshape(4, 4), want, rtol=1e-6)
    # then the direct taps, exactly, in (kh, kw) order
    taps = [weights.tap_index(2, kh, kw) for kh in range(3) for kw in range(3)]
    assert taps == list(range(16, 25))
    np.testing.assert_array_equal(u[taps, 1, 3, 1], weight[:, :, 3, 9].reshape(9))
    assert not u[:, 1, :, 3:].any()  # Co 11..15: zero padding


@pytest.mark.parametrize(
    "m, lanes, co, stride",
    [(2, 8, 16, 1), (4, 8, 11, 1), (4, 16, 20, 1), (2, 8, 11, 2), (4, 16, 20, 2)],
)
def test_relay_transform_matches_numpy(m, lanes, co, stride, rng):
    weight = rng.standard_normal((3, 3, 6, co)).astype("float32")
    var = relay.var("w", shape=weight.shape, dtype="float32")
    func = relay.Function([var], weights.relay_transform(var, m, lanes, 6, co, stride))
    got = relay.create_executor("graph", mod=tvm.IRModule.from_expr(func), target="llvm")
    got = got.evaluate()(weight).numpy()
    # both in float64: equal up to the final rounding to float32 (summation order differs)
    want = weights.transform_hwio(weight, m, lanes, stride)
    assert got.shape == want.shape == weights.transformed_shape(m, lanes, 6, co)
    np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=1e-12)
    folded = relay.transform.FoldConstant()(
        tvm.IRModule.from_expr(
            weights.relay_transform(relay.const(weight), m, lanes, 6, co, stride)
        )
    )
    assert isinstance(folded["main"].body, relay.Constant)  # nothing left to run at inference


def test_layout_names_the_lanes_and_tile():
    spec = KernelSpec.conv((1, 14, 14, 16), (3, 3, 16, 20), padding=(1, 1, 1, 1))
    wino = weights.winograd_spec(spec, 4, 8)
    assert wino.weight.layout == "WINO4_8o" and wino.lanes == 8
    assert (wino.algorithm, wino.winograd_tile) == ("winograd", 4)
    assert wino.weight.shape == (6 * 6 + 9, 3, 16, 8)  # the points, then the direct taps
    assert wino.kernel_size == (3, 3) and wino.out_channels == 20 and wino.out == spec.out
    strided = KernelSpec.conv((1, 14, 14, 16), (3, 3, 16, 20), (2, 2), (1, 1, 1, 1))
    wino = weights.winograd_spec(strided, 2, 16)
    # alpha = 5 points per axis, of which the 2 odd ones share one weight row
    assert wino.weight.layout == "WINO2S2_16o" and wino.weight.shape == (4 * 4 + 9, 2, 16, 16)
    assert wino.out.shape == (1, 7, 7, 20) and wino.strides == (2, 2)


def test_refuses_a_direct_spec():
    spec = KernelSpec.conv((1, 7, 7, 16), (3, 3, 16, 16), padding=(1, 1, 1, 1))
    with pytest.raises(ValueError, match="WINO"):
        winograd.compute(
            spec, te.placeholder((1, 7, 7, 16)), te.placeholder((3, 3, 16, 16)), None, None
        )
