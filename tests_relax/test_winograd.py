"""Winograd on the Relax backend: the kernel, the weights, and the graph half's choice.

The kernel cases build ``relax.kernel.prim_func`` of a Winograd spec alone on a weight made by
``winograd_weights.transform_hwio``; the graph cases go through ``tvm_fuse.relax.build``; both at
stride 1 and 2 (the polyphase form). Both are compared with the float64 NumPy conv of ``reference``;
the error bound per tile is the Relay backend's (``tests/test_winograd.py``): max |error| <= 2e-6
(F(2x2)), 2e-5 (F(4x4)) of max |reference|. The graph cases that need a given tile fix the cost
model's answer (``force_tile``); the cost model's own choices are checked against it on the shapes
where it picks Winograd.
"""

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import tvm_fuse.relax as tfr
from helpers import module, run, tensor_var
from reference import ACTIVATIONS, assert_close, conv2d_nhwc
from tvm_fuse.errors import UserError
from tvm_fuse.relax import compat, kernel, tir_pipeline, winograd
from tvm_fuse.schedules import winograd_tiling
from tvm_fuse.schedules import winograd_weights as weights
from tvm_fuse.spec import KernelSpec

#: As ``tvm_fuse.relax.build`` compiles: with the weight prefetch the schedules ask for.
PIPELINE = tir_pipeline.NAME

#: max |error| / max |float64 reference| per m, as the Relay backend's tests assert.
ERROR_BOUND = {2: 2e-6, 4: 2e-5}
CORES = 2


def winograd_case(
    shape, co, m=2, padding=(1, 1, 1, 1), activation="relu", lanes=8, stride=1, **epilogue
):
    """A Winograd spec: NHWC ``shape`` -> ``co`` channels, 3x3 of ``stride``, F(m x m) for
    ``lanes``, ``epilogue``: ``bias`` (default True), ``residual`` (default False)."""
    bias, residual = epilogue.get("bias", True), epilogue.get("residual", False)
    spec = KernelSpec.conv(shape, (3, 3, shape[3], co), (stride, stride), padding, (1, 1))
    alpha = 0.1 if activation == "leaky_relu" else 0.0
    spec = spec.with_epilogue(bias, residual, activation=activation, alpha=alpha)
    return weights.winograd_spec(spec, m, lanes)


KERNEL_CASES = {
    "ci16_co16_map7_f2": winograd_case((1, 7, 7, 16), 16),
    "ci16_co16_map7_f4_bias_only": winograd_case((1, 7, 7, 16), 16, m=4, activation="none"),
    "ci17_co17_odd_asym_batch2_residual_f2": winograd_case(
        (2, 9, 11, 17), 17, padding=(2, 1, 0, 1), residual=True
    ),
    "ci17_co16_odd_asym_residual_f4": winograd_case(
        (1, 11, 9, 17), 16, m=4, padding=(0, 2, 1, 0), residual=True
    ),
    "ci64_co64_map14_leaky_f4": winograd_case((1, 14, 14, 64), 64, m=4, activation="leaky_relu"),
    "ci64_co64_map14_batch2_nothing_f2": winograd_case(
        (2, 14, 14, 64), 64, activation="none", bias=False
    ),
    "ci16_co32_nopad_residual_vl16_f4": winograd_case(
        (1, 10, 13, 16), 32, m=4, padding=(0, 0, 0, 0), residual=True, lanes=16
    ),
    "ci16_co17_batch2_vl16_f2": winograd_case((2, 7, 7, 16), 17, lanes=16),
    # 9 Co vectors: 3 chunks on 2 cores, the input transformed once up front (``v_root``)
    "ci16_co144_map14_vl16_f2": winograd_case((1, 14, 14, 16), 144, lanes=16),
    "s2_ci17_co17_odd_asym_batch2_residual_f2": winograd_case(
        (2, 9, 11, 17), 17, padding=(2, 1, 0, 1), residual=True, stride=2
    ),
    # 3x8 out: the second F(4x4) tile column's input ends before the 18-wide map does
    "s2_ci16_co17_nopad_residual_vl16_f4": winograd_case(
        (1, 8, 18, 16), 17, m=4, padding=(0, 0, 0, 0), residual=True, lanes=16, stride=2
    ),
    "s2_ci32_co32_map28_leaky_f4": winograd_case(
        (1, 28, 28, 32), 32, m=4, activation="leaky_relu", stride=2
    ),
    # a grid of one tile (its tile loop is a unit loop): at stride 1 and 2
    "one_tile_ci16_co17_map4_vl16_f4": winograd_case((1, 4, 4, 16), 17, m=4, lanes=16),
    "one_tile_s2_ci16_co17_nopad_residual_f4": winograd_case(
        (1, 8, 10, 16), 17, m=4, padding=(0, 0, 0, 0), residual=True, lanes=16, stride=2
    ),
}


