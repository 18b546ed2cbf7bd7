"""The boundary transposes ``tvm_fuse.nchw_to_nhwc`` and ``tvm_fuse.nhwc_to_nchw``: what the layout
pass swaps in, and their kernels."""

import json
import re

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
# Shapes (NHWC) the in-register kernel takes: blocks of 16, 8 and 4 values, rows that end in a
# partial block (exit: W = 56 = 3 x 16 + 8, 9 = 8 + 1, and split by channel groups, H*W = 49 =
# 3 x 16 + 1, 15 = 8 + 7; entry: C = 20 = 16 + 4, 9), batch 2.
BLOCK_SHAPES = {
    "exit": [(1, 4, 32, 64), (2, 3, 56, 24), (1, 7, 7, 512), (2, 5, 20, 36), (1, 2, 9, 16),
             (2, 3, 5, 128), (1, 28, 28, 128)],
    "entry": [(1, 4, 32, 64), (2, 3, 56, 24), (2, 5, 20, 36), (1, 3, 16, 20), (1, 2, 16, 9)],
}


#: (compute, the NumPy transpose it computes, the input's shape from an NHWC one, the name)
DIRECTIONS = {
    "exit": (transposes.exit_compute, (0, 3, 1, 2), lambda n, h, w, c: (n, h, w, c)),
    "entry": (transposes.entry_compute, (0, 2, 3, 1), lambda n, h, w, c: (n, c, h, w)),
}
NAMES = {"exit": "nhwc_to_nchw", "entry": "nchw_to_nhwc"}


def _run_cpu_kernel(direction, shape, lanes, rng):
    """The CPU kernel of the transpose on a random input of the NHWC ``shape``: (its output
    tensor, the result, the input)."""
    _, axes, input_shape = DIRECTIONS[direction]
    data = te.placeholder(input_shape(*shape), name="data")
    out = transposes.cpu_compute(NAMES[direction], data, lanes)
    func = tvm.build(transposes.schedule([out], lanes), [data, out], host_target())
    x = rng.standard_normal(input_shape(*shape)).astype("float32")
    y = tvm.nd.empty([int(d) for d in out.shape])
    func(tvm.nd.array(x), y)
    return out, y.numpy(), x.transpose(*axes)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_equals_numpy_transpose(direction, shape, rng):
    _, got, expected = _run_cpu_kernel(direction, shape, strategy.simd_lanes(host_target()), rng)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("lanes", [16, 8, 4])
@pytest.mark.parametrize(
    "direction, shape",
    [(d, shape) for d, shapes in BLOCK_SHAPES.items() for shape in shapes],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v,
)
def test_register_kernel_equals_numpy_transpose(direction, shape, lanes, rng):
    """Blocks of up to ``lanes`` values (LLVM splits vectors wider than the CPU's)."""
    out, got, expected = _run_cpu_kernel(direction, shape, lanes, rng)
    assert isinstance(out.op, te.ExternOp)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "name, shape, lanes, block",
    [
        ("nhwc_to_nchw", (1, 112, 112, 64), 16, 16),
        ("nhwc_to_nchw", (1, 112, 112, 64), 8, 8),
        ("nhwc_to_nchw", (1, 7, 7, 48), 16, 4),  # no more than the rows
        ("nhwc_to_nchw", (1, 7, 7, 512), 16, 16),  # split by channels: rows H*W = 49
        ("nhwc_to_nchw", (1, 56, 56, 24), 16, 8),  # a divisor of the columns
        ("nhwc_to_nchw", (2, 5, 13, 17), 16, 0),  # odd columns: tiled
        ("nchw_to_nhwc", (1, 3, 224, 224), 16, 0),  # 3 rows: tiled
        ("nchw_to_nhwc", (1, 64, 56, 56), 16, 8),
    ],
)
def test_block_size(name, shape, lanes, block):
    plane = transposes.TRANSPOSES[name].plane(shape)
    assert transposes.block_size(plane, lanes) == block


