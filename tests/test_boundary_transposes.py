"""The boundary transposes ``tvm_fuse.nchw_to_nhwc`` and ``tvm_fuse.nhwc_to_nchw``: what the layout
pass swaps in, and their kernels."""

import json

import numpy as np
import pytest
import tvm
from tvm import relay, te

import tvm_fuse
from tvm_fuse import boundary_ops, strategy, testing
from tvm_fuse.ir_utils import count_ops
from tvm_fuse.passes.layout import ConvertLayoutNHWC, count_layout_transforms
from tvm_fuse.schedules import transposes
from tvm_fuse.target import host_target


def _module(x, body):
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], body)))


def _conv_relu(rng, x, ci, co):
    w = relay.const(rng.standard_normal((co, ci, 3, 3)).astype("float32"))
    return relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1), channels=co, kernel_size=(3, 3)))


# Ragged shapes: W and C not multiples of any SIMD width, batch 2, a 1x1 map.
SHAPES = [(1, 112, 112, 64), (2, 5, 13, 17), (1, 1, 1, 40), (1, 3, 20, 3)]


#: (compute, the NumPy transpose it computes, the input's shape from an NHWC one)
DIRECTIONS = {
    "exit": (transposes.exit_compute, (0, 3, 1, 2), lambda n, h, w, c: (n, h, w, c)),
    "entry": (transposes.entry_compute, (0, 2, 3, 1), lambda n, h, w, c: (n, c, h, w)),
}


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_equals_numpy_transpose(direction, shape, rng):
    compute, axes, input_shape = DIRECTIONS[direction]
    data = te.placeholder(input_shape(*shape), name="data")
    out = compute(data)
    target = host_target()
    func = tvm.build(transposes.schedule([out], strategy.simd_lanes(target)), [data, out], target)
    x = rng.standard_normal(input_shape(*shape)).astype("float32")
    y = tvm.nd.empty([int(d) for d in out.shape])
    func(tvm.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), x.transpose(*axes))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("width, vector", [(64, 16), (56, 14), (7, 7)])
def test_lowered_kernel_is_parallel_over_rows_and_vectorized(direction, width, vector):
    """Exit: vector stores of columns in tiles dividing W; entry: of channels dividing C."""
    compute, _, input_shape = DIRECTIONS[direction]
    shape = (2, 9, width, 64) if direction == "exit" else input_shape(2, 9, 64, width)
    data = te.placeholder(shape, name="data")
    out = compute(data)
    text = str(tvm.lower(transposes.schedule([out], 16), [data, out]))
    assert "T.parallel(18)" in text  # N x H rows
    assert f" + {vector}] = data_1[" in text


def test_layout_pass_swaps_the_entry_and_exit_transforms(rng):
    x = relay.var("x", shape=(1, 8, 10, 10))
    converted = ConvertLayoutNHWC()(_module(x, _conv_relu(rng, x, 8, 24)))
    ops = count_ops(converted)
    assert ops[boundary_ops.ENTRY_OP_NAME] == 1 and ops[boundary_ops.OP_NAME] == 1
    assert ops["layout_transform"] == 0 and count_layout_transforms(converted) == 2
    assert [int(d) for d in converted["main"].ret_type.shape] == [1, 24, 10, 10]


def test_other_layout_transforms_are_left_alone():
    """A blocked layout, a constant, a non-4-D tensor are not boundary transposes."""
    x = relay.var("x", shape=(1, 4, 6, 16))
    mod = _module(
        x,
        relay.Tuple(
            [
                relay.layout_transform(x, "NHWC", "NCHW4c"),
                relay.layout_transform(x, "NCHW", "NHWC"),
                relay.layout_transform(relay.const(np.ones((1, 2, 2, 3), "f")), "NHWC", "NCHW"),
                relay.layout_transform(relay.const(np.ones((1, 2, 2, 3), "f")), "NCHW", "NHWC"),
            ]
        ),
    )
    calls = []
    relay.analysis.post_order_visit(
        mod["main"], lambda n: calls.append(n) if isinstance(n, relay.Call) else None
    )
    found = [boundary_ops.boundary_op(call) for call in calls]
    assert found == [None, boundary_ops.ENTRY_OP_NAME, None, None]


def test_built_graph_runs_the_exit_transpose_and_matches_stock(rng):
    """A net whose input and output are feature maps: tvm_fuse's entry and exit kernels run; the
    result equals stock."""
    x = relay.var("data", shape=(2, 16, 9, 9))
    pooled = relay.nn.max_pool2d(_conv_relu(rng, x, 16, 20), (2, 2))
    mod = _module(x, _conv_relu(rng, pooled, 20, 33))
    inputs = {"data": rng.standard_normal((2, 16, 9, 9)).astype("float32")}
    lib = tvm_fuse.build(mod, {})
    names = [n["name"] for n in json.loads(lib.get_graph_json())["nodes"]]
    assert any("nhwc_to_nchw" in name for name in names)
    assert any("nchw_to_nhwc" in name for name in names)
    testing.assert_close(testing.run(lib, inputs), testing.run(testing.build_stock(mod), inputs))


def _implementation(strategy_fn, target):
    data = te.placeholder((1, 4, 4, 8), name="data")
    out_type = relay.TensorType((1, 8, 4, 4), "float32")
    with target:
        impls = strategy_fn(None, [data], out_type, target).specializations
    return [impl.name for spec in impls for impl in spec.implementations]


@pytest.mark.parametrize(
    "strategy_fn, name",
    [
        (strategy.exit_transpose_strategy, transposes.EXIT_NAME),
        (strategy.entry_transpose_strategy, transposes.ENTRY_NAME),
    ],
)
def test_strategy_picks_the_blocked_kernel_on_cpu_and_injective_elsewhere(strategy_fn, name):
    assert _implementation(strategy_fn, host_target()) == [name]
    generic = name.replace(".x86", ".generic")
    assert _implementation(strategy_fn, tvm.target.Target("cuda")) == [generic]
