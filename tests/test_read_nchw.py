"""ReadNCHWInput: a stem conv reads the graph's NCHW image itself, transposing it as it pads.

Each rewritten model is checked against stock TVM (the original graph, no tvm_fuse pass), and on
its artifact: the fused call's spec says NCHW data and the entry transpose is gone from the
built graph, or stays where the kernel reads NHWC (more channels, no padding, a shared input).
"""

import dataclasses
import json

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import boundary_ops, examples, explain, strategy, testing
from tvm_fuse.ir_utils import count_ops
from tvm_fuse.op import is_fused_call, spec_of_call
from tvm_fuse.passes.entry import ReadNCHWInput
from tvm_fuse.spec import KernelSpec, TensorSpec

ENTRY = "tvm_fuse_nchw_to_nhwc"


def _stem(batch=1, cin=3, size=32, channels=16, kernel=7, strides=2, padding=3, **layer):
    """A stem conv-BN-ReLU on an NCHW image."""
    shape = (batch, cin, size, size)
    return examples.conv_bn_act(shape, channels=channels, kernel=kernel, strides=strides,
                                padding=padding, **layer)


def _fused_specs(mod, params):
    calls = []
    optimized = tvm_fuse.optimize(mod, params=params)
    relay.analysis.post_order_visit(
        optimized["main"], lambda e: calls.append(e) if is_fused_call(e) else None
    )
    return [spec_of_call(call) for call in calls], optimized


def _kernels(lib) -> list[str]:
    nodes = json.loads(lib.get_graph_json())["nodes"]
    return [n["attrs"]["func_name"] for n in nodes if n["op"] == "tvm_op"]


@pytest.mark.parametrize(
    "layer",
    [
        {},  # 7x7 stride 2 pad 3, as ResNet's
        {"batch": 2, "cin": 1, "size": 21},  # batch 2, one channel, odd map
        {"kernel": 3, "strides": 1, "padding": (0, 1, 2, 1), "size": 17},  # asymmetric
        {"relu": False, "channels": 20},  # no activation, Co not a multiple of VL
    ],
)
def test_a_stem_conv_reads_the_image_itself_and_computes_what_stock_tvm_does(layer):
    mod, params = _stem(**layer)
    (spec,), _ = _fused_specs(mod, params)
    assert spec.data.layout == "NCHW"
    assert spec.data.shape == mod["main"].params[0].type_annotation.concrete_shape
    lib = testing.assert_matches_stock(mod, params)
    assert not any(ENTRY in kernel for kernel in _kernels(lib))
    assert explain.kernel_path(spec, tvm_fuse.host_target()).endswith("as it pads it")


def test_nan_and_inf_in_the_image_come_out_where_stock_tvm_puts_them():
    mod, params = _stem(relu=False)
    inputs = examples.random_inputs(mod, params)
    image = inputs["data"]
    image[0, 1, 5, 6], image[0, 2, 20, 3], image[0, 0, 31, 31] = np.nan, np.inf, -np.inf
    got = testing.run(tvm_fuse.build(mod, params), inputs)[0]
    ref = testing.run(testing.build_stock(mod, params), inputs)[0]
    assert np.isnan(ref).any() and np.isinf(ref).any()
    testing.assert_same_including_specials(got, ref)


@pytest.mark.parametrize(
    "layer, why",
    [
        ({"cin": 4}, "4 channels: the entry transpose moves whole vectors"),
        ({"kernel": 1, "padding": 0}, "no padding: the kernel reads its input in place"),
        ({"size": 640}, "a padded input over 4 MB: padded row by row"),
    ],
)
def test_the_entry_transpose_stays_where_the_kernel_reads_nhwc(layer, why):
    mod, params = _stem(**layer)
    (spec,), optimized = _fused_specs(mod, params)
    assert spec.data.layout == "NHWC", why
    assert count_ops(optimized)[boundary_ops.ENTRY_OP_NAME] == 1, why


def test_a_shared_image_keeps_its_transpose_for_the_conv_that_reads_nhwc():
    rng = np.random.default_rng(0)
    data = relay.var("data", shape=(1, 3, 24, 24))
    params = {}
    layer = {"params": params, "rng": rng, "channels": 16}
    padded = examples.conv_bn_layer(data, name="pad3", kernel=7, padding=3, **layer)
    in_place = examples.conv_bn_layer(data, name="in_place", kernel=1, padding=0, **layer)
    body = relay.concatenate([padded, in_place], axis=1)
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(body), body))
    specs, optimized = _fused_specs(mod, params)
    assert sorted(spec.data.layout for spec in specs) == ["NCHW", "NHWC"]
    assert count_ops(optimized)[boundary_ops.ENTRY_OP_NAME] == 1
    testing.assert_matches_stock(mod, params)


def test_the_pass_is_idempotent_and_the_tuning_task_stays_nhwc():
    mod, params = _stem()
    _, optimized = _fused_specs(mod, params)
    again = ReadNCHWInput()(optimized)
    assert tvm.ir.structural_equal(again, optimized)
    (workload,) = testing.fused_workloads(mod, params)
    assert workload[1][1] == (1, 32, 32, 3)  # the template's data: the NHWC view


def test_only_the_direct_fast_kernel_asks_for_nchw_data():
    spec = KernelSpec.conv((1, 32, 32, 3), (7, 7, 3, 16), (2, 2), (3, 3, 3, 3))
    packed = strategy.preferred_spec(spec, tvm_fuse.host_target())
    assert strategy.reads_nchw_data(packed)
    assert not strategy.reads_nchw_data(spec)  # HWIO: the generic kernel
    assert not strategy.reads_nchw_data(packed.with_nchw_data())  # already


def test_a_spec_with_nchw_data_round_trips_and_refuses_other_layouts():
    spec = KernelSpec.conv((2, 9, 11, 3), (3, 3, 3, 8)).with_nchw_data()
    assert spec.data == TensorSpec((2, 3, 9, 11), "NCHW", "float32")
    assert spec.in_channels == 3
    assert KernelSpec.from_json(spec.to_json()) == spec
    assert "[2, 3, 9, 11]  NCHW" in str(spec)
    with pytest.raises(ValueError, match="data layout 'NCWH'"):
        dataclasses.replace(spec, data=TensorSpec((2, 3, 11, 9), "NCWH", "float32"))
