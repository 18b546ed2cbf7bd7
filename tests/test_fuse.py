"""FuseConvBiasAct: structural tests, including every case where it must change nothing."""

import numpy as np
import pytest
import tvm
from tvm import relay

from tvm_fuse.op import fused_conv2d
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
    want = _expect(fused_conv2d(X, W, B, activation="relu", **CONV), X)
    tvm.ir.assert_structural_equal(got, want)


def test_add_of_a_per_channel_constant_is_the_bias():
    b4 = relay.const(B.data.numpy().reshape(1, 1, 1, 32))
    got = _run(relay.add(_nhwc_conv(X, W), b4), X)
    want = _expect(fused_conv2d(X, W, B, **CONV), X)
    tvm.ir.assert_structural_equal(got, want)


def test_bare_conv_becomes_a_fused_call_without_epilogue():
    got = _run(_nhwc_conv(X, W), X)
    tvm.ir.assert_structural_equal(got, _expect(fused_conv2d(X, W, **CONV), X))


def test_relu_without_bias():
    got = _run(relay.nn.relu(_nhwc_conv(X, W)), X)
    want = _expect(fused_conv2d(X, W, activation="relu", **CONV), X)
    tvm.ir.assert_structural_equal(got, want)


def test_conv_output_with_second_consumer_is_not_fused_away():
    conv = _nhwc_conv(X, W)
    got = _run(relay.Tuple([relay.nn.relu(relay.nn.bias_add(conv, B, axis=3)), conv]), X)
    fused = fused_conv2d(X, W, **CONV)
    want = _expect(relay.Tuple([relay.nn.relu(relay.nn.bias_add(fused, B, axis=3)), fused]), X)
    tvm.ir.assert_structural_equal(got, want)


def test_bias_output_with_second_consumer_keeps_the_relu_outside():
    biased = relay.nn.bias_add(_nhwc_conv(X, W), B, axis=3)
    got = _run(relay.add(relay.nn.relu(biased), biased), X)
    fused = fused_conv2d(X, W, B, **CONV)
    tvm.ir.assert_structural_equal(got, _expect(relay.add(relay.nn.relu(fused), fused), X))


def test_a_bias_that_is_not_per_channel_stays_an_add():
    full = _const((1, 8, 8, 32))
    got = _run(relay.add(_nhwc_conv(X, W), full), X)
    tvm.ir.assert_structural_equal(got, _expect(relay.add(fused_conv2d(X, W, **CONV), full), X))


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
