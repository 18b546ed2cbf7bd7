"""The exit transpose ``tvm_fuse.nhwc_to_nchw``: what the layout pass swaps in, and its kernel."""

import json

import numpy as np
import pytest
import tvm
from tvm import relay, te

import tvm_fuse
from tvm_fuse import exit_op, strategy, testing
from tvm_fuse.ir_utils import count_ops
from tvm_fuse.passes.layout import ConvertLayoutNHWC, count_layout_transforms
from tvm_fuse.schedules import nhwc_to_nchw
from tvm_fuse.target import host_target


def _module(x, body):
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], body)))


def _conv_relu(rng, x, ci, co):
    w = relay.const(rng.standard_normal((co, ci, 3, 3)).astype("float32"))
    return relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1), channels=co, kernel_size=(3, 3)))


# Ragged shapes: W and C not multiples of any SIMD width, batch 2, a 1x1 map.
SHAPES = [(1, 112, 112, 64), (2, 5, 13, 17), (1, 1, 1, 40), (1, 3, 20, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_equals_numpy_transpose(shape, rng):
    data = te.placeholder(shape, name="data")
    out = nhwc_to_nchw.compute(data)
    target = host_target()
    func = tvm.build(nhwc_to_nchw.schedule([out], strategy.simd_lanes(target)), [data, out], target)
    x = rng.standard_normal(shape).astype("float32")
    y = tvm.nd.empty([int(d) for d in out.shape])
    func(tvm.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), x.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("width, vector", [(64, 16), (56, 14), (7, 7)])
def test_lowered_kernel_is_parallel_over_rows_and_vectorized(width, vector):
    data = te.placeholder((2, 9, width, 64), name="data")
    out = nhwc_to_nchw.compute(data)
    text = str(tvm.lower(nhwc_to_nchw.schedule([out], 16), [data, out]))
    assert "T.parallel(18)" in text  # N x H rows
    assert f" + {vector}] = data_1[" in text  # vector stores of columns in tiles dividing W


def test_layout_pass_swaps_the_exit_transform_only(rng):
    x = relay.var("x", shape=(1, 8, 10, 10))
    converted = ConvertLayoutNHWC()(_module(x, _conv_relu(rng, x, 8, 24)))
    ops = count_ops(converted)
    assert ops[exit_op.OP_NAME] == 1 and ops["layout_transform"] == 1  # entry stays stock
    assert count_layout_transforms(converted) == 2
    assert [int(d) for d in converted["main"].ret_type.shape] == [1, 24, 10, 10]


def test_other_layout_transforms_are_left_alone():
    """NCHW -> NHWC, a blocked layout and a constant are not exit transposes."""
    x = relay.var("x", shape=(1, 4, 6, 16))
    mod = _module(
        x,
        relay.Tuple(
            [
                relay.layout_transform(x, "NCHW", "NHWC"),
                relay.layout_transform(x, "NHWC", "NCHW4c"),
                relay.layout_transform(relay.const(np.ones((1, 2, 2, 3), "f")), "NHWC", "NCHW"),
            ]
        ),
    )
    calls = []
    relay.analysis.post_order_visit(
        mod["main"], lambda n: calls.append(n) if isinstance(n, relay.Call) else None
    )
    assert not any(exit_op.is_exit_transform(call) for call in calls)


def test_built_graph_runs_the_exit_transpose_and_matches_stock(rng):
    """A net whose output is a feature map: tvm_fuse's exit kernel runs; the result equals stock."""
    x = relay.var("data", shape=(2, 16, 9, 9))
    pooled = relay.nn.max_pool2d(_conv_relu(rng, x, 16, 20), (2, 2))
    mod = _module(x, _conv_relu(rng, pooled, 20, 33))
    inputs = {"data": rng.standard_normal((2, 16, 9, 9)).astype("float32")}
    lib = tvm_fuse.build(mod, {})
    names = [n["name"] for n in json.loads(lib.get_graph_json())["nodes"]]
    assert any("nhwc_to_nchw" in name for name in names)
    testing.assert_close(testing.run(lib, inputs), testing.run(testing.build_stock(mod), inputs))


def _implementation(target):
    data = te.placeholder((1, 4, 4, 8), name="data")
    out_type = relay.TensorType((1, 8, 4, 4), "float32")
    with target:
        impls = strategy.exit_transpose_strategy(None, [data], out_type, target).specializations
    return [impl.name for spec in impls for impl in spec.implementations]


def test_strategy_picks_the_blocked_kernel_on_cpu_and_injective_elsewhere():
    assert _implementation(host_target()) == [nhwc_to_nchw.NAME]
    assert _implementation(tvm.target.Target("cuda")) == ["nhwc_to_nchw.generic"]
