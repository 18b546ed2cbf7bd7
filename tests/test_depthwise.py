"""The depthwise kernel (``schedules.depthwise``) and its place in the pipeline.

Kernel cases are LLVM builds of the TE compute + schedule on a weight packed by the NumPy
reference, checked against TOPI's NumPy depthwise conv + the epilogue in float64. They cover C
4 to 144 (VL 16, 8 and 4: the widest vector that divides C), maps 7 to 56 and odd ones whose last
tile overhangs Wo (padded, and unpadded: the clamped columns), strides 1 and 2, dilation 2, a 5x5
filter, asymmetric padding, batch 2, and every epilogue kind. The graph cases build Relay
modules with ``tvm_fuse.build`` against stock TVM's build of the same module.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
import tvm
from test_kernel import host_target
from tvm import relay, te
from tvm.topi.testing import depthwise_conv2d_python_nhwc

import tvm_fuse
from tvm_fuse import testing
from tvm_fuse.schedules import depthwise, generic, packing
from tvm_fuse.spec import KernelSpec
from tvm_fuse.tuning.tasks import extract_tasks

#: max |error| / max |float64 reference|: a sum of at most 25 float32 products.
ERROR_BOUND = 1e-6


@dataclass(frozen=True)
class Case:
    channels: int
    hw: tuple = (14, 14)
    kernel: int = 3
    stride: int = 1
    dilation: int = 1
    padding: tuple = (1, 1, 1, 1)
    batch: int = 1
    activation: str = "relu6"
    bias: bool = True
    residual: bool = False
    lanes: int = 16


CASES = {
    "c32_map56_vl16": Case(32, hw=(56, 56)),
    "c144_map7_vl16_residual": Case(144, hw=(7, 7), residual=True, activation="relu"),
    "c24_vl8_stride2_odd": Case(24, hw=(13, 15), stride=2),
    "c12_vl4_batch2_asym_pad": Case(12, hw=(9, 11), batch=2, padding=(2, 0, 1, 1)),
    "c16_nopad_clamped_columns": Case(16, hw=(11, 11), padding=(0, 0, 0, 0), activation="none"),
    "c16_dilation2_leaky": Case(16, hw=(12, 10), dilation=2, padding=(2, 2, 2, 2),
                                activation="leaky_relu"),
    "c32_k5_sigmoid_nobias": Case(32, hw=(10, 10), kernel=5, padding=(2, 2, 2, 2),
                                  activation="sigmoid", bias=False),
    "c64_vl8_stride2_k3_residual": Case(64, hw=(28, 28), stride=2, residual=True, lanes=8),
}


def make_inputs(rng, case):
    data = rng.standard_normal((case.batch, *case.hw, case.channels)).astype("float32")
    weight = rng.standard_normal((case.kernel, case.kernel, 1, case.channels)).astype("float32")
    bias = rng.standard_normal(case.channels).astype("float32") if case.bias else None
    return data, weight, bias


def spec_of(case, data, weight, bias=None, residual=False):
    stride, dilation = (case.stride,) * 2, (case.dilation,) * 2
    spec = KernelSpec.conv(
        data.shape, weight.shape, stride, case.padding, dilation, groups=case.channels
    )
    return spec.with_epilogue(
        bias is not None, residual, activation=case.activation, alpha=0.1
    )


def reference(case, data, weight, bias, residual):
    """Depthwise conv (TOPI's NumPy reference) + bias + residual + activation, in float64."""
    dilated = np.zeros(
        ((case.kernel - 1) * case.dilation + 1,) * 2 + (case.channels, 1), dtype="float64"
    )
    dilated[:: case.dilation, :: case.dilation, :, 0] = weight[:, :, 0, :]
    x = depthwise_conv2d_python_nhwc(
        data.astype("float64"), dilated, (case.stride,) * 2, list(case.padding)
    )
    x = x + (0 if bias is None else bias) + (0 if residual is None else residual)
    activations = {
        "none": lambda v: v,
        "relu": lambda v: np.maximum(v, 0),
        "relu6": lambda v: np.clip(v, 0, 6),
        "leaky_relu": lambda v: np.where(v > 0, v, 0.1 * v),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    }
    return activations[case.activation](x)


def run(module, spec, tensors):
    """Build ``module``'s compute + schedule for ``spec`` on the host; its output."""
    holders = {k: te.placeholder(v.shape, name=k) for k, v in tensors.items() if v is not None}
    with host_target():
        args = (holders.get(k) for k in ("data", "weight", "bias", "residual"))
        out = module.compute(spec, *args)
        s = module.schedule([out])
    func = tvm.build(s, list(holders.values()) + [out], host_target())
    result = tvm.nd.empty([int(d) for d in out.shape], "float32")
    func(*[tvm.nd.array(tensors[k]) for k in holders], result)
    return result.numpy()


@pytest.mark.parametrize("finite_weight", [False, True], ids=["weight", "finite_weight"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_kernel_matches_float64_reference(case, finite_weight, rng):
    """Each case on the padded copy (at stride 1) and read in place (a weight the graph half
    found finite)."""
    data, weight, bias = make_inputs(rng, case)
    spec = spec_of(case, data, weight, bias, case.residual)
    spec = dataclasses.replace(spec, finite_weight=finite_weight)
    residual = rng.standard_normal(spec.out.shape).astype("float32") if case.residual else None
    lanes = packing.depthwise_lanes(case.channels, case.lanes)
    packed = packing.packed_depthwise_weight(spec, lanes)
    assert packed.layout == f"OHW{lanes}o"
    assert lanes == min(case.lanes, case.channels & -case.channels)  # the widest dividing C
    spec = dataclasses.replace(spec, weight=packed)
    tensors = {
        "data": data,
        "weight": packing.pack_depthwise_hwio(weight, lanes),
        "bias": bias,
        "residual": residual,
    }
    got = run(depthwise, spec, tensors)
    want = reference(case, data, weight, bias, residual)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= ERROR_BOUND * np.abs(want).max()


def _packed_case(rng, case):
    """(spec with its packed weight, the kernel's tensors, the float64 reference's arguments)."""
    data, weight, bias = make_inputs(rng, case)
    spec = spec_of(case, data, weight, bias)
    lanes = packing.depthwise_lanes(case.channels, case.lanes)
    spec = dataclasses.replace(spec, weight=packing.packed_depthwise_weight(spec, lanes))
    tensors = {"data": data, "weight": packing.pack_depthwise_hwio(weight, lanes), "bias": bias}
    return spec, tensors, (case, data, weight, bias, None)


@pytest.mark.parametrize("finite_weight", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
def test_kernel_reads_the_input_in_place_when_strided_or_finite(stride, finite_weight, rng):
    """A padded strided conv, or one whose weight the graph half found finite, allocates no
    padded copy (``depthwise.reads_in_place``): its taps test their bounds. At stride 1 with a
    weight not known finite the copy stays."""
    spec, tensors, _ = _packed_case(rng, Case(32, hw=(13, 9), stride=stride))
    spec = dataclasses.replace(spec, finite_weight=finite_weight)
    holders = {k: te.placeholder(v.shape, name=k) for k, v in tensors.items()}
    with host_target():
        out = depthwise.compute(spec, holders["data"], holders["weight"], holders["bias"], None)
        text = str(tvm.lower(depthwise.schedule([out]), [*holders.values(), out]))
    in_place = stride == 2 or finite_weight
    assert depthwise.reads_in_place(spec) == in_place
    assert ("data_pad" in text) != in_place, text
    assert ("isnan(weight" in text) == (in_place and not finite_weight), text  # the tap test


def _with_nan_and_inf(rng, stride, in_weight):
    """A packed case with NaN and Inf in the input, at the border (next to the padding) and
    inside, and, when ``in_weight``, in the weight's corner taps (which multiply the padding:
    0 x NaN and 0 x Inf are NaN) and its centre one; without them the spec says the weight is
    finite, as the graph half would."""
    spec, tensors, args = _packed_case(rng, Case(16, hw=(9, 9), stride=stride, activation="none"))
    data, weight = args[1], args[2]
    data[0, 0, 0, 0], data[0, 8, 8, 1], data[0, 4, 4, 2] = np.nan, np.inf, -np.inf
    if in_weight:
        weight[1, 1, 0, 3], weight[0, 0, 0, 5], weight[2, 2, 0, 6] = np.inf, np.nan, -np.inf
    tensors["data"] = data
    tensors["weight"] = packing.pack_depthwise_hwio(weight, spec.lanes)
    return dataclasses.replace(spec, finite_weight=not in_weight), tensors, args


@pytest.mark.parametrize("in_weight", [True, False], ids=["in_weight", "finite_weight"])
@pytest.mark.parametrize("stride", [1, 2])
def test_nan_and_inf_propagate_as_in_the_reference(stride, in_weight, rng):
    """The kernel gives NaN, Inf and finite values where the float64 reference does, whether
    the non-finite values are in the input only (a weight known finite: the padding's products
    are dropped) or in the weight too (they are not: TVM's simplifier folds ``0 * w`` to 0 where
    it proves a tap off the map, which an inlined pad exposes)."""
    spec, tensors, args = _with_nan_and_inf(rng, stride, in_weight)
    with np.errstate(invalid="ignore"):
        want = reference(*args)
    got = run(depthwise, spec, tensors)
    assert np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    assert np.abs(got[finite] - want[finite]).max() <= ERROR_BOUND * np.abs(want[finite]).max()


def test_generic_kernel_computes_a_depthwise_conv(rng):
    """The fallback (other targets, C not a multiple of 4), on the HWIO ``[Kh, Kw, 1, C]``
    weight."""
    case = Case(6, hw=(9, 7), stride=2, residual=True, activation="relu")
    data, weight, bias = make_inputs(rng, case)
    spec = spec_of(case, data, weight, bias, residual=True)
    residual = rng.standard_normal(spec.out.shape).astype("float32")
    tensors = {"data": data, "weight": weight, "bias": bias, "residual": residual}
    got = run(generic, spec, tensors)
    want = reference(case, data, weight, bias, residual)
    assert np.abs(got - want).max() <= ERROR_BOUND * np.abs(want).max()


def test_kernel_refuses_a_spec_it_does_not_compute():
    spec = KernelSpec.conv((1, 8, 8, 16), (3, 3, 16, 16))  # groups=1
    holders = [te.placeholder((1, 8, 8, 16)), te.placeholder((1, 3, 3, 16))]
    with pytest.raises(ValueError, match="needs a depthwise spec"):
        depthwise.compute(spec, *holders, None, None)


@pytest.mark.parametrize(
    "channels, lanes, want", [(144, 16, 16), (24, 16, 8), (12, 16, 4), (6, 16, None), (24, 8, 8)]
)
def test_depthwise_lanes_is_the_widest_vector_dividing_c(channels, lanes, want):
    assert packing.depthwise_lanes(channels, lanes) == want


@pytest.mark.parametrize("wo", [1, 3, 7, 9, 13, 14, 28, 56, 112, 75])
def test_tile_width_overhangs_least(wo):
    owb = depthwise.tile_width(wo)
    widths = range(min(depthwise.MIN_OWB, wo), min(depthwise.MAX_OWB, wo) + 1)
    assert owb in widths

    def overhang(t):
        return -(-wo // t) * t - wo

    assert overhang(owb) == min(overhang(t) for t in widths)


def test_spec_refuses_grouped_convs():
    with pytest.raises(ValueError, match="groups=2"):
        KernelSpec.conv((1, 8, 8, 16), (3, 3, 8, 16), groups=2)


# -- in the pipeline --------------------------------------------------------------------------
def mobilenet_block(channels=32, expand=96, stride=2, unbound=False):
    """NCHW: 1x1 expand conv-BN-ReLU6 -> 3x3 depthwise conv-BN-ReLU6 -> 1x1 project conv-BN,
    plus a depthwise conv with a free (unbound) weight when ``unbound``."""
    rng, params = np.random.default_rng(0), {}

    def const(name, shape, low=-0.5, high=0.5):
        params[name] = rng.uniform(low, high, shape).astype("float32")
        return relay.var(name, shape=shape)

    def conv_bn(x, name, cin, cout, kernel, stride=1, groups=1, act=True):
        w = const(f"{name}_w", (cout, cin // groups, kernel, kernel))
        x = relay.nn.conv2d(
            x, w, strides=stride, padding=kernel // 2, groups=groups, channels=cout,
            kernel_size=kernel,
        )
        stats = [const(f"{name}_{k}", (cout,), *r) for k, r in
                 (("g", (0.5, 1.5)), ("b", (-0.5, 0.5)), ("m", (-0.5, 0.5)), ("v", (0.5, 1.5)))]
        x = relay.nn.batch_norm(x, *stats)[0]
        return relay.clip(x, 0, 6) if act else x

    x = relay.var("data", shape=(1, channels, 28, 28))
    y = conv_bn(x, "expand", channels, expand, 1)
    y = conv_bn(y, "dw", expand, expand, 3, stride, groups=expand)
    y = conv_bn(y, "project", expand, channels, 1, act=False)
    free = []
    if unbound:
        free = [relay.var("dw2_w", shape=(channels, 1, 3, 3))]
        y = relay.nn.conv2d(
            y, free[0], padding=1, groups=channels, channels=channels, kernel_size=3
        )
    func = relay.Function(relay.analysis.free_vars(y), y)
    inputs = {"data": rng.standard_normal((1, channels, 28, 28)).astype("float32")}
    if unbound:
        inputs["dw2_w"] = rng.standard_normal((channels, 1, 3, 3)).astype("float32")
    return tvm.IRModule.from_expr(func), params, inputs


@pytest.mark.parametrize("stride", [1, 2])
def test_mobilenet_block_fuses_every_conv_and_matches_stock(stride):
    """Its depthwise weight, folded with its BN, is a constant the graph half marks finite."""
    mod, params, inputs = mobilenet_block(stride=stride)
    specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert [(s.ops, s.algorithm_name, s.finite_weight) for s in specs] == [
        (("conv2d", "bias", "relu6"), "direct", False),
        (("depthwise_conv2d", "bias", "relu6"), "depthwise", True),
        (("conv2d", "bias"), "direct", False),
    ]
    got = testing.run(tvm_fuse.build(mod, params), inputs)
    ref = testing.run(testing.build_stock(mod, params), inputs)
    testing.assert_close(got, ref, 1e-5)


def test_an_unbound_depthwise_weight_is_packed_in_the_graph():
    """A weight that is a model input: reshaped and packed by Relay ops at every run."""
    mod, params, inputs = mobilenet_block(unbound=True)
    specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    layouts = [(s.weight.layout[:3], s.finite_weight) for s in specs if s.depthwise]
    assert layouts == [("OHW", True), ("OHW", False)]  # the free weight's values are unknown
    got = testing.run(tvm_fuse.build(mod, params), inputs)
    ref = testing.run(testing.build_stock(mod, params), inputs)
    testing.assert_close(got, ref, 1e-5)


def test_tuning_extracts_no_task_for_a_depthwise_kernel():
    """It has no knobs: the block's two 1x1 convs are its only tasks."""
    mod, params, _ = mobilenet_block()
    tasks = extract_tasks(mod, params)
    assert [task.name for task in tasks] == ["conv2d_nhwc_fused.x86"] * 2
