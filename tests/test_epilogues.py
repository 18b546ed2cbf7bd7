"""Every fused epilogue, numerically: tvm_fuse.build against stock relay.build of the graph."""

import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import examples, spec, testing

RTOL = 1e-5

#: The Relay form of every activation of ``spec.ACTIVATIONS`` that has one, and its name.
ACTIVATIONS = {
    "relu": (relay.nn.relu, "relu"),
    "relu6": (lambda y: relay.clip(y, 0.0, 6.0), "relu6"),
    "leaky_relu": (lambda y: relay.nn.leaky_relu(y, 0.2), "leaky_relu"),
    "sigmoid": (relay.sigmoid, "sigmoid"),
    "silu": (lambda y: relay.multiply(y, relay.sigmoid(y)), "silu"),
}


def _conv_bn(data_shape=(1, 16, 12, 12), channels=16, seed=0):
    """``conv -> BN`` (no activation): its module, params, and the BN output expression."""
    mod, params = examples.conv_bn_act(
        data_shape=data_shape, channels=channels, strides=1, padding=1, relu=False, seed=seed
    )
    return mod["main"], params


def _check(func, params, expected_ops):
    mod = tvm.IRModule.from_expr(func)
    inputs = examples.random_inputs(mod, params)
    ref = testing.run(testing.build_stock(mod, params), inputs)
    got = testing.run(tvm_fuse.build(mod, params), inputs)
    testing.assert_close(got, ref, RTOL)
    assert [spec.ops for spec in tvm_fuse.describe(tvm_fuse.optimize(mod, params))] == expected_ops


def test_every_activation_of_the_table_is_checked_here():
    assert set(ACTIVATIONS) == {name for name, row in spec.ACTIVATIONS.items() if row.relay_op}


@pytest.mark.llvm
@pytest.mark.parametrize("act, name", ACTIVATIONS.values(), ids=ACTIVATIONS.keys())
def test_activation_epilogue(act, name):
    func, params = _conv_bn()
    _check(relay.Function(func.params, act(func.body)), params, [("conv2d", "bias", name)])


@pytest.mark.llvm
def test_residual_add_relu():
    func, params = _conv_bn()
    shortcut = relay.var("shortcut", shape=(1, 16, 12, 12))
    body = relay.nn.relu(relay.add(func.body, shortcut))
    _check(
        relay.Function([*func.params, shortcut], body),
        params,
        [("conv2d", "bias", "add", "relu")],
    )


@pytest.mark.llvm
def test_residual_whose_conv_output_has_a_second_consumer_is_not_fused_but_correct():
    func, params = _conv_bn()
    shortcut = relay.var("shortcut", shape=(1, 16, 12, 12))
    bn = func.body
    body = relay.Tuple([relay.nn.relu(relay.add(bn, shortcut)), relay.sigmoid(bn)])
    _check(relay.Function([*func.params, shortcut], body), params, [("conv2d", "bias")])


@pytest.mark.llvm
def test_resnet_basic_block():
    """conv-BN-relu -> conv-BN -> add(shortcut) -> relu: two kernels, the add inside the second."""
    mod, params = examples.basic_block()
    _check(mod["main"], params, [("conv2d", "bias", "relu"), ("conv2d", "bias", "add", "relu")])
