"""Tests of tvm_fuse.bn_fold.fold_bn (NumPy) and the FoldBatchNorm pass (structure, refusal reasons
as explain prints them, numerics)."""

import collections

import numpy as np
import pytest
import tvm
import tvm.topi.testing
from tvm import relay
from tvm.contrib import graph_executor

from tvm_fuse import explain
from tvm_fuse.bn_fold import fold_bn
from tvm_fuse.ir_utils import count_ops, use_counts
from tvm_fuse.passes import fold_bn as fold_bn_pass
from tvm_fuse.passes.fold_bn import FoldBatchNorm, fold_refusal

C = 8  # channels in and out
BN_NAMES = ("gamma", "beta", "mean", "var")


def _bn_params(rng, channels=C, dtype="float32"):
    # Small variances, so that the epsilon matters at the tolerance used here.
    return {
        "gamma": rng.uniform(0.5, 2.0, channels).astype(dtype),
        "beta": rng.uniform(-1.0, 1.0, channels).astype(dtype),
        "mean": rng.uniform(-1.0, 1.0, channels).astype(dtype),
        "var": rng.uniform(1e-3, 1.0, channels).astype(dtype),
    }


def _bn_numpy(y, p, eps, axis, scale=True, center=True):
    shape = [1] * y.ndim
    shape[axis] = -1
    gamma = p["gamma"].reshape(shape) if scale else 1.0
    beta = p["beta"].reshape(shape) if center else 0.0
    return (y - p["mean"].reshape(shape)) / np.sqrt(p["var"].reshape(shape) + eps) * gamma + beta


def _assert_close(out, ref, rtol=1e-5):
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= rtol * np.abs(ref).max()


# ---------------------------------------------------------------------------- fold_bn (NumPy)


