"""DenseAsConv: dense layers run as fused 1x1 NHWC convs.

Each case builds a Relay dense layer (with its bias as ONNX's Gemm imports it, ``add``, or as
``bias_add``, and an activation) with ``tvm_fuse.build`` and with stock TVM, and compares the
outputs; the optimized module says which layers became fused convs and which stayed dense.
"""

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import testing
from tvm_fuse.passes.dense import DenseAsConv

BIASES = ("add", "add_1m_first", "bias_add", "none")


def dense_module(rng, batch, units, inputs, bias="add", activation=True, weight=None):
    """``dense(x [batch, inputs], W [units, inputs])`` + a bias in the form ``bias`` + ReLU;
    the weight a constant unless ``weight`` (a free variable) is given."""
    x = relay.var("data", shape=(batch, inputs))
    w = rng.standard_normal((units, inputs)).astype("float32") / np.sqrt(inputs)
    b = rng.standard_normal(units).astype("float32")
    y = relay.nn.dense(x, relay.const(w) if weight is None else weight)
    if bias == "add":
        y = relay.add(y, relay.const(b))
    elif bias == "add_1m_first":
        y = relay.add(relay.const(b.reshape(1, units)), y)
    elif bias == "bias_add":
        y = relay.nn.bias_add(y, relay.const(b))
    y = relay.nn.relu(y) if activation else y
    return tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))


def fused_ops(mod):
    return [spec.ops for spec in tvm_fuse.describe(tvm_fuse.optimize(mod))]


def dense_ops_left(mod):
    return tvm_fuse.optimize(mod).astext(show_meta_data=False).count("nn.dense(")


def check_against_stock(mod, inputs, rtol=1e-5):
    got = testing.run(tvm_fuse.build(mod), inputs)
    ref = testing.run(testing.build_stock(mod), inputs)
    testing.assert_close(got, ref, rtol)


@pytest.mark.parametrize("bias", BIASES)
@pytest.mark.parametrize("batch", [1, 3])
def test_dense_with_its_bias_becomes_one_fused_conv(batch, bias, rng):
    mod = dense_module(rng, batch, 200, 96, bias)
    want = ("conv2d", "relu") if bias == "none" else ("conv2d", "bias", "relu")
    assert fused_ops(mod) == [want]
    assert dense_ops_left(mod) == 0
    check_against_stock(mod, {"data": rng.standard_normal((batch, 96)).astype("float32")})


@pytest.mark.parametrize("activation", ["relu6", "leaky_relu", "sigmoid", "clip_0_5"])
def test_an_activation_after_the_bias_enters_the_kernel(activation, rng):
    """Each element-wise activation the epilogue takes is fused; a clip it does not take stays
    an op, applied to the same values."""
    x = relay.var("data", shape=(2, 64))
    w = rng.standard_normal((150, 64)).astype("float32") / 4
    y = relay.add(relay.nn.dense(x, relay.const(w)), relay.const(np.ones(150, "float32")))
    forms = {
        "relu6": lambda v: relay.clip(v, 0.0, 6.0),
        "leaky_relu": lambda v: relay.nn.leaky_relu(v, 0.1),
        "sigmoid": relay.sigmoid,
        "clip_0_5": lambda v: relay.clip(v, 0.0, 5.0),
    }
    mod = tvm.IRModule.from_expr(relay.Function([x], forms[activation](y)))
    fused = ("conv2d", "bias") if activation == "clip_0_5" else ("conv2d", "bias", activation)
    assert fused_ops(mod) == [fused]
    check_against_stock(mod, {"data": rng.standard_normal((2, 64)).astype("float32")})


def test_an_mlp_of_two_layers_fuses_both(rng):
    """dense -> bias -> ReLU -> dense -> bias: the second layer reads the first's rewrite."""
    x = relay.var("data", shape=(2, 96))
    y = x
    for inputs, units in ((96, 256), (256, 160)):
        w = rng.standard_normal((units, inputs)).astype("float32") / np.sqrt(inputs)
        y = relay.add(relay.nn.dense(y, relay.const(w)), relay.const(np.ones(units, "float32")))
        y = relay.nn.relu(y) if units == 256 else y
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    assert fused_ops(mod) == [("conv2d", "bias", "relu"), ("conv2d", "bias")]
    check_against_stock(mod, {"data": rng.standard_normal((2, 96)).astype("float32")})


def test_a_value_read_twice_is_computed_once(rng):
    """The biased output feeds a ReLU and a multiply: the ReLU stays outside the kernel rather
    than the dense layer being computed once for each reader."""
    x = relay.var("data", shape=(1, 64))
    w = rng.standard_normal((150, 64)).astype("float32") / 8
    y = relay.add(relay.nn.dense(x, relay.const(w)), relay.const(np.ones(150, "float32")))
    body = relay.Tuple([relay.nn.relu(y), relay.multiply(y, relay.const(2.0))])
    mod = tvm.IRModule.from_expr(relay.Function([x], body))
    assert fused_ops(mod) == [("conv2d", "bias")]
    check_against_stock(mod, {"data": rng.standard_normal((1, 64)).astype("float32")})


