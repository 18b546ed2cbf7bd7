"""tvm_fuse.build against stock relay.build of the original graph (float32, rtol 1e-5)."""

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import examples, memory, testing

RTOL = 1e-5
SMALL = dict(data_shape=(1, 16, 14, 14), channels=32)


def _check(mod, params, fused_kernels):
    """Build both ways, compare every output, and count the fused kernels."""
    inputs = examples.random_inputs(mod, params)
    ref = testing.run(testing.build_stock(mod, params), inputs)
    got = testing.run(tvm_fuse.build(mod, params), inputs)
    testing.assert_close(got, ref, RTOL)
    assert len(tvm_fuse.describe(tvm_fuse.optimize(mod, params))) == fused_kernels


def test_seed_example():
    mod, params = examples.seed_example()
    _check(mod, params, fused_kernels=1)
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert spec.ops == ("conv2d", "bias", "relu")
    assert (spec.strides, spec.padding) == ((2, 2), (1, 1, 1, 1))


CASES = {
    "conv-bias-bn-relu": dict(conv_bias=True),
    "conv-bn-no-relu": dict(relu=False),
    "batch-2": dict(data_shape=(2, 16, 14, 14)),
    "channels-3": dict(data_shape=(1, 3, 14, 14), channels=3),
    "channels-17": dict(data_shape=(1, 17, 14, 14), channels=17),
    "1x1": dict(kernel=1, padding=0, strides=1),
    "7x7-stem": dict(data_shape=(1, 3, 32, 32), kernel=7, strides=2, padding=3),
    "dilation-2": dict(dilation=2, padding=2, strides=1),
    "asymmetric-padding": dict(padding=(0, 1, 2, 1), strides=1),
    "bn-scale-false": dict(scale=False),
    "bn-center-false": dict(center=False),
    "epsilon-1e-3": dict(epsilon=1e-3),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_conv_bn_variants(case):
    mod, params = examples.conv_bn_act(**{**SMALL, **case})
    _check(mod, params, fused_kernels=1)


def test_depthwise_is_fused_and_correct():
    mod, params = examples.conv_bn_act(**{**SMALL, "groups": 16, "channels": 16})
    _check(mod, params, fused_kernels=1)
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert spec.ops == ("depthwise_conv2d", "bias", "relu")
    assert spec.weight.layout.startswith("OHW") and spec.groups == 16


def test_grouped_conv_stays_stock_and_correct():
    mod, params = examples.conv_bn_act(**{**SMALL, "groups": 4, "channels": 16})
    _check(mod, params, fused_kernels=0)


def test_conv_output_with_two_consumers():
    mod, params = examples.conv_bn_act(**SMALL, relu=False)
    main = mod["main"]
    bn = main.body
    conv = bn.tuple_value.args[0]
    body = relay.Tuple([relay.nn.relu(bn), relay.sigmoid(conv)])
    mod = tvm.IRModule.from_expr(relay.Function(main.params, body))
    _check(mod, params, fused_kernels=1)
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert spec.ops == ("conv2d",), "the conv output is read twice: nothing may fuse into it"


def test_outputs_keep_the_original_input_names_and_nchw_shapes():
    mod, params = examples.seed_example()
    lib = tvm_fuse.build(mod, params)
    module = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu()))
    assert module.get_input("data").shape == (1, 64, 56, 56)
    assert module.get_output(0).shape == (1, 128, 28, 28)


OTHER_GRAPHS = {
    "float16": lambda: _single_conv("float16"),
    "no-conv": lambda: _no_conv(),
}


def _single_conv(dtype):
    x = relay.var("x", shape=(1, 8, 10, 10), dtype=dtype)
    w = relay.var("w", shape=(8, 8, 3, 3), dtype=dtype)
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1), channels=8, kernel_size=(3, 3)))
    w_value = np.random.default_rng(2).uniform(-0.3, 0.3, (8, 8, 3, 3)).astype(dtype)
    return tvm.IRModule.from_expr(relay.Function([x, w], y)), {"w": w_value}