@pytest.mark.parametrize("groups", [1, 2, C])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("scale,center", [(True, True), (False, True), (True, False)])
def test_fold_bn_matches_conv_then_bn_nchw(rng, groups, with_bias, scale, center):
    x = rng.standard_normal((1, C, 10, 10)).astype("float32")
    w = rng.standard_normal((C, C // groups, 3, 3)).astype("float32")
    b = rng.standard_normal(C).astype("float32") if with_bias else None
    p, eps = _bn_params(rng), 1e-3
    conv = tvm.topi.testing.conv2d_nchw_python(x, w, 1, 1, groups=groups)
    ref = _bn_numpy(conv + (0 if b is None else b.reshape(-1, 1, 1)), p, eps, 1, scale, center)
    gamma, beta = (p["gamma"] if scale else None), (p["beta"] if center else None)
    new_w, new_b = fold_bn(w, b, gamma, beta, p["mean"], p["var"], eps, out_axis=0)
    out = tvm.topi.testing.conv2d_nchw_python(x, new_w, 1, 1, groups=groups)
    _assert_close(out + new_b.reshape(-1, 1, 1), ref)


@pytest.mark.parametrize("groups", [1, 2])
def test_fold_bn_matches_conv_then_bn_hwio(rng, groups):
    x = rng.standard_normal((1, 10, 10, C)).astype("float32")
    w = rng.standard_normal((3, 3, C // groups, C)).astype("float32")
    b = rng.standard_normal(C).astype("float32")
    p, eps = _bn_params(rng), 1e-5
    ref = _bn_numpy(tvm.topi.testing.conv2d_nhwc_python(x, w, 1, 1, groups) + b, p, eps, 3)
    new_w, new_b = fold_bn(w, b, eps=eps, out_axis=3, **p)
    _assert_close(tvm.topi.testing.conv2d_nhwc_python(x, new_w, 1, 1, groups) + new_b, ref)


def test_fold_bn_keeps_weight_dtype_and_inputs(rng):
    w = rng.standard_normal((C, C, 3, 3)).astype("float16")
    w_copy = w.copy()
    new_w, new_b = fold_bn(w, None, eps=1e-5, out_axis=0, **_bn_params(rng, dtype="float16"))
    assert new_w.dtype == np.float16 and new_b.dtype == np.float16
    assert new_w.shape == w.shape and new_b.shape == (C,)
    np.testing.assert_array_equal(w, w_copy)


def test_fold_bn_rejects_bad_shapes_and_variance(rng):
    p = _bn_params(rng)
    w = np.ones((C, C, 3, 3), "float32")
    with pytest.raises(ValueError, match=r"weight of shape \(8, 8, 3, 3\) has no axis 2 of size 8"):
        fold_bn(w, None, eps=1e-5, out_axis=2, **p)
    with pytest.raises(ValueError, match=r"bias has shape \(4,\), expected \(8,\)"):
        fold_bn(w, np.ones(4), eps=1e-5, out_axis=0, **p)
    with pytest.raises(ValueError, match="var \\+ eps must be positive"):
        fold_bn(w, None, eps=0.0, out_axis=0, **{**p, "var": np.zeros(C, "float32")})


# ---------------------------------------------------------------------------- ir_utils helpers


def test_count_ops_and_use_counts():
    x = relay.var("x", shape=(1, C))
    y = relay.nn.relu(x)
    body = relay.Tuple([relay.add(y, y), relay.multiply(y, relay.const(2.0))])
    mod = tvm.IRModule.from_expr(relay.Function([x], body))
    mod["other"] = relay.Function([x], relay.nn.relu(x))
    assert count_ops(mod) == {"nn.relu": 2, "add": 1, "multiply": 1}
    counts = use_counts(body)
    assert counts[y] == 3 and counts[x] == 1 and counts[body] == 0


# ---------------------------------------------------------------------------- graph builders


def _const(value):
    return value if isinstance(value, relay.Expr) else relay.const(value)


def _case(
    rng, layout="NCHW", kernel_layout="OIHW", groups=1, bias=None, dtype="float32", size=10, **bn
):
    """Arrays of one conv -> [bias] -> BN case; ``bias`` is None, "bias_add" or an add shape."""
    dims = {"O": C, "I": C // groups, "H": 3, "W": 3}
    data_shape = (1, C, size, size) if layout == "NCHW" else (1, size, size, C)
    bias_shape = (C,) if bias == "bias_add" else bias
    return {
        "x": rng.standard_normal(data_shape).astype(dtype),
        "w": rng.standard_normal([dims[a] for a in kernel_layout]).astype(dtype),
        "b": None if bias is None else rng.standard_normal(bias_shape).astype(dtype),
        "bias_op": "bias_add" if bias == "bias_add" else "add",
        "p": _bn_params(rng, dtype=dtype),
        "conv": {"data_layout": layout, "kernel_layout": kernel_layout, "groups": groups},
        "bn": {"axis": layout.index("C"), "epsilon": 1e-5, "scale": True, "center": True, **bn},
        "axis": layout.index("C"),
    }


def _conv(data, weight, case):
    return relay.nn.conv2d(
        data, _const(weight), padding=(1, 1), channels=C, kernel_size=3, **case["conv"]
    )


def _data(case):
    return relay.var("x", shape=case["x"].shape, dtype=str(case["x"].dtype))


def _before(case, data=None, const_first=False):
    """(output, conv, bn input) of ``conv2d -> [bias] -> batch_norm -> [0]``."""
    conv = pre = _conv(_data(case) if data is None else data, case["w"], case)
    if case["b"] is not None and case["bias_op"] == "bias_add":
        pre = relay.nn.bias_add(conv, _const(case["b"]), axis=case["axis"])
    elif case["b"] is not None:
        pre = relay.add(*([_const(case["b"]), conv] if const_first else [conv, _const(case["b"])]))
    bn = relay.nn.batch_norm(pre, *[_const(case["p"][n]) for n in BN_NAMES], **case["bn"])
    return bn[0], conv, pre


def _expected(case, data=None):
    data = _data(case) if data is None else data
    p, bn = case["p"], case["bn"]
    bias = None if case["b"] is None else np.broadcast_to(case["b"].reshape(-1), (C,))
    gamma, beta = (p["gamma"] if bn["scale"] else None), (p["beta"] if bn["center"] else None)
    out_axis = case["conv"]["kernel_layout"].index("O")
    new_w, new_b = fold_bn(
        case["w"], bias, gamma, beta, p["mean"], p["var"], bn["epsilon"], out_axis
    )
    return relay.nn.bias_add(_conv(data, new_w, case), relay.const(new_b), axis=case["axis"])


def _module(out):
    return relay.transform.InferType()(tvm.IRModule.from_expr(out))


def _assert_folded(mod):
    ops = count_ops(mod)
    assert not {"nn.batch_norm", "multiply", "sqrt", "divide", "add"} & set(ops), ops
    assert ops["nn.conv2d"] == ops["nn.bias_add"] >= 1


# ---------------------------------------------------------------------------- structural tests

FOLDED_CASES = {
    "conv_bn": {},
    "bias_add": {"bias": "bias_add"},
    "add_c11": {"bias": (C, 1, 1)},
    "add_1c11": {"bias": (1, C, 1, 1)},
    "add_scalar": {"bias": ()},
    "nhwc_add_c": {"layout": "NHWC", "kernel_layout": "HWIO", "bias": (C,)},
    "nhwc_add_111c": {"layout": "NHWC", "kernel_layout": "HWIO", "bias": (1, 1, 1, C)},
    "nhwc_ohwi": {"layout": "NHWC", "kernel_layout": "OHWI", "bias": "bias_add"},
    "scale_false": {"scale": False},
    "center_false": {"center": False, "bias": "bias_add"},
    "eps_1e-3": {"epsilon": 1e-3},
    "nhwc_bn_axis_-1": {"layout": "NHWC", "kernel_layout": "HWIO", "axis": -1, "bias": "bias_add"},
    "groups2": {"groups": 2, "bias": "bias_add"},
    "depthwise": {"groups": C},
    "depthwise_hwoi": {"layout": "NHWC", "kernel_layout": "HWOI", "groups": C},
    "float16": {"dtype": "float16"},
}


@pytest.mark.parametrize("name", FOLDED_CASES)
def test_structure_folded(rng, name):
    case = _case(rng, **FOLDED_CASES[name])
    after = FoldBatchNorm()(_module(_before(case)[0]))
    tvm.ir.assert_structural_equal(after, _module(_expected(case)))
    _assert_folded(after)


def test_add_with_the_constant_first(rng):
    case = _case(rng, bias=(1, C, 1, 1))
    after = FoldBatchNorm()(_module(_before(case, const_first=True)[0]))
    tvm.ir.assert_structural_equal(after, _module(_expected(case)))


def test_pass_name_and_every_function_rewritten(rng):
    case = _case(rng, bias="bias_add")
    mod = tvm.IRModule.from_expr(_before(case)[0])
    x = relay.var("x", shape=case["x"].shape)
    mod["second"] = relay.Function([x], _before(case, data=x)[0])
    assert FoldBatchNorm().info.name == "tvm_fuse.FoldBatchNorm"
    after = FoldBatchNorm()(mod)
    _assert_folded(after)
    tvm.ir.assert_structural_equal(after["second"], _module(_expected(case))["main"])


def test_scale_false_ignores_non_constant_gamma(rng):
    case = _case(rng, scale=False)
    case["p"]["gamma"] = relay.var("gamma", shape=(C,))
    after = FoldBatchNorm()(_module(_before(case)[0]))
    _assert_folded(after)


@pytest.mark.parametrize("outer_refusal", ["second_consumer", "mean_used"])
def test_chain_of_two_folds_inner_when_outer_refuses(rng, outer_refusal):
    """Only the inner chain folds; the refused outer match keeps its rewritten input."""
    inner, outer = _case(rng, bias="bias_add"), _case(rng)

    def graph(first):
        out, conv, _ = _before(outer, data=relay.nn.relu(first))
        used = (
            conv if outer_refusal == "second_consumer" else relay.TupleGetItem(out.tuple_value, 1)
        )
        return relay.Tuple([out, used])

    after = FoldBatchNorm()(_module(graph(_before(inner)[0])))
    tvm.ir.assert_structural_equal(after, _module(graph(_expected(inner))))


def test_own_use_count_guard_refuses(rng, monkeypatch):
    """TVM's PatternGrouper already drops matches whose inner nodes have outside consumers; the
    pass's own use-count guard refuses too (here every node is made to look used twice)."""
    monkeypatch.setattr(fold_bn_pass, "use_counts", lambda _: collections.defaultdict(lambda: 2))
    before = _module(_before(_case(rng, bias="bias_add"))[0])
    tvm.ir.assert_structural_equal(FoldBatchNorm()(before), before)


def _unchanged_second_conv_consumer(case):
    out, conv, _ = _before(case)
    return relay.Tuple([out, relay.nn.relu(conv)])


def _unchanged_second_bias_consumer(case):
    out, _, pre = _before(case)
    return relay.Tuple([out, pre])


def _unchanged_bn_mean_used(case):
    out, _, _ = _before(case)
    return relay.Tuple([out, relay.TupleGetItem(out.tuple_value, 1)])


def _with(**changes):
    """A builder setting ``case[key] = value`` first; key "p__gamma" means case["p"]["gamma"]."""

    def make(case):
        for key, value in changes.items():
            outer, _, inner = key.rpartition("__")
            (case[outer] if outer else case)[inner] = value
        return _before(case)[0]

    return make


def _depthwise_multiplier_hwoi(case):
    """HWOI depthwise weights [3, 3, Ci, M]: 'O' holds Ci, not the Ci*M outputs."""
    x = relay.var("x", shape=(1, 10, 10, 4))
    w = np.random.default_rng(3).standard_normal((3, 3, 4, 2)).astype("float32")
    layouts = {"data_layout": "NHWC", "kernel_layout": "HWOI"}
    conv = relay.nn.conv2d(x, _const(w), padding=1, groups=4, channels=C, kernel_size=3, **layouts)
    return relay.nn.batch_norm(conv, *[_const(case["p"][n]) for n in BN_NAMES], axis=3)[0]


def _packed_nchw4c(case):
    x = relay.var("x", shape=(1, C // 4, 10, 10, 4))
    w = np.random.default_rng(3).standard_normal((C // 4, C // 4, 3, 3, 4, 4)).astype("float32")
    layouts = {"data_layout": "NCHW4c", "kernel_layout": "OIHW4i4o"}
    conv = relay.nn.conv2d(x, _const(w), padding=(1, 1), **layouts)
    stats = [_const(case["p"][n][: C // 4]) for n in BN_NAMES]
    return relay.nn.batch_norm(conv, *stats, axis=1)[0]


INT_PARAMS = {n: np.ones(C, "int32") for n in BN_NAMES}


UNCHANGED_CASES = {
    "conv_second_consumer": ({}, _unchanged_second_conv_consumer),
    "bias_second_consumer": ({"bias": "bias_add"}, _unchanged_second_bias_consumer),
    "add_second_consumer": ({"bias": (C, 1, 1)}, _unchanged_second_bias_consumer),
    "bn_mean_used": ({}, _unchanged_bn_mean_used),
    "constant_var_plus_eps_zero": ({"epsilon": 0.0}, _with(p__var=np.zeros(C, "float32"))),
    "add_spatial_var": ({"bias": (1, 1, 10, 10)}, _with(b=relay.var("b", shape=(1, 1, 10, 10)))),
    "bias_add_on_h": ({"bias": "bias_add", "size": C}, _with(axis=2)),
    "add_spatial": ({"bias": (1, 1, 10, 10)}, None),
    "add_nchw_vector_along_w": ({"bias": (10,)}, None),
    "bn_axis_not_channels": ({"size": C, "axis": 2}, None),
    "int8": ({"dtype": "int8"}, _with(conv__out_dtype="int32", p=INT_PARAMS)),
    "float16_out_float32": (
        {"dtype": "float16"},
        _with(conv__out_dtype="float32", p=_bn_params(np.random.default_rng(1))),
    ),
    "depthwise_multiplier_hwoi": ({}, _depthwise_multiplier_hwoi),
    "packed_nchw4c": ({}, _packed_nchw4c),
}

_CONSUMERS = (
    "output feeds 2 ops, so folding the BatchNorm into the conv would change what the others read"
)
_ADD_SHAPE = "its add's operand of shape {} is not one value per output channel"
_DTYPES = "dtypes {} data, {} weight, {} output: only a conv of one float type throughout folds"

#: The sentence each refusal of UNCHANGED_CASES gives (``fold_refusal``, printed by explain).
REFUSALS = {
    "conv_second_consumer": f"several consumers: the conv2d {_CONSUMERS}",
    "bias_second_consumer": f"several consumers: the nn.bias_add {_CONSUMERS}",
    "add_second_consumer": f"several consumers: the add {_CONSUMERS}",
    "bn_mean_used": (
        "its output tuple has 2 readers, not output 0 alone (e.g. its mean/variance outputs are "
        "used, as in training mode): the fold keeps output 0 only"
    ),
    "constant_var_plus_eps_zero": (
        "var + epsilon <= 0 in some channel: the BatchNorm divides by zero or takes sqrt < 0"
    ),
    "add_spatial_var": _ADD_SHAPE.format([1, 1, 10, 10]),
    "bias_add_on_h": "its bias_add's axis 2 is not the conv's output channel axis 1",
    "add_spatial": _ADD_SHAPE.format([1, 1, 10, 10]),
    "add_nchw_vector_along_w": _ADD_SHAPE.format([10]),
    "bn_axis_not_channels": "its axis 2 is not the conv's output channel axis 1 (NCHW)",
    "int8": _DTYPES.format("int8", "int8", "int32"),
    "float16_out_float32": _DTYPES.format("float16", "float16", "float32"),
    "depthwise_multiplier_hwoi": (
        "the weight's 'O' axis (HWOI) holds 4, not the 8 output channels (e.g. a depthwise conv "
        "with a channel multiplier)"
    ),
    "packed_nchw4c": (
        "layouts NCHW4c/OIHW4i4o/NCHW4c (data/kernel/output): only plain 4-D layouts fold"
    ),
}


def _build(kwargs_and_builder, rng):
    """(case, original module) of a case table entry."""
    kwargs, build = kwargs_and_builder
    case = _case(rng, **kwargs)
    return case, _module((build or (lambda c: _before(c)[0]))(case))


@pytest.mark.parametrize("name", UNCHANGED_CASES)
def test_structure_unchanged(rng, name):
    _, before = _build(UNCHANGED_CASES[name], rng)
    after = FoldBatchNorm()(before)
    tvm.ir.assert_structural_equal(after, before)
    assert count_ops(after)["nn.batch_norm"] == 1


# ---------------------------------------------------------------------------- refusal reasons


def _batch_norm(mod):
    """The one ``nn.batch_norm`` call of ``mod``'s main function."""
    found = []
    bn_op = relay.op.get("nn.batch_norm")
    relay.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e) if isinstance(e, relay.Call) and e.op == bn_op else 0
    )
    (bn,) = found
    return bn


@pytest.mark.parametrize("name", UNCHANGED_CASES)
def test_each_refusal_is_the_reason_explain_prints(rng, name):
    """FoldBatchNorm refuses with its sentence, and ``tvm-fuse explain`` prints exactly that for
    the BatchNorm left (input shape as built)."""
    _, before = _build(UNCHANGED_CASES[name], rng)
    bn = _batch_norm(before)
    assert fold_refusal(bn, use_counts(before["main"])) == REFUSALS[name]
    shape = tuple(int(d) for d in bn.args[0].checked_type.shape)
    expected = explain.Leftover("nn.batch_norm", shape, REFUSALS[name])
    assert explain.batch_norm_leftovers(explain.fold_input(before)) == [expected]
    if name == "packed_nchw4c":
        return  # the whole pipeline (explain runs it) does not take packed layouts
    report = explain.explain(before, memory=False)
    assert [item for item in report.leftovers if item.op == "nn.batch_norm"] == [expected]
    assert str(expected) in str(report)


@pytest.mark.parametrize("name", FOLDED_CASES)
def test_a_foldable_chain_has_no_refusal(rng, name):
    before = _module(_before(_case(rng, **FOLDED_CASES[name]))[0])
    assert fold_refusal(_batch_norm(before), use_counts(before["main"])) is None
    assert explain.batch_norm_leftovers(explain.fold_input(before)) == []


# ---------------------------------------------------------------------------- numeric tests


@pytest.fixture(scope="module")
def target():
    return tvm.target.Target(f"llvm -mcpu={tvm.target.codegen.llvm_get_system_cpu()} -num-cores=2")


def _run(mod, inputs, target):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    module = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    module.set_input(**inputs)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]


NUMERIC_CASES = {
    "conv_bn_eps1e-5": ({}, None),
    "bias_add_scale_false": ({"bias": "bias_add", "scale": False}, None),
    "add_c11_eps1e-3": ({"bias": (C, 1, 1), "epsilon": 1e-3}, None),
    "center_false": ({"center": False, "bias": "bias_add"}, None),
    "nhwc_hwio": ({"layout": "NHWC", "kernel_layout": "HWIO", "bias": (C,)}, None),
    "groups2": ({"groups": 2, "bias": "bias_add"}, None),
    "depthwise": ({"groups": C}, None),
    "conv_second_consumer": ({"bias": "bias_add"}, _unchanged_second_conv_consumer),
    "gamma_var": ({}, _with(p__gamma=relay.var("gamma", shape=(C,)))),
}


@pytest.mark.parametrize("name", NUMERIC_CASES)
def test_numeric_against_stock_build(rng, target, name):
    gamma = _bn_params(np.random.default_rng(2))["gamma"]
    case, original = _build(NUMERIC_CASES[name], rng)
    arrays = {"x": case["x"], "gamma": gamma}
    inputs = {v.name_hint: arrays[v.name_hint] for v in original["main"].params}
    folded = FoldBatchNorm()(original)
    if name == "conv_second_consumer":
        tvm.ir.assert_structural_equal(folded, original)
    elif name == "gamma_var":
        assert "nn.batch_norm" not in count_ops(folded)
    else:
        _assert_folded(folded)
    outs, refs = _run(folded, inputs, target), _run(original, inputs, target)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        _assert_close(out, ref)


# ---------------------------------------------------------------------------- unbound operands

#: Which operands of a case become function parameters (unbound params).
UNBOUND = {
    "all": ("w", "b", *BN_NAMES),
    "weight": ("w",),
    "var": ("var",),
}


def _unbind(case, names):
    """A copy of ``case`` whose ``names`` operands are ``relay.var``s, and their values."""
    case = {**case, "p": dict(case["p"])}
    values = {}
    for name in names:
        holder = case["p"] if name in BN_NAMES else case
        if holder[name] is None:
            continue
        values[name] = holder[name]
        holder[name] = relay.var(name, shape=values[name].shape, dtype=str(values[name].dtype))
    return case, values


SYMBOLIC_CASES = [(name, "all") for name in FOLDED_CASES] + [
    (name, unbound) for name in ("conv_bn", "nhwc_add_111c") for unbound in ("weight", "var")
]


@pytest.mark.parametrize("name,unbound", SYMBOLIC_CASES)
def test_symbolic_fold_equals_constant_fold_once_bound(rng, name, unbound):
    """Unbound operands fold to expressions that FoldConstant turns into the constants of the
    NumPy path (``bn_fold.fold_bn``) once the params are bound: bit for bit in float32 (float64
    arithmetic, one rounding); float16 may round twice (float64 -> float32 -> float16)."""
    case = _case(rng, **FOLDED_CASES[name])
    symbolic, values = _unbind(case, UNBOUND[unbound])
    after = FoldBatchNorm()(_module(_before(symbolic)[0]))
    assert "nn.batch_norm" not in count_ops(after)
    bound = relay.build_module.bind_params_by_name(after["main"], values)
    folded = relay.transform.FoldConstant()(_module(bound))
    expected = _module(_expected(case))
    if case["x"].dtype == np.float32:
        tvm.ir.assert_structural_equal(folded, expected)
        return
    got, ref = (_constants(m) for m in (folded, expected))
    assert [c.shape for c in got] == [c.shape for c in ref]
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.astype("float64"), r.astype("float64"), rtol=2**-10)


def _constants(mod):
    found = []
    relay.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e.data.numpy()) if isinstance(e, relay.Constant) else 0
    )
    return found


UNBOUND_NUMERIC = {
    "nchw_bias_add": {"bias": "bias_add"},
    "nhwc_add_111c": {"layout": "NHWC", "kernel_layout": "HWIO", "bias": (1, 1, 1, C)},
    "depthwise_scale_false": {"groups": C, "scale": False},
    "groups2_center_false": {"groups": 2, "center": False, "bias": (C, 1, 1)},
}


@pytest.mark.parametrize("name", UNBOUND_NUMERIC)
def test_unbound_operands_as_run_time_inputs_match_stock(rng, target, name):
    """Never bound, the folded graph computes the BN's result at run time, inf and NaN inputs
    included (they land on the same outputs)."""
    case, values = _unbind(_case(rng, **UNBOUND_NUMERIC[name]), UNBOUND["all"])
    original = _module(_before(case)[0])
    folded = FoldBatchNorm()(original)
    assert "nn.batch_norm" not in count_ops(folded)
    x = case["x"].copy()
    x.flat[[3, 50, 120]] = [np.inf, -np.inf, np.nan]
    inputs = {"x": x, **values}
    (out,), (ref,) = _run(folded, inputs, target), _run(original, inputs, target)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out) * np.sign(out), np.isinf(ref) * np.sign(ref))
    finite = np.isfinite(ref)
    assert finite.mean() > 0.5
    _assert_close(out[finite], ref[finite])
