"""The fused kernel against NumPy: through the Relay op (strategy + compile-time packing) and TE.

Each case is one LLVM build. Together the cases cover each of Ci/Co 3, 16, 17, 33, 64, 1000;
kernels 1/3/5/7; stride 1/2; dilation 1/2; asymmetric padding; batch 1/2/4; maps 1/7/56
(without a cross product); whether a case takes the fast path depends on the target's VL.
"""

import dataclasses
import json
import re

import numpy as np
import pytest
import tvm
from tvm import relay, te
from tvm.contrib import graph_executor
from tvm.topi.testing import conv2d_nhwc_python, dilate_python

import tvm_fuse
from tvm_fuse import lowering, strategy
from tvm_fuse.passes.pack import PackWeights
from tvm_fuse.testing import fused_conv_call
from tvm_fuse.schedules import conv2d_nhwc_fused as fast
from tvm_fuse.schedules import packing, tiling
from tvm_fuse.spec import KernelSpec

pytestmark = pytest.mark.llvm


def host_target():
    return tvm.target.Target(f"llvm -mcpu={tvm.target.codegen.llvm_get_system_cpu()} -num-cores=2")


def reference(data, weight, bias, residual, strides, padding, dilation, activation, alpha):
    """NHWC conv (HWIO weight) + bias + residual + activation, in float64 NumPy."""
    dilated = dilate_python(weight.astype("float64"), (*dilation, 1, 1))
    x = conv2d_nhwc_python(data.astype("float64"), dilated, strides, padding)
    x = x + (0 if bias is None else bias) + (0 if residual is None else residual)
    activations = {
        "none": lambda v: v,
        "relu": lambda v: np.maximum(v, 0),
        "leaky_relu": lambda v: np.where(v > 0, v, alpha * v),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    }
    return activations[activation](x)


# (batch, map, Ci, Co, kernel, stride, dilation, padding, activation, residual)
CASES = {
    "stem_ci3_k7_s2_map56": (1, 56, 3, 64, 7, 2, 1, (3, 3, 3, 3), "relu", False),
    "dil2_asym_pad_residual": (2, 7, 64, 16, 3, 1, 2, (2, 1, 0, 2), "relu", True),
    "ci17_co33_k5_batch4": (4, 7, 17, 33, 5, 1, 1, (2, 2, 2, 2), "relu", False),
    "ci1000_map1_k1": (1, 1, 1000, 16, 1, 1, 1, (0, 0, 0, 0), "none", False),
    "co1000_s2_sigmoid": (1, 7, 16, 1000, 3, 2, 1, (1, 1, 1, 1), "sigmoid", False),
    "ci33_co17_s2_dil2": (1, 9, 33, 17, 3, 2, 2, (0, 1, 2, 1), "relu", False),
    "down_k1_s2_batch2": (2, 56, 16, 64, 1, 2, 1, (0, 0, 0, 0), "leaky_relu", False),
    "co3": (1, 7, 64, 3, 3, 1, 1, (1, 1, 1, 1), "relu", False),
}


def make_inputs(rng, batch, size, ci, co, kernel, with_residual, out_shape):
    data = rng.standard_normal((batch, size, size, ci)).astype("float32")
    weight = rng.standard_normal((kernel, kernel, ci, co)).astype("float32")
    bias = rng.standard_normal(co).astype("float32")
    residual = rng.standard_normal(out_shape).astype("float32") if with_residual else None
    return data, weight, bias, residual


def build_fused(data, weight, bias, residual, conv, activation, alpha):
    x = relay.var("x", shape=data.shape)
    r = None if residual is None else relay.var("r", shape=residual.shape)
    call = fused_conv_call(
        x, relay.const(weight), relay.const(bias), r, activation=activation, alpha=alpha, **conv
    )
    params = [x] if r is None else [x, r]
    mod = PackWeights(host_target())(tvm.IRModule.from_expr(relay.Function(params, call)))
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=host_target()), mod


