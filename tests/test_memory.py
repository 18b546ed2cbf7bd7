"""Liveness and plans of Relay modules (no LLVM build: FuseOps and FoldConstant only)."""

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import examples, memory
from tvm_fuse.pipeline import bind_params, passes

F32 = 4


def _mod(outputs, *inputs):
    body = outputs if not isinstance(outputs, (list, tuple)) else relay.Tuple(list(outputs))
    return tvm.IRModule.from_expr(relay.Function(list(inputs), body))


def _conv(x, channels, name, kernel=3):
    cin = int(_type_of(x).shape[1])
    w = relay.var(name, shape=(channels, cin, kernel, kernel))
    return relay.nn.conv2d(x, w, padding=kernel // 2, channels=channels, kernel_size=kernel)


def test_elementwise_chain_ping_pongs_between_two_buffers():
    x = relay.var("x", shape=(1, 16, 32, 32))
    y = x
    for op in [relay.nn.relu, relay.exp, relay.sigmoid, relay.tanh, relay.negative, relay.abs]:
        y = op(y)
    result = memory.plan(_mod(y, x), fuse_opt_level=0)
    size = 16 * 32 * 32 * F32
    assert len(result.steps) == 6
    assert [b.live_range for b in result.buffers] == [(i, i + 1) for i in range(5)] + [(5, 5)]
    assert result.peak_bytes == result.lower_bound_bytes == 2 * size
    assert result.naive_bytes == 6 * size
    assert result.buffers[-1].is_output


def _random_dag(rng, n_ops):
    """Element-wise ops, adds (with broadcasting) and convs over a few shapes."""
    x = relay.var("x", shape=(1, 8, 16, 16))
    nodes, weights = [x], []
    for i in range(n_ops):
        kind = rng.choice(["unary", "add", "conv", "pool"])
        a = nodes[int(rng.integers(len(nodes)))]
        shape = tuple(int(d) for d in _type_of(a).shape)
        if kind == "unary":
            y = [relay.nn.relu, relay.exp, relay.sigmoid][int(rng.integers(3))](a)
        elif kind == "add":
            same = [n for n in nodes if tuple(int(d) for d in _type_of(n).shape) == shape]
            y = relay.add(a, same[int(rng.integers(len(same)))])
        elif kind == "conv":
            w = relay.var(f"w{i}", shape=(int(rng.choice([4, 8, 16])), shape[1], 3, 3))
            weights.append(w)
            y = relay.nn.conv2d(a, w, padding=1)
        else:
            y = relay.nn.max_pool2d(a, pool_size=2, strides=2) if shape[2] > 2 else relay.exp(a)
        nodes.append(y)
    outs = [nodes[-1]] + [nodes[int(rng.integers(1, len(nodes)))]]
    return _mod(outs, x, *weights)


def _type_of(expr):
    free = relay.analysis.free_vars(expr)
    return relay.transform.InferType()(_mod(expr, *free))["main"].ret_type


def _live_bytes_overlap(result):
    """Independent check: at every step, the byte ranges of the live buffers are disjoint."""
    for step in range(len(result.steps)):
        spans = sorted(
            (b.offset, b.offset + b.size) for b in result.buffers if b.start <= step <= b.end
        )
        if any(hi > lo for (_, hi), (lo, _) in zip(spans, spans[1:])):
            return True
    return False


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("fuse_opt_level", [0, 2])
def test_random_dags_have_no_overlap_and_respect_the_lower_bound(seed, fuse_opt_level):
    mod = _random_dag(np.random.default_rng(seed), n_ops=12)
    result = memory.plan(mod, fuse_opt_level=fuse_opt_level)
    result.validate()
    assert not _live_bytes_overlap(result)
    assert (
        result.lower_bound_bytes
        <= result.peak_bytes
        <= result.naive_bytes + 64 * len(result.buffers)
    )
    assert all(b.start <= b.end < len(result.steps) for b in result.buffers)


def test_validate_catches_an_overlap():
    x = relay.var("x", shape=(1, 16, 8, 8))
    result = memory.plan(_mod(relay.exp(relay.nn.relu(x)), x), fuse_opt_level=0)
    first, second = result.buffers
    broken = type(result)(
        **{
            **result.__dict__,
            "buffers": (first, type(second)(**{**second.__dict__, "offset": first.offset})),
        }
    )
    with pytest.raises(memory.OverlapError, match="overlaps"):
        broken.validate()


@pytest.fixture(scope="module")
def seed_folded():
    mod, params = examples.seed_example()
    return memory.relay_kernels.folded_module(mod, params)


def test_stock_fusion_removes_exactly_conv_out_and_bn_out(seed_folded):
    # The seed's conv -> BN -> ReLU with params bound: BN's scale is folded into the conv weight
    # (FoldScaleAxis), its shift is one add. Unfused: conv_out, bn_out (the add), out.
    unfused = memory.plan(seed_folded, fuse_opt_level=0)
    fused = memory.plan(seed_folded)
    size = 128 * 28 * 28 * F32
    assert [(b.name.split("#")[0], b.shape) for b in unfused.buffers if not b.is_output] == [
        ("fused_nn_conv2d", (1, 128, 28, 28)),
        ("fused_add", (1, 128, 28, 28)),
    ]
    assert fused.num_intermediates == 0
    # Comparable: the output (same shape in both) and nothing else; inputs/params are in neither.
    [out_unfused] = [b for b in unfused.buffers if b.is_output]
    [out_fused] = [b for b in fused.buffers if b.is_output]
    assert out_unfused.shape == out_fused.shape == (1, 128, 28, 28)
    assert unfused.naive_bytes - fused.naive_bytes == 2 * size
    assert (unfused.peak_bytes, fused.peak_bytes) == (2 * size, size)
    # ... and the fused kernel says so itself: it keeps those two inside
    kept = memory.fused_away(seed_folded)
    assert [(t.name, t.shape) for t in kept] == [
        ("nn.conv2d", (1, 128, 28, 28)),
        ("add", (1, 128, 28, 28)),
    ]


def test_tvm_fuse_fusion_removes_exactly_conv_out_and_bn_out():
    # The same, with the tvm_fuse pipeline with and without its fusion pass; every op its own
    # kernel otherwise, so that only FuseConvBiasAct differs.
    mod, params = examples.seed_example()
    without = [p for p in passes() if p.info.name != "tvm_fuse.FuseConvBiasAct"]
    assert len(without) == len(passes()) - 1
    bound = bind_params(mod, params)
    with tvm.transform.PassContext(opt_level=3):
        unfused_mod = tvm.transform.Sequential([relay.transform.InferType(), *without])(bound)
    unfused = memory.plan(unfused_mod, fuse_opt_level=0)
    fused = memory.plan(tvm_fuse.optimize(mod, params), fuse_opt_level=0)

    def tensors(result):
        return sorted((b.shape, b.is_output) for b in result.buffers)

    gone = list(tensors(unfused))
    for t in tensors(fused):
        gone.remove(t)
    assert gone == [((1, 28, 28, 128), False)] * 2  # NHWC conv_out and bn_out (the bias add)
    assert unfused.naive_bytes - fused.naive_bytes == 2 * 128 * 28 * 28 * F32
    kept = memory.fused_away(tvm_fuse.optimize(mod, params))
    assert [t.name.split(":")[1] for t in kept] == ["conv2d", "bias"]
    assert [t.shape for t in kept] == [(1, 28, 28, 128)] * 2


@pytest.mark.parametrize(
    "fuse_opt_level, branch_range, kernels",
    [(0, (1, 5), 7), (2, (0, 2), 3)],  # unfused: relu(conv1) at step 1, the add at step 5
)
def test_residual_branch_stays_live_until_the_add(fuse_opt_level, branch_range, kernels):
    x = relay.var("x", shape=(1, 16, 28, 28))
    a = relay.nn.relu(_conv(x, 16, "w1"))
    b = relay.nn.relu(_conv(a, 16, "w2"))
    c = relay.nn.relu(relay.add(_conv(b, 16, "w3"), a))
    result = memory.plan(_mod(c, *relay.analysis.free_vars(c)), fuse_opt_level=fuse_opt_level)
    assert len(result.steps) == kernels
    [add_step] = [i for i, name in enumerate(result.steps) if "add" in name]
    branch = next(
        buf for buf in result.buffers if buf.name.endswith("relu#" + str(branch_range[0]))
    )
    assert branch.live_range == branch_range and branch.end == add_step
    for other in result.buffers:  # nothing written while the branch waits may take its bytes
        if other is not branch and branch.start < other.start <= branch.end:
            assert (
                other.offset >= branch.offset + branch.size
                or branch.offset >= other.offset + other.size
            )


def test_reshape_aliases_and_tuples_regroup():
    x = relay.var("x", shape=(1, 8, 4, 4))
    a = relay.nn.relu(x)
    parts = relay.split(a, 2, axis=1)
    flat = relay.reshape(parts[1], (1, -1))  # reshape-only: an alias of parts[1]
    y = relay.concatenate(
        [relay.exp(parts[0]), relay.reshape(relay.sigmoid(flat), (1, 4, 4, 4))], 1
    )
    live = memory.liveness(_mod(y, x), fuse_opt_level=0)
    assert not any("reshape" in s for s in live.steps)  # reshapes are no kernels
    split = [t for t in live.tensors if "split" in t.name]
    assert [t.shape for t in split] == [(1, 4, 4, 4)] * 2
    sigmoid_step = next(i for i, s in enumerate(live.steps) if s.endswith("sigmoid"))
    assert split[1].end == sigmoid_step  # read through the reshape alias


def test_graph_inputs_params_and_constants_are_not_buffers():
    x = relay.var("x", shape=(1, 4))
    w = relay.var("w", shape=(4,))
    y = relay.add(relay.multiply(x, w), relay.const(np.ones(4, "float32")))
    params = {"w": np.full(4, 2.0, "float32")}
    result = memory.plan(_mod(y, x, w), params, fuse_opt_level=0)
    assert [b.shape for b in result.buffers] == [(1, 4), (1, 4)]
    assert [b.is_output for b in result.buffers] == [False, True]


def test_unsupported_main_is_a_clear_error():
    x = relay.var("x", shape=(2,))
    cond = relay.var("c", shape=(), dtype="bool")
    mod = _mod(relay.If(cond, relay.exp(x), relay.negative(x)), x, cond)
    with pytest.raises(ValueError, match="If in 'main' is not supported"):
        memory.plan(mod)


def test_unknown_params_are_a_clear_error():
    x = relay.var("x", shape=(2,))
    with pytest.raises(ValueError, match=r"params \['nope'\] are not inputs"):
        memory.plan(_mod(relay.exp(x), x), {"nope": np.zeros(2, "float32")})


def test_str_has_summary_and_table(seed_folded):
    text = str(memory.plan(seed_folded, fuse_opt_level=0))
    assert "peak" in text and "lower bound" in text and "naive" in text
    assert "fused_nn_conv2d#0" in text and "1x128x28x28 (out)" in text
