"""FuseConvBiasAct: structural tests, including every case where it must change nothing."""

import numpy as np
import pytest
import tvm
from tvm import relay

from tvm_fuse.testing import fused_conv_call
from tvm_fuse.passes.fuse import FuseConvBiasAct

CONV = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))


def _const(shape, dtype="float32"):
    return relay.const(np.random.default_rng(1).standard_normal(shape).astype(dtype))


def _nhwc_conv(x, w, **kw):
    return relay.nn.conv2d(x, w, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO", **kw)


def _run(body, *params):
    mod = tvm.IRModule.from_expr(relay.Function(list(params), body))
    return FuseConvBiasAct()(mod)


def _expect(body, *params):
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(list(params), body)))


X = relay.var("x", shape=(1, 8, 8, 16))
W = _const((3, 3, 16, 32))
B = _const((32,))


def test_conv_bias_relu_becomes_one_call():
    got = _run(relay.nn.relu(relay.nn.bias_add(_nhwc_conv(X, W), B, axis=3)), X)
    want = _expect(fused_conv_call(X, W, B, activation="relu", **CONV), X)
    tvm.ir.assert_structural_equal(got, want)


def test_add_of_a_per_channel_constant_is_the_bias():
    b4 = relay.const(B.data.numpy().reshape(1, 1, 1, 32))
    got = _run(relay.add(_nhwc_conv(X, W), b4), X)
    want = _expect(fused_conv_call(X, W, B, **CONV), X)
    tvm.ir.assert_structural_equal(got, want)


def test_bare_conv_becomes_a_fused_call_without_epilogue():
    got = _run(_nhwc_conv(X, W), X)
    tvm.ir.assert_structural_equal(got, _expect(fused_conv_call(X, W, **CONV), X))


def test_relu_without_bias():
    got = _run(relay.nn.relu(_nhwc_conv(X, W)), X)
    want = _expect(fused_conv_call(X, W, activation="relu", **CONV), X)
    tvm.ir.assert_structural_equal(got, want)


def test_conv_output_with_second_consumer_is_not_fused_away():
    conv = _nhwc_conv(X, W)
    got = _run(relay.Tuple([relay.nn.relu(relay.nn.bias_add(conv, B, axis=3)), conv]), X)
    fused = fused_conv_call(X, W, **CONV)
    want = _expect(relay.Tuple([relay.nn.relu(relay.nn.bias_add(fused, B, axis=3)), fused]), X)
    tvm.ir.assert_structural_equal(got, want)


def test_bias_output_with_second_consumer_keeps_the_relu_outside():
    biased = relay.nn.bias_add(_nhwc_conv(X, W), B, axis=3)
    got = _run(relay.add(relay.nn.relu(biased), biased), X)
    fused = fused_conv_call(X, W, B, **CONV)
    tvm.ir.assert_structural_equal(got, _expect(relay.add(relay.nn.relu(fused), fused), X))


def test_a_broadcast_addend_that_is_neither_bias_nor_residual_stays_an_add():
    rows = _const((1, 8, 1, 32))
    got = _run(relay.add(_nhwc_conv(X, W), rows), X)
    tvm.ir.assert_structural_equal(got, _expect(relay.add(fused_conv_call(X, W, **CONV), rows), X))


R = relay.var("r", shape=(1, 8, 8, 32))


@pytest.mark.parametrize("order", ["conv-first", "residual-first"])
def test_residual_add_then_relu_is_one_call(order):
    biased = relay.nn.bias_add(_nhwc_conv(X, W), B, axis=3)
    added = relay.add(biased, R) if order == "conv-first" else relay.add(R, biased)
    got = _run(relay.nn.relu(added), X, R)
    want = _expect(fused_conv_call(X, W, B, R, activation="relu", **CONV), X, R)
    tvm.ir.assert_structural_equal(got, want)


def test_residual_is_not_fused_when_the_chain_output_has_another_consumer():
    biased = relay.nn.bias_add(_nhwc_conv(X, W), B, axis=3)
    got = _run(relay.Tuple([relay.nn.relu(relay.add(biased, R)), biased]), X, R)
    fused = fused_conv_call(X, W, B, **CONV)
    want = _expect(relay.Tuple([relay.nn.relu(relay.add(fused, R)), fused]), X, R)
    tvm.ir.assert_structural_equal(got, want)