@pytest.fixture(scope="module")
def target():
    """This CPU with a fixed core count, so that the model's choices do not depend on it."""
    config = dict(compat.host_target().export())
    config["num-cores"] = CORES
    return tvm.target.Target({k: v for k, v in config.items() if k not in ("id", "features")})


def _inputs(spec, rng):
    ci, co = spec.in_channels, spec.out_channels
    x = rng.standard_normal(spec.data.shape).astype("float32")
    w = (rng.standard_normal((3, 3, ci, co)) / np.sqrt(9 * ci)).astype("float32")
    b = rng.standard_normal(co).astype("float32")
    r = rng.standard_normal(spec.out.shape).astype("float32")
    return x, w, b, r


def _reference(spec, x, w, b, r):
    out = conv2d_nhwc(x, w, strides=spec.strides, padding=spec.padding)
    out = out + b if spec.bias is not None else out
    out = out + r if spec.residual is not None else out
    return ACTIVATIONS[spec.activation](out, spec.alpha)


def _check(got, want, m):
    error = np.abs(got - want).max() / np.abs(want).max()
    assert error <= ERROR_BOUND[m], f"F({m}x{m}): relative error {error:.3g}"


def _check_specials(got, want, m):
    """NaN and +-Inf exactly where ``want`` has them, the finite outputs as ``_check``."""
    for kind in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(kind(got), kind(want), err_msg=kind.__name__)
    finite = np.isfinite(want)
    _check(got[finite], want[finite], m)


def _run_kernel(spec, rng, target):
    x, w, b, r = _inputs(spec, rng)
    func = kernel.prim_func(spec, cores=CORES)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=PIPELINE)
    args = [x, weights.transform_hwio(w, spec.winograd_tile, spec.lanes, spec.strides[0])]
    args += [b] if spec.bias is not None else []
    args += [r] if spec.residual is not None else []
    out = tvm.runtime.empty(spec.out.shape, "float32")
    lib(*[tvm.runtime.tensor(a) for a in args], out)
    return out.numpy(), _reference(spec, x, w, b, r)


# -- the kernel ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", KERNEL_CASES.values(), ids=KERNEL_CASES.keys())
def test_kernel_matches_float64_reference(spec, rng, target):
    got, want = _run_kernel(spec, rng, target)
    _check(got, want, spec.winograd_tile)