def _no_conv():
    x = relay.var("x", shape=(1, 8, 10, 10))
    y = relay.nn.max_pool2d(relay.nn.relu(x), pool_size=(2, 2), strides=(2, 2))
    return tvm.IRModule.from_expr(relay.Function([x], y)), {}


@pytest.mark.parametrize("make", OTHER_GRAPHS.values(), ids=OTHER_GRAPHS.keys())
def test_graphs_without_fusable_convs_give_the_stock_result(make):
    mod, params = make()
    inputs = examples.random_inputs(mod, params)
    ref = testing.run(testing.build_stock(mod, params), inputs)
    got = testing.run(tvm_fuse.build(mod, params), inputs)
    rtol = 1e-2 if got[0].dtype == np.float16 else RTOL
    testing.assert_close(got, ref, rtol)
    assert tvm_fuse.describe(tvm_fuse.optimize(mod, params)) == []


def test_invalid_target_is_a_clear_error():
    mod, params = examples.conv_bn_act(**SMALL)
    with pytest.raises(ValueError, match="invalid target 'cuda-ish'"):
        tvm_fuse.build(mod, params, target="cuda-ish")


def test_unbound_free_weight_is_a_clear_error():
    x = relay.var("x", shape=(1, 8, 10, 10))
    w = relay.var("w", shape=(8, 8, 3, 3))
    mod = tvm.IRModule({relay.GlobalVar("main"): relay.Function([x], relay.nn.conv2d(x, w))})
    with pytest.raises(ValueError, match="free variables .*: w"):
        tvm_fuse.build(mod)


def _dynamic_batch():
    x = relay.var("x", shape=(relay.Any(), 8, 10, 10))
    w = relay.var("w", shape=(8, 8, 3, 3))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1), channels=8, kernel_size=(3, 3)))
    w_value = np.random.default_rng(3).uniform(-0.3, 0.3, (8, 8, 3, 3)).astype("float32")
    return tvm.IRModule.from_expr(relay.Function([x, w], y)), {"w": w_value}


def test_dynamic_batch_build_is_a_clear_error():
    mod, params = _dynamic_batch()
    with pytest.raises(ValueError, match=r"input 'x' has a dynamic shape \(\?, 8, 10, 10\)"):
        tvm_fuse.build(mod, params)


def test_dynamic_batch_optimizes_and_runs_on_the_vm_like_stock():
    mod, params = _dynamic_batch()
    x = np.random.default_rng(4).standard_normal((3, 8, 10, 10)).astype("float32")

    def run_vm(module, bind):
        with tvm.transform.PassContext(opt_level=3):
            exe = relay.vm.compile(module, target=tvm_fuse.host_target(), params=bind)
        vm = tvm.runtime.vm.VirtualMachine(exe, tvm.cpu())
        return [vm.invoke("main", x).numpy()]

    testing.assert_close(run_vm(tvm_fuse.optimize(mod, params), None), run_vm(mod, params), RTOL)


def test_seed_example_conv_out_and_bn_out_get_no_storage():
    """The seed's memory promise, read off the graph executor's own plan (the graph JSON)."""
    mod, params = examples.seed_example()
    out_size = 128 * 28 * 28 * 4

    def output_sized(lib):
        tensors = memory.graph_storage(lib.get_graph_json(), lib.get_params().keys())
        return [t.name for t in tensors.intermediates() if t.nbytes == out_size]

    unfused = output_sized(testing.build_stock(mod, params, opt_level=0))
    assert "tvmgen_default_fused_nn_conv2d" in unfused  # conv_out
    assert len(unfused) >= 3  # conv_out, BN's scaled tensor, bn_out (relu writes the output)
    assert output_sized(tvm_fuse.build(mod, params)) == [
        "tvmgen_default_fused_tvm_fuse_conv2d_nhwc_fused"  # out, before the exit transform
    ]
