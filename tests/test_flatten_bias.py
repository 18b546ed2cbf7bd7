"""FlattenChannelBias: a non-constant per-channel addend of an NHWC conv becomes a [C] tensor."""

import numpy as np
import pytest
import tvm
from tvm import relay

from tvm_fuse.passes.bias import FlattenChannelBias

C = 8


def _conv(layout="NHWC"):
    shape = (1, 6, 6, 4) if layout == "NHWC" else (1, 4, 6, 6)
    kernel = "HWIO" if layout == "NHWC" else "OIHW"
    wshape = (3, 3, 4, C) if layout == "NHWC" else (C, 4, 3, 3)
    x, w = relay.var("x", shape=shape), relay.var("w", shape=wshape)
    conv = relay.nn.conv2d(
        x, w, padding=(1, 1), channels=C, kernel_size=3, data_layout=layout, kernel_layout=kernel
    )
    return conv


def _module(body, params=None):
    func = relay.Function(params or relay.analysis.free_vars(body), body)
    return relay.transform.InferType()(tvm.IRModule.from_expr(func))


@pytest.mark.parametrize("shape", [(1, 1, 1, C), (1, 1, C), (1, C)])
@pytest.mark.parametrize("conv_first", [True, False])
def test_non_constant_channel_addend_becomes_a_vector(shape, conv_first):
    conv, b = _conv(), relay.var("b", shape=shape)
    body = relay.add(conv, b) if conv_first else relay.add(b, conv)
    before = _module(body)
    expected = _module(relay.add(conv, relay.reshape(b, [C])), relay.analysis.free_vars(body))
    tvm.ir.assert_structural_equal(FlattenChannelBias()(before), expected)


def _unchanged_cases():
    conv = _conv()
    return {
        "constant": relay.add(conv, relay.const(np.ones((1, 1, 1, C), "float32"))),
        "vector_already": relay.add(conv, relay.var("b", shape=(C,))),
        "spatial": relay.add(conv, relay.var("r", shape=(1, 6, 6, C))),
        "one_value": relay.add(conv, relay.var("s", shape=(1, 1, 1, 1))),
        "nchw": relay.add(_conv("NCHW"), relay.var("b", shape=(1, C, 1, 1))),
        "not_a_conv": relay.add(relay.nn.relu(conv), relay.var("b", shape=(1, 1, 1, C))),
    }


@pytest.mark.parametrize("name", list(_unchanged_cases()))
def test_other_addends_unchanged(name):
    before = _module(_unchanged_cases()[name])
    tvm.ir.assert_structural_equal(FlattenChannelBias()(before), before)