def test_a_classifier_head_after_global_pooling_matches_stock(rng):
    """NCHW conv -> global average pool -> flatten -> dense + bias, as a CNN ends."""
    x = relay.var("data", shape=(1, 32, 7, 7))
    w = relay.const(rng.standard_normal((64, 32, 3, 3)).astype("float32") / 17)
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=1, channels=64, kernel_size=3))
    y = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(y))
    head = rng.standard_normal((300, 64)).astype("float32") / 8
    y = relay.add(relay.nn.dense(y, relay.const(head)), relay.const(np.ones(300, "float32")))
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    assert fused_ops(mod) == [("conv2d", "relu"), ("conv2d", "bias")]
    check_against_stock(mod, {"data": rng.standard_normal((1, 32, 7, 7)).astype("float32")})


def test_nan_and_inf_in_weight_and_data_match_stock(rng):
    weight = rng.standard_normal((160, 64)).astype("float32")
    weight[3, 5], weight[7, 0] = np.nan, np.inf
    x = relay.var("data", shape=(3, 64))  # row 2 finite, rows 0 and 1 not
    bias = relay.const(rng.standard_normal(160).astype("float32"))
    mod = tvm.IRModule.from_expr(
        relay.Function([x], relay.add(relay.nn.dense(x, relay.const(weight)), bias))
    )
    assert fused_ops(mod) == [("conv2d", "bias")]
    data = rng.standard_normal((3, 64)).astype("float32")
    data[1, 10], data[0, 63] = -np.inf, np.nan
    (got,) = testing.run(tvm_fuse.build(mod), {"data": data})
    (ref,) = testing.run(testing.build_stock(mod), {"data": data})
    testing.assert_same_including_specials(got, ref)
    assert np.isnan(ref).any() and np.isinf(ref).any()


def test_per_sample_bias_add_stays_outside_the_kernel(rng):
    """``bias_add`` on axis 0 adds one value per sample: the dense becomes a conv, the bias
    stays a separate op."""
    x = relay.var("data", shape=(160, 32))
    w = rng.standard_normal((160, 32)).astype("float32")
    b = rng.standard_normal(160).astype("float32")
    y = relay.nn.bias_add(relay.nn.dense(x, relay.const(w)), relay.const(b), axis=0)
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    assert fused_ops(mod) == [("conv2d",)]
    check_against_stock(mod, {"data": rng.standard_normal((160, 32)).astype("float32")})


def test_an_unbound_weight_gives_the_same_kernel_as_a_bound_one(rng):
    """Params given to ``relay.build`` only: the weight's transpose is Relay ops that the build
    folds, and the fused call is the one the bound weight gives."""
    free = relay.var("w", shape=(200, 48))
    mod = dense_module(rng, 1, 200, 48, weight=free)
    weight = rng.standard_normal((200, 48)).astype("float32")
    bound = tvm_fuse.describe(tvm_fuse.optimize(mod, {"w": weight}))
    with tvm.transform.PassContext(opt_level=3):
        unbound = tvm_fuse.describe(tvm_fuse.pipeline()(mod))
    assert unbound == bound and [spec.ops for spec in bound] == [("conv2d", "bias", "relu")]
    inputs = {"data": rng.standard_normal((1, 48)).astype("float32")}
    got = testing.run(tvm_fuse.build(mod, {"w": weight}), inputs)
    ref = testing.run(testing.build_stock(mod, {"w": weight}), inputs)
    testing.assert_close(got, ref, 1e-5)


def test_dense_layers_it_leaves_to_stock_tvm(rng):
    """A tiny output (the fast kernel's own refusal) and a float64 layer stay ``nn.dense``, and
    still compute what stock TVM does."""
    tiny = dense_module(rng, 1, 10, 48)
    x = relay.var("data", shape=(1, 48), dtype="float64")
    w64 = relay.const(rng.standard_normal((200, 48)))
    wide = tvm.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w64)))
    for mod in (tiny, wide):
        assert fused_ops(mod) == [] and dense_ops_left(mod) == 1
    check_against_stock(tiny, {"data": rng.standard_normal((1, 48)).astype("float32")})


def test_other_targets_keep_the_dense_layer(rng):
    mod = relay.transform.InferType()(dense_module(rng, 1, 200, 96))
    arm = tvm.target.Target("llvm -mtriple=aarch64-linux-gnu")
    assert tvm.ir.structural_equal(DenseAsConv(arm)(mod), mod)
    host = DenseAsConv(tvm_fuse.host_target())(mod)
    assert "nn.conv2d" in host.astext(show_meta_data=False)