@pytest.mark.parametrize("stride, m", [(1, 4), (2, 2)])
def test_kernel_keeps_nan_and_inf_as_the_direct_conv(stride, m, rng, target):
    """NaN and +-Inf in the input, one Inf on a zero tap: the affected tiles take the direct
    conv's values, so NaN and +-Inf come out exactly where the float64 conv has them."""
    spec = winograd_case((1, 15, 13, 16), 24, m=m, activation="none", lanes=16, stride=stride)
    x, w, b, r = _inputs(spec, rng)
    specials = {(0, 5, 6, 3): np.inf, (0, 8, 4, 0): -np.inf, (0, 10, 10, 5): np.inf}
    for spot, special in {**specials, (0, 0, 12, 7): np.nan}.items():
        x[spot] = special
    w[1, 1, 5, 2] = 0.0
    func = kernel.prim_func(spec, cores=CORES)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=PIPELINE)
    args = [x, weights.transform_hwio(w, m, spec.lanes, stride), b]
    out = tvm.runtime.empty(spec.out.shape, "float32")
    lib(*[tvm.runtime.tensor(a) for a in args], out)
    got, want = out.numpy(), _reference(spec, x, w, b, r)
    assert np.isnan(want[0, 10 // stride, 10 // stride, 2])  # Inf x 0
    _check_specials(got, want, m)


@pytest.mark.parametrize("activation", ["relu6", "sigmoid", "silu"])
def test_kernel_other_activations(activation, rng, target):
    spec = winograd_case((1, 6, 6, 8), 8, m=4, activation=activation, residual=True)
    got, want = _run_kernel(spec, rng, target)
    _check(got, want, 4)


def test_kernel_is_parallel_vectorized_and_carries_its_spec():
    spec = KERNEL_CASES["ci16_co16_map7_f2"]
    func = kernel.prim_func(spec)
    text = func.script()
    assert "T.parallel" in text and "T.vectorized" in text
    assert kernel.spec_of(func) == spec
    assert str(func.attrs["tvm_fuse.kernel"]) == winograd.NAME


@pytest.mark.parametrize(
    "name,up_front",
    [("ci16_co16_map7_f2", False), ("ci64_co64_map14_leaky_f4", False)]
    + [("ci16_co144_map14_vl16_f2", True)],
)
def test_input_transform_is_parallel_over_tiles(name, up_front):
    """In a block or up front (the plan's ``v_root``), the input transform runs under one
    parallel loop, its tiles not unrolled: only the alpha x alpha points are."""
    spec = KERNEL_CASES[name]
    assert winograd_tiling.plan_for_spec(spec, CORES).v_root == up_front
    sch = compat.Schedule(kernel.prim_func(spec, cores=CORES))
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("wino_v"))]
    kinds = [int(loop.kind) for loop in loops]
    assert kinds.count(int(tirx.ForKind.PARALLEL)) == 1
    alpha = weights.points(spec.winograd_tile, spec.strides[0])
    unrolled = [int(loop.extent) for loop in loops if int(loop.kind) == int(tirx.ForKind.UNROLLED)]
    assert unrolled == [alpha, alpha]


def test_the_input_transform_reads_the_input_in_place():
    """No padded copy of the input (``schedules.winograd``): no ``data_pad`` block is left."""
    spec = KERNEL_CASES["ci17_co16_odd_asym_residual_f4"]
    assert any(spec.padding)
    text = kernel.prim_func(spec, cores=CORES).script()
    assert "data_pad" not in text and "wino_rows" in text


# -- through build -------------------------------------------------------------------------------
@pytest.fixture
def force_tile(monkeypatch):
    """Make the cost model answer F(m x m) for every conv Winograd applies to (when the
    options allow m), so that a small case runs the tile the test asks for."""

    def force(m):
        def choose(*_args, tiles=winograd_tiling.TILES, **_kwargs):
            return m if m in tiles else 0

        monkeypatch.setattr(winograd_tiling, "choose_winograd_tile", choose)

    return force


#: The activations' Relax ops (``alpha`` of leaky_relu: the cases' 0.1).
RELAX_OPS = {
    "relu": relax.op.nn.relu,
    "leaky_relu": lambda y: relax.op.nn.leakyrelu(y, 0.1),
    "sigmoid": relax.op.sigmoid,
}