ACTIVATIONS = {
    "relu6": (lambda y: relay.clip(y, 0.0, 6.0), dict(activation="relu6")),
    "leaky_relu": (lambda y: relay.nn.leaky_relu(y, 0.1), dict(activation="leaky_relu", alpha=0.1)),
    "sigmoid": (relay.sigmoid, dict(activation="sigmoid")),
    "silu": (lambda y: relay.multiply(y, relay.sigmoid(y)), dict(activation="silu")),
    "silu-swapped": (lambda y: relay.multiply(relay.sigmoid(y), y), dict(activation="silu")),
}


@pytest.mark.parametrize("act, attrs", ACTIVATIONS.values(), ids=ACTIVATIONS.keys())
def test_activations_are_fused(act, attrs):
    got = _run(act(relay.nn.bias_add(_nhwc_conv(X, W), B, axis=3)), X)
    tvm.ir.assert_structural_equal(got, _expect(fused_conv_call(X, W, B, **attrs, **CONV), X))


def test_clip_other_than_0_6_stays_stock():
    got = _run(relay.clip(_nhwc_conv(X, W), -1.0, 1.0), X)
    tvm.ir.assert_structural_equal(
        got, _expect(relay.clip(fused_conv_call(X, W, **CONV), -1.0, 1.0), X)
    )


def test_silu_gate_with_another_consumer_is_not_fused():
    conv = _nhwc_conv(X, W)
    gate = relay.sigmoid(conv)
    got = _run(relay.Tuple([relay.multiply(conv, gate), gate]), X)
    fused = fused_conv_call(X, W, **CONV)
    gate = relay.sigmoid(fused)
    tvm.ir.assert_structural_equal(
        got, _expect(relay.Tuple([relay.multiply(fused, gate), gate]), X)
    )


UNSUPPORTED = {
    "nchw": lambda: relay.nn.conv2d(
        relay.var("x", shape=(1, 16, 8, 8)), _const((32, 16, 3, 3)), padding=(1, 1)
    ),
    "groups": lambda: _nhwc_conv(X, _const((3, 3, 8, 32)), groups=2),
    "float16": lambda: _nhwc_conv(
        relay.var("x", shape=(1, 8, 8, 16), dtype="float16"), _const((3, 3, 16, 32), "float16")
    ),
    "dynamic-batch": lambda: _nhwc_conv(relay.var("x", shape=(relay.Any(), 8, 8, 16)), W),
    "ohwi-kernel": lambda: relay.nn.conv2d(
        X, _const((32, 3, 3, 16)), padding=(1, 1), data_layout="NHWC", kernel_layout="OHWI"
    ),
}


@pytest.mark.parametrize("make", UNSUPPORTED.values(), ids=UNSUPPORTED.keys())
def test_unsupported_convs_are_left_alone(make):
    body = relay.nn.relu(make())
    params = relay.analysis.free_vars(body)
    got = _run(body, *params)
    tvm.ir.assert_structural_equal(got, _expect(body, *params))


def test_every_function_of_the_module_is_rewritten():
    mod = tvm.IRModule.from_expr(relay.Function([X], relay.nn.relu(_nhwc_conv(X, W))))
    y = relay.var("y", shape=(1, 8, 8, 16))
    mod[relay.GlobalVar("helper")] = relay.Function([y], relay.nn.relu(_nhwc_conv(y, W)))
    got = FuseConvBiasAct()(mod)
    for name in ("main", "helper"):
        assert got[name].body.op.name == "tvm_fuse.conv2d_nhwc_fused", name


def test_a_chain_feeding_another_chain_fuses_both():
    """Regression: the second conv's rule must read types from the original, untouched call."""
    first = relay.nn.relu(_nhwc_conv(X, _const((3, 3, 16, 16))))
    got = _run(relay.nn.relu(_nhwc_conv(first, W)), X)
    inner = fused_conv_call(X, _const((3, 3, 16, 16)), activation="relu", **CONV)
    want = _expect(fused_conv_call(inner, W, activation="relu", **CONV), X)
    tvm.ir.assert_structural_equal(got, want)
