"""UnpackBatchNorm: a BatchNorm that does not follow a conv leaves the pipeline as ``x * scale +
shift`` with constants computed in NumPy, and computes what stock TVM's build of the BN does,
NaN and Inf included; a BN whose statistics are not constants stays for ``relay.build``."""

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import testing
from tvm_fuse.ir_utils import count_ops

SHAPE = (1, 8, 6, 6)


def _conv_relu_bn(center=True, scale=True):
    """conv -> relu -> BN: the BN cannot fold into the conv (the relu is between them)."""
    data = relay.var("data", shape=SHAPE)
    weight = relay.var("weight", shape=(8, 8, 3, 3))
    stats = [relay.var(n, shape=(8,)) for n in ("gamma", "beta", "mean", "var")]
    conv = relay.nn.relu(relay.nn.conv2d(data, weight, padding=(1, 1), channels=8, kernel_size=3))
    bn = relay.nn.batch_norm(conv, *stats, epsilon=1e-3, center=center, scale=scale)[0]
    return tvm.IRModule.from_expr(relay.Function([data, weight, *stats], bn))


def _params(rng, var):
    return {
        "weight": rng.standard_normal((8, 8, 3, 3)).astype("float32"),
        "gamma": rng.standard_normal(8).astype("float32"),
        "beta": rng.standard_normal(8).astype("float32"),
        "mean": rng.standard_normal(8).astype("float32"),
        "var": var.astype("float32"),
    }


@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False)])
def test_unfoldable_bn_leaves_the_pipeline_unpacked_and_matches_stock(center, scale):
    rng = np.random.default_rng(0)
    mod, params = _conv_relu_bn(center, scale), _params(rng, rng.uniform(0.5, 2.0, 8))
    optimized = tvm_fuse.optimize(mod, params)
    assert "nn.batch_norm" not in count_ops(optimized)
    assert count_ops(optimized)["multiply"] == 1 and count_ops(optimized)["add"] == 1
    testing.assert_matches_stock(mod, params)


def test_bn_with_zero_negative_nan_and_inf_variance_computes_what_stock_does():
    """var + eps of 0, < 0, NaN and Inf: the scale is Inf, NaN, NaN and 0 in both builds."""
    rng = np.random.default_rng(1)
    var = np.array([-1e-3, -1.0, np.nan, np.inf, 1.0, 2.0, 0.5, 1.5])
    mod, params = _conv_relu_bn(), _params(rng, var)
    data = rng.standard_normal(SHAPE).astype("float32")
    data[0, :, 0, 0] = 0.0  # 0 x Inf is NaN in both
    inputs = {"data": data}
    (got,) = testing.run(tvm_fuse.build(mod, params), inputs)
    (ref,) = testing.run(testing.build_stock(mod, params), inputs)
    assert np.isnan(got).any() and np.isinf(got).any()
    testing.assert_same_including_specials(got, ref)


def test_bn_with_statistics_left_as_inputs_stays_for_relay_build():
    rng = np.random.default_rng(2)
    mod, params = _conv_relu_bn(), _params(rng, rng.uniform(0.5, 2.0, 8))
    with tvm.transform.PassContext(opt_level=3):
        optimized = tvm_fuse.pipeline()(mod)  # unbound: the statistics are inputs
    assert count_ops(optimized)["nn.batch_norm"] == 1
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(optimized, target=tvm_fuse.host_target(), params=params)
    inputs = {"data": rng.standard_normal(SHAPE).astype("float32")}
    ref = testing.run(testing.build_stock(mod, params), inputs)
    testing.assert_close(testing.run(lib, inputs), ref)