def _graph(spec, w, b, weight_is_input=False):
    """conv (NHWC/HWIO) -> [bias] -> [+ residual input] -> activation of ``spec``, as a Relax
    module whose weight is the constant ``w`` (or an input)."""
    inputs = [tensor_var("data", spec.data.shape)]
    if weight_is_input:
        inputs.append(tensor_var("weight", w.shape))
    if spec.residual is not None:
        inputs.append(tensor_var("res", spec.out.shape))

    def body(bb, data, *rest):
        weight = rest[0] if weight_is_input else relax.const(w)
        conv = relax.op.nn.conv2d(
            data,
            weight,
            strides=spec.strides,
            padding=spec.padding,
            data_layout="NHWC",
            kernel_layout="HWIO",
        )
        y = bb.emit(conv)
        if spec.bias is not None:
            y = bb.emit(relax.op.add(y, relax.const(b.reshape(1, 1, 1, -1))))
        if spec.residual is not None:
            y = bb.emit(relax.op.add(y, rest[-1]))
        return y if spec.activation == "none" else RELAX_OPS[spec.activation](y)

    return module(inputs, body)


GRAPH_CASES = {
    "ci16_co16_map7_relu_f2": winograd_case((1, 7, 7, 16), 16),
    "ci17_co17_odd_asym_batch2_residual_f2": KERNEL_CASES["ci17_co17_odd_asym_batch2_residual_f2"],
    "ci17_co16_odd_asym_residual_leaky_f4": winograd_case(
        (1, 11, 9, 17), 16, m=4, padding=(0, 2, 1, 0), residual=True, activation="leaky_relu"
    ),
    "ci64_co64_map14_sigmoid_f4": winograd_case((1, 14, 14, 64), 64, m=4, activation="sigmoid"),
    "s2_ci17_co17_odd_asym_batch2_residual_f2": KERNEL_CASES[
        "s2_ci17_co17_odd_asym_batch2_residual_f2"
    ],
}


@pytest.mark.parametrize("case", GRAPH_CASES.values(), ids=GRAPH_CASES.keys())
def test_build_matches_float64_reference(case, force_tile, rng, target):
    m = case.winograd_tile
    force_tile(m)
    x, w, b, r = _inputs(case, rng)
    mod = _graph(case, w, b)
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert (spec.algorithm, spec.winograd_tile) == ("winograd", m)
    lanes = compat.simd_lanes(target)
    assert spec.weight.layout == weights.winograd_layout(m, lanes, case.strides[0])
    inputs = [x, r] if case.residual is not None else [x]
    got = run(tfr.build(mod, target=target), *inputs)
    _check(got, _reference(case, x, w, b, r), m)


@pytest.mark.parametrize("stride, m", [(1, 4), (2, 2)])
def test_build_keeps_nan_and_inf_as_the_direct_conv(stride, m, force_tile, rng, target):
    """Through ``tfr.build``: NaN and +-Inf in the input and the residual, an Inf on a zero tap;
    the specials where the float64 conv + bias + residual has them (no activation: NumPy's
    ``maximum`` keeps a NaN that TVM's ``max`` turns into 0)."""
    force_tile(m)
    case = winograd_case((1, 15, 13, 16), 24, m=m, activation="none", stride=stride, residual=True)
    x, w, b, r = _inputs(case, rng)
    x[0, 5, 6, 3], x[0, 8, 4, 0], x[0, 10, 10, 5], x[0, 0, 12, 7] = np.inf, -np.inf, np.inf, np.nan
    r[0, 1, 2, 3], r[0, 2, 2, 4] = np.nan, -np.inf
    w[1, 1, 5, 2] = 0.0
    mod = _graph(case, w, b)
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert (spec.algorithm, spec.winograd_tile) == ("winograd", m)
    got, want = run(tfr.build(mod, target=target), x, r), _reference(case, x, w, b, r)
    assert np.isnan(want).any() and np.isposinf(want).any()
    _check_specials(got, want, m)


def test_weight_that_is_not_a_constant_runs_direct(force_tile, rng, target):
    force_tile(2)
    spec = winograd_case((1, 7, 7, 16), 16)
    x, w, b, r = _inputs(spec, rng)
    mod = _graph(spec, w, b, weight_is_input=True)
    (chosen,) = tfr.describe(tfr.optimize(mod, target=target))
    assert chosen.algorithm == "direct" and chosen.weight.layout != "HWIO"
    got = run(tfr.build(mod, target=target), x, w)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