def run(lib, data, residual):
    module = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    module.set_input("x", data)
    if residual is not None:
        module.set_input("r", residual)
    module.run()
    return module.get_output(0).numpy()


def fast_path_expected(mod):
    call = relay.transform.InferType()(mod)["main"].body
    spec = tvm_fuse.op.spec_of_call(call)
    return strategy.fast_path_refusal(spec, host_target()) is None


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_relay_op_matches_numpy(case, rng):
    batch, size, ci, co, kernel, stride, dil, padding, activation, with_residual = case
    out_shape = KernelSpec.conv(
        (batch, size, size, ci), (kernel, kernel, ci, co), (stride,) * 2, padding, (dil,) * 2
    ).out.shape
    data, weight, bias, residual = make_inputs(
        rng, batch, size, ci, co, kernel, with_residual, out_shape
    )
    conv = dict(strides=(stride, stride), padding=padding, dilation=(dil, dil))
    alpha = 0.1 if activation == "leaky_relu" else 0.0
    lib, mod = build_fused(data, weight, bias, residual, conv, activation, alpha)
    got = run(lib, data, residual)
    want = reference(
        data, weight, bias, residual, conv["strides"], padding, conv["dilation"], activation, alpha
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # The fast path packs the weight at compile time: a 5-D constant and no transform at run time.
    weight_ranks = sorted(len(p.shape) for p in lib.get_params().values())
    graph_ops = [node["name"] for node in json.loads(lib.get_graph_json())["nodes"]]
    assert not any("layout_transform" in name for name in graph_ops)
    assert (weight_ranks[-1] == 5) == fast_path_expected(mod)


# -- the TE compute and schedule directly ---------------------------------------------------------
TE_CASES = {
    "asym_pad": (1, 12, 16, 32, 3, 1, 1, (1, 0, 2, 1)),  # Wo 11: AVX2 takes flat tiles
    "asym_pad_w12": (1, 13, 16, 32, 3, 1, 1, (1, 0, 2, 1)),  # Wo 12: tiles along Wo on any ISA
    "s2_dil2": (2, 15, 8, 16, 3, 2, 2, (2, 2, 1, 1)),
    "map7_flat_co20": (2, 7, 24, 20, 3, 1, 1, (1, 1, 1, 1)),  # Ho*Wo tiles, Co padded in-kernel
    "rows_w24": (1, 24, 8, 16, 3, 1, 1, (1, 1, 1, 1)),  # tiles of 6 divide Wo: tiles along Wo
    "rows_co32_w12": (1, 12, 8, 32, 3, 1, 1, (1, 1, 1, 1)),  # AVX2: 3 px x 4 vectors, vector outer
    # no padding: the Wo tile's overhang (AVX2: 3 px tiles on Wo=56) reads a clamped column
    "valid_1x1_w56": (1, 56, 8, 32, 1, 1, 1, (0, 0, 0, 0)),
    "valid_1x1_s2": (1, 111, 8, 32, 1, 2, 1, (0, 0, 0, 0)),
    "valid_3x3_w56": (1, 58, 8, 32, 3, 1, 1, (0, 0, 0, 0)),
    # input pixels 4 KiB apart (one L1 set): tiles narrowed by ``tiling.fits_l1_sets``
    "l1_set_1x1_c1024": (1, 14, 1024, 32, 1, 1, 1, (0, 0, 0, 0)),
    "l1_set_1x1_c512_s2": (1, 28, 512, 32, 1, 2, 1, (0, 0, 0, 0)),
}


def te_spec(batch, size, ci, co, kernel, stride, dil, padding, lanes) -> KernelSpec:
    """The spec of a ``TE_CASES`` entry with bias + ReLU, its weight packed for ``lanes``."""
    spec = KernelSpec.conv(
        (batch, size, size, ci), (kernel, kernel, ci, co), (stride, stride), padding, (dil, dil)
    ).with_epilogue(bias=True, activation="relu")
    return dataclasses.replace(spec, weight=packing.packed_weight(spec, lanes))


def te_kernel(*case, target=None):
    """(schedule, args) of the fast kernel of a ``TE_CASES`` entry with bias + ReLU, in
    ``target``'s scope (default: the host's)."""
    target = target or host_target()
    with target:
        lanes = strategy.simd_lanes(target)
        spec = te_spec(*case, lanes)
        data = te.placeholder(spec.data.shape, name="data")
        weight = te.placeholder(spec.weight.shape, name="weight")
        bias = te.placeholder((spec.out_channels,), name="bias")
        out = fast.compute(spec, data, weight, bias, None)
        return fast.schedule([out]), [data, weight, bias, out], lanes


@pytest.mark.parametrize("case", TE_CASES.values(), ids=TE_CASES.keys())
def test_te_kernel_matches_numpy(case, rng):
    check_te_kernel(case, rng)


def check_te_kernel(case, rng, target=None):
    """The kernel of a ``TE_CASES`` entry, built for ``target`` (default: the host), against
    the NumPy reference; its parallel loops."""
    batch, size, ci, co, kernel, stride, dil, padding = case
    target = target or host_target()
    with lowering.lowering_context():  # as tvm_fuse builds it: with the weight prefetch
        s, args, lanes = te_kernel(*case, target=target)
        func = tvm.build(s, args, target)
    data, weight, bias, _ = make_inputs(rng, batch, size, ci, co, kernel, False, None)
    out = tvm.nd.empty([int(d) for d in args[-1].shape], "float32")
    func(
        tvm.nd.array(data), tvm.nd.array(packing.pack_hwio(weight, lanes)), tvm.nd.array(bias), out
    )
    want = reference(data, weight, bias, None, (stride,) * 2, padding, (dil,) * 2, "relu", 0.0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    return re.findall(r"for (\w+) in T\.parallel", str(tvm.lower(s, args)))


@pytest.mark.parametrize("case, flat", [("rows_w24", False), ("map7_flat_co20", True)])
def test_lowered_fast_kernel_is_parallel_and_vectorized(case, flat):
    s, args, lanes = te_kernel(*TE_CASES[case])
    text = str(tvm.lower(s, args))
    assert "T.parallel" in text
    assert f"float32x{lanes}" in text  # the accumulators and the FMAs are VL-wide vectors
    assert "T.Broadcast" in text  # one input value broadcast to every lane
    assert ('"local"' in text) == flat  # the flat tile's accumulators: a local cache of the conv


@pytest.mark.parametrize(
    "case, loop",
    [
        ("rows_w24", "n_h_fused_c_outer"),  # 8x16 3x3 weights: less than the 24x24x8 input
        ("rows_co32_w12", "c_outer_outer_n_fused_h"),  # 8x32 3x3 weights: over the 12x12x8 input
        ("map7_flat_co20", "cv_outer_b_fused_p_outer"),
    ],
)
def test_the_parallel_loop_takes_rows_first_unless_the_weight_outweighs_the_input(
    case, loop, monkeypatch
):
    """The cores split the map by rows (then Co blocks), as the kernels around this one do;
    where the weight is larger than the input, by Co blocks first (each core streams its half
    of the weight once): ``tiling.co_blocks_outside_rows``. These weights are a few KB: a 1 KB
    L2 makes them too large to keep whole, as ResNet's are."""
    monkeypatch.setattr(tiling, "host_l2_bytes", lambda: 1024)
    s, args, _ = te_kernel(*TE_CASES[case])
    loops = re.findall(r"for (\w+) in T\.parallel", str(tvm.lower(s, args)))
    assert any(name.startswith(loop) for name in loops), loops


@pytest.mark.parametrize("case", ["rows_w24", "rows_co32_w12", "map7_flat_co20"])
@pytest.mark.parametrize("co_outer", [False, True])
def test_both_parallel_orders_compute_the_conv(case, co_outer, rng, monkeypatch):
    monkeypatch.setattr(tiling, "co_blocks_outside_rows", lambda spec: co_outer)
    loops = check_te_kernel(TE_CASES[case], rng)
    rows_first = "n_h" if case.startswith("rows") else "b_p"
    assert any(name.startswith("c" if co_outer else rows_first) for name in loops), loops


#: Kernels with several groups of Co blocks, so a next slice to prefetch once their parallel
#: loop takes Co blocks first (``tiling.prefetches_next_group``): tiles along Wo on a wide map and
#: a narrow one, flat tiles.
PREFETCH_CASES = {
    "rows_w40": (1, 40, 8, 128, 3, 1, 1, (1, 1, 1, 1)),
    "rows_co_first_w12": (1, 12, 8, 128, 3, 1, 1, (1, 1, 1, 1)),
    "map7_flat_1x1": (2, 7, 24, 128, 1, 1, 1, (0, 0, 0, 0)),
}


#: The host's ISA, and AVX2 code (8 lanes, 16 registers: other tiles), which every machine here
#: runs.
ISAS = {"host": None, "avx2": tvm.target.Target("llvm -mcpu=znver3 -num-cores=2")}


@pytest.mark.parametrize("isa", ISAS.values(), ids=ISAS.keys())
@pytest.mark.parametrize("case", PREFETCH_CASES.values(), ids=PREFETCH_CASES.keys())
def test_each_weight_vector_of_the_next_co_blocks_is_prefetched_once(case, isa, monkeypatch):
    """With Co blocks first, the parallel loop's next iteration reads the same ocb Co blocks for
    its next row, or the next ocb: each weight vector of a Ci step is prefetched ocb Co blocks
    ahead, ocb x Kh x Kw x Ci x VL elements, in one of the passes over the slice
    (``lowering``)."""
    monkeypatch.setattr(tiling, "co_blocks_outside_rows", lambda spec: True)
    _, _, ci, _, kernel, *_ = case
    with lowering.lowering_context():
        s, args, lanes = te_kernel(*case, target=isa)
        text = str(tvm.lower(s, args))
    ahead = re.findall(r"T\.prefetch\(T\.address_of\(weight\w*\[(.*?)\]\), 0, 2, 1\)", text)
    block = kernel * kernel * ci * lanes  # one Co block's weight
    ocb = len(ahead)  # one prefetch per weight vector of the step
    offsets = sorted(int(index.rpartition(" + ")[2]) for index in ahead)
    assert ocb >= 1 and offsets == [ocb * block + j * block for j in range(ocb)], text


@pytest.mark.parametrize("isa", ISAS.values(), ids=ISAS.keys())
@pytest.mark.parametrize("case", PREFETCH_CASES.values(), ids=PREFETCH_CASES.keys())
def test_no_prefetch_where_the_parallel_loop_takes_rows_first(case, isa, monkeypatch):
    """Rows first: each iteration reads the next group, every group once per row, the whole
    weight in cache; a prefetch would only cost (``tiling.prefetches_next_group``)."""
    monkeypatch.setattr(tiling, "co_blocks_outside_rows", lambda spec: False)
    with lowering.lowering_context():
        s, args, _ = te_kernel(*case, target=isa)
        text = str(tvm.lower(s, args))
    assert "T.parallel" in text and "T.prefetch" not in text, text


@pytest.mark.parametrize("isa", ISAS.values(), ids=ISAS.keys())
@pytest.mark.parametrize("case", PREFETCH_CASES.values(), ids=PREFETCH_CASES.keys())
@pytest.mark.parametrize("co_outer", [False, True])
def test_the_prefetching_kernels_compute_the_conv(case, isa, co_outer, rng, monkeypatch):
    monkeypatch.setattr(tiling, "co_blocks_outside_rows", lambda spec: co_outer)
    check_te_kernel(case, rng, isa)


def test_no_prefetch_where_two_weight_slices_overflow_l2(monkeypatch):
    """``tiling.prefetches_next_slice``: the prefetched slice would push out the one in use."""
    monkeypatch.setattr(tiling, "host_l2_bytes", lambda: 1024)
    with lowering.lowering_context():
        s, args, _ = te_kernel(*TE_CASES["rows_co32_w12"])
        assert "T.prefetch" not in str(tvm.lower(s, args))


@pytest.mark.parametrize("case", ["rows_w24", "map7_flat_co20"])
def test_a_padded_conv_pads_its_input_up_front_by_rows(case):
    """One parallel pass pads the whole input (i0_i1: N, H) before the conv's parallel loop."""
    s, args, _ = te_kernel(*TE_CASES[case])
    loops = re.findall(r"for (\w+) in T\.parallel", str(tvm.lower(s, args)))
    assert len(loops) >= 2 and loops[0] == "i0_i1_fused", loops


@pytest.mark.parametrize("isa", ISAS.values(), ids=ISAS.keys())
@pytest.mark.parametrize("case", ["rows_w24", "rows_co32_w12", "asym_pad_w12"])
def test_a_large_input_is_padded_row_by_row_inside_the_parallel_loop(case, isa, rng, monkeypatch):
    """Above ``tiling.PAD_UP_FRONT_MAX_BYTES`` (here: any input) a tiling along Wo pads no whole
    input; the rows are padded where the conv's parallel loop reads them, with the same result."""
    monkeypatch.setattr(tiling, "PAD_UP_FRONT_MAX_BYTES", 0)
    loops = check_te_kernel(TE_CASES[case], rng, isa)
    assert "i0_i1_fused" not in loops and len(loops) == 1, loops


@pytest.mark.parametrize("isa", ISAS.values(), ids=ISAS.keys())
@pytest.mark.parametrize("case", ["map7_flat_co20", "asym_pad"])
def test_above_the_limit_only_a_flat_tiling_pads_its_whole_input(case, isa, rng, monkeypatch):
    """Flat tiles span rows, so no parallel iteration owns whole input rows to pad
    (``tiling.pads_by_rows``): a flat tiling pads its whole input up front at any size.
    ``asym_pad`` (Wo 11) is flat with AVX2's 3 px tiles, along Wo with AVX-512's 11 px."""
    monkeypatch.setattr(tiling, "PAD_UP_FRONT_MAX_BYTES", 0)
    loops = check_te_kernel(TE_CASES[case], rng, isa)
    tiles = tiling.tiles_for(te_spec(*TE_CASES[case], strategy.simd_lanes(isa or host_target())))
    assert (loops[0] == "i0_i1_fused") == tiles.flat, loops


@pytest.mark.parametrize("case", ["valid_1x1_w56", "valid_1x1_s2", "valid_3x3_w56"])
def test_unpadded_conv_reads_its_input_in_place(case):
    """A conv without padding copies no input rows, even where its Wo tile overhangs Wo."""
    s, args, _ = te_kernel(*TE_CASES[case])
    assert "data_pad" not in str(tvm.lower(s, args))


def test_pack_hwio_matches_layout_transform(rng):
    weight = rng.standard_normal((3, 3, 5, 16)).astype("float32")
    packed = packing.pack_hwio(weight, 8)
    assert packed.shape == (2, 3, 3, 5, 8)
    np.testing.assert_array_equal(packed[1, 2, 0, 4, 3], weight[2, 0, 4, 8 + 3])
    padded = packing.pack_hwio(weight, 6)  # Co=16 -> 3 vectors of 6, the last 2 channels zero
    assert padded.shape == (3, 3, 3, 5, 6)
    np.testing.assert_array_equal(padded[2, ..., :4], weight[..., 12:])
    assert not padded[2, ..., 4:].any()
