"""Deep graphs: the pipeline walks them in C++, never recursing per node in Python."""

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import testing

#: Ten times Python's default recursion limit: a walk recursing per node would fail.
CHAIN = 10_000
#: Twice that limit for the build test (stock's and tvm_fuse's builds of the chain take most of
#: its time, and grow faster than the chain).
BUILT_CHAIN = 2_000


def conv_then_chain(n_ops: int):
    """An NCHW conv followed by ``n_ops`` alternating relu / add(per-channel constant) ops."""
    data = relay.var("data", shape=(1, 4, 6, 6))
    weight = relay.var("weight", shape=(8, 4, 3, 3))
    value = relay.nn.conv2d(data, weight, padding=(1, 1), channels=8, kernel_size=(3, 3))
    shift = relay.const(np.full((1, 8, 1, 1), -0.25, "float32"))
    for i in range(n_ops):
        value = relay.nn.relu(value) if i % 2 == 0 else relay.add(value, shift)
    rng = np.random.default_rng(0)
    params = {"weight": rng.standard_normal((8, 4, 3, 3)).astype("float32")}
    return tvm.IRModule.from_expr(relay.Function([data, weight], value)), params


def test_a_conv_followed_by_a_long_chain_optimizes():
    mod, params = conv_then_chain(CHAIN)
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert spec.ops == ("conv2d", "relu")


@pytest.mark.slow
@pytest.mark.llvm
def test_a_conv_followed_by_a_long_chain_builds_like_stock():
    mod, params = conv_then_chain(BUILT_CHAIN)
    testing.assert_matches_stock(mod, params)