@pytest.mark.parametrize(
    "shape, col_group, tasks",
    [
        ((1, 7, 7, 2048), 32, 64),  # 2048 / 32 channel groups, each writing 32 planes of 49
        ((2, 3, 5, 128), 32, 8),  # batch 2 x 4 groups
        ((1, 28, 28, 128), 16, 8),  # 4 groups of 32 are too few tasks: groups of 16
        ((1, 56, 56, 64), 0, 56),  # too few channels: split by rows (H)
        ((1, 7, 7, 40), 0, 7),  # no group divides C
    ],
)
def test_exit_splits_small_maps_by_channel_groups(shape, col_group, tasks):
    """Where channel groups make at least ``MIN_EXIT_TASKS`` tasks, the exit's parallel loop runs
    over them, each task's plane rows H*W; else over (N, H)."""
    n, h, w, c = shape
    plane = transposes.exit_plane(shape)
    assert plane.col_group == col_group
    assert (plane.height, plane.rows) == ((1, h * w) if col_group else (h, w))
    data = te.placeholder(shape, name="data")
    out = transposes.cpu_compute("nhwc_to_nchw", data, 16)
    text = str(tvm.lower(transposes.schedule([out], 16), [data, out]))
    assert re.findall(r"T\.parallel\((\d+)\)", text) == [str(tasks)]


@pytest.mark.parametrize("block", [4, 8, 16])
def test_register_kernel_stages_transpose_a_block(block):
    """Followed on labels (row, column), the shuffle stages leave column c in vector c; the two
    unpack stages take each output lane from the same 128-bit lane of an input."""
    from tvm_fuse.schedules import register_transpose

    vectors = [[(r, c) for c in range(block)] for r in range(block)]
    stages = register_transpose._stages(block)  # pylint: disable=protected-access
    assert len(stages) == block.bit_length() - 1
    for step, shuffles in enumerate(stages):
        assert sorted(out for out, *_ in shuffles) == list(range(block))
        if step < 2:
            lanes = [(m % block // 4, i // 4) for *_, mask in shuffles for i, m in enumerate(mask)]
            assert all(source == out for source, out in lanes)
        vectors = [[(vectors[a] + vectors[b])[m] for m in mask] for _, a, b, mask in
                   sorted(shuffles)]
    assert vectors == [[(r, c) for r in range(block)] for c in range(block)]


def test_register_kernel_shuffles_whole_vectors():
    """Vector loads, Shuffles and vector stores of 16 lanes; ragged, int32 and symbolic shapes
    stay tiled."""
    data = te.placeholder((1, 4, 32, 64), name="data")
    out = transposes.cpu_compute("nhwc_to_nchw", data, 16)
    text = str(tvm.lower(transposes.schedule([out], 16), [data, out]))
    assert "T.parallel(4)" in text and text.count("T.Shuffle") == 64  # 4 stages of 16
    assert len(re.findall(r"nhwc_to_nchw_flat\[[^]]*\+ 16\] = stage", text)) == 16
    ragged = te.placeholder((2, 5, 13, 17), name="data")
    assert not isinstance(transposes.cpu_compute("nhwc_to_nchw", ragged, 16).op, te.ExternOp)
    as_int = te.placeholder((1, 4, 32, 64), "int32", name="data")
    assert not isinstance(transposes.cpu_compute("nhwc_to_nchw", as_int, 16).op, te.ExternOp)
    symbolic = te.placeholder((te.var("n"), 4, 32, 64), name="data")
    assert not isinstance(transposes.cpu_compute("nhwc_to_nchw", symbolic, 16).op, te.ExternOp)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("width, vector", [(64, 16), (56, 14), (7, 7)])
def test_lowered_kernel_is_parallel_over_rows_and_vectorized(direction, width, vector):
    """The tiled schedule. Exit: vector stores of columns in tiles dividing W; entry: of
    channels dividing C."""
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


@pytest.mark.parametrize(
    "shape, channels",
    [((2, 16, 9, 9), (20, 33)), ((1, 16, 12, 12), (20, 32))],
    ids=["tiled", "in-register"],
)
def test_built_graph_runs_the_exit_transpose_and_matches_stock(shape, channels, rng):
    """A net whose input and output are feature maps: tvm_fuse's entry and exit kernels run; the
    result equals stock. 33 output channels take the tiled exit, 32 the in-register one."""
    x = relay.var("data", shape=shape)
    pooled = relay.nn.max_pool2d(_conv_relu(rng, x, shape[1], channels[0]), (2, 2))
    mod = _module(x, _conv_relu(rng, pooled, channels[0], channels[1]))
    inputs = {"data": rng.standard_normal(shape).astype("float32")}
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