# -- the graph half's choice ---------------------------------------------------------------------
#: Shapes on which the model picks F(4x4) by default on 8 and 16 lanes (2 cores), F(2x2) on 8
#: lanes with precision="high", and direct for the 1x1 conv between them.
MODEL_SHAPE = (1, 16, 16, 32)


def _two_convs(rng):
    """3x3 (32 -> 32) -> relu -> 1x1 (32 -> 32) -> relu -> 3x3 (32 -> 32), NHWC."""
    ws = [rng.standard_normal((k, k, 32, 32)) / np.sqrt(k * k * 32) for k in (3, 1, 3)]
    ws = [w.astype("float32") for w in ws]

    def body(bb, data):
        y = data
        for w in ws:
            pad = w.shape[0] // 2
            conv = relax.op.nn.conv2d(
                y, relax.const(w), padding=pad, data_layout="NHWC", kernel_layout="HWIO"
            )
            y = bb.emit(conv)
            y = bb.emit(relax.op.nn.relu(y))
        return y

    return module([tensor_var("data", MODEL_SHAPE)], body), ws


def _model_tile(target, tiles=winograd_tiling.TILES):
    n, h, w, c = MODEL_SHAPE
    lanes = compat.simd_lanes(target)
    return winograd_tiling.choose_winograd_tile(n, h, w, c, c, lanes, CORES, tiles=tiles)


def test_cost_models_choice_reaches_describe(rng, target):
    mod, ws = _two_convs(rng)
    specs = tfr.describe(tfr.optimize(mod, target=target))
    m = _model_tile(target)
    assert m, "the model picks Winograd for these 3x3 convs"
    assert [(s.algorithm, s.winograd_tile) for s in specs] == [
        ("winograd", m),
        ("direct", 0),
        ("winograd", m),
    ]
    x = rng.standard_normal(MODEL_SHAPE).astype("float32")
    want = x.astype("float64")
    for w in ws:
        want = np.maximum(conv2d_nhwc(want, w, padding=(w.shape[0] // 2,) * 4), 0)
    assert_close(run(tfr.build(mod, target=target), x), want, rel=ERROR_BOUND[m])


def test_algorithm_direct_is_direct_everywhere(rng, target):
    mod, _ = _two_convs(rng)
    assert any(s.algorithm == "winograd" for s in tfr.describe(tfr.optimize(mod, target=target)))
    for specs in (
        tfr.describe(tfr.optimize(mod, target=target, algorithm="direct")),
        tfr.describe(tfr.pipeline(target, algorithm="direct")(mod)),
    ):
        assert [(s.algorithm, s.winograd_tile) for s in specs] == [("direct", 0)] * 3
        assert all(s.weight.layout.startswith("OHWI") for s in specs)


def test_precision_high_never_takes_f4(rng, target):
    mod, _ = _two_convs(rng)
    default = tfr.describe(tfr.optimize(mod, target=target))
    assert 4 in [s.winograd_tile for s in default]
    high = tfr.describe(tfr.optimize(mod, target=target, precision="high"))
    m = _model_tile(target, tiles=(2,))
    assert [s.winograd_tile for s in high] == [m, 0, m]
    assert 4 not in [s.winograd_tile for s in high]


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(algorithm="winograd"), "unknown algorithm 'winograd'"),
        (dict(precision="low"), "unknown precision 'low'"),
    ],
)
def test_unknown_options_are_one_user_error(options, message, rng, target):
    mod, _ = _two_convs(rng)
    for call in (
        lambda: tfr.optimize(mod, target=target, **options),
        lambda: tfr.build(mod, target=target, **options),
        lambda: tfr.pipeline(target, **options),
    ):
        with pytest.raises(UserError, match=message):
            call()
