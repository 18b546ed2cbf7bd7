"""Wrong results: the fused epilogue on NaN and ±Inf (direct, depthwise and Winograd kernels),
bad tuning logs, n_trial < 1.

A fused kernel replaces ``bias_add -> add -> activation``; on NaN and ±Inf it must give exactly
what stock TVM's build of the unfused graph gives (e.g. stock ``clip(NaN, 0, 6)`` is 6: it
computes ``max(min(x, 6), 0)``), on both implementations of the fused op.
"""

import json

import numpy as np
import pytest
import tvm
from test_tune import write_log
from tvm import relay

import tvm_fuse
from tvm_fuse import strategy, testing
from tvm_fuse.examples import small_layer
from tvm_fuse.errors import UserError
from tvm_fuse.tuning import RecordsError, check_records, extract_tasks

ACTIVATIONS = {
    "none": lambda y: y,
    "relu": relay.nn.relu,
    "relu6": lambda y: relay.clip(y, 0.0, 6.0),
    "leaky_relu": lambda y: relay.nn.leaky_relu(y, 0.2),
    "sigmoid": relay.sigmoid,
    "silu": lambda y: relay.multiply(y, relay.sigmoid(y)),
}

#: (data shape, channels): the fast kernel, and an output too small for it (the generic one).
PATHS = {"fast": ((1, 8, 8, 8), 16), "generic": ((1, 8, 5, 5), 4)}


def _graph(activation, data_shape, channels, kernel, groups=1):
    data = relay.var("data", shape=data_shape)
    residual_shape = (1, channels, *data_shape[2:])
    residual = relay.var("residual", shape=residual_shape)
    weight = relay.var("weight", shape=(channels, data_shape[1] // groups, kernel, kernel))
    bias = relay.var("bias", shape=(channels,))
    y = relay.nn.conv2d(
        data,
        weight,
        padding=kernel // 2,
        channels=channels,
        kernel_size=(kernel, kernel),
        groups=groups,
    )
    y = relay.add(relay.nn.bias_add(y, bias), residual)
    body = ACTIVATIONS[activation](y)
    mod = tvm.IRModule.from_expr(relay.Function([data, residual, weight, bias], body))
    return relay.transform.InferType()(mod)


def _specials(rng, shape, spots):
    """Random values with NaN, +Inf and -Inf at ``spots`` (indices), in that order."""
    values = rng.standard_normal(shape).astype("float32")
    for spot, special in zip(spots, (np.nan, np.inf, -np.inf)):
        values[spot] = special
    return values


SPOTS = {"weight": [(1, 0, 0, 0), (2, 1, 0, 0)]}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_epilogue_on_nan_and_inf_matches_stock(activation, path):
    data_shape, channels = PATHS[path]
    kernel = 3
    mod = _graph(activation, data_shape, channels, kernel)
    rng = np.random.default_rng(0)
    last, mid = data_shape[2] - 1, data_shape[2] // 2
    params = {  # output channel 1 all NaN, channel 2 mostly ±Inf
        "weight": _specials(rng, (channels, data_shape[1], kernel, kernel), SPOTS["weight"]),
        "bias": rng.standard_normal(channels).astype("float32"),
    }
    inputs = {  # specials at the corners and the middle, so most outputs stay finite
        "data": _specials(rng, data_shape, [(0, 0, 0, 0), (0, 1, 0, last), (0, 2, last, 0)]),
        "residual": _specials(
            rng,
            (1, channels, *data_shape[2:]),
            [(0, 3, last, last), (0, 0, mid, mid), (0, 3, mid, mid)],
        ),
    }
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert spec.activation == activation and "add" in spec.ops
    fast = strategy.fast_path_refusal(spec, tvm_fuse.host_target()) is None
    assert fast == (path == "fast")
    (ref,) = testing.run(testing.build_stock(mod, params), inputs)
    (got,) = testing.run(tvm_fuse.build(mod, params), inputs)
    testing.assert_same_including_specials(got, ref)
    if activation == "none":  # the accumulators the activations see hold every special
        assert np.isnan(ref).any() and np.isposinf(ref).any() and np.isneginf(ref).any()


@pytest.mark.parametrize("weight_specials", [True, False], ids=["weight", "finite_weight"])
@pytest.mark.parametrize("activation", ["none", "relu", "relu6"])
def test_depthwise_kernel_on_nan_and_inf_matches_stock(activation, weight_specials):
    """The depthwise kernel: channel 1's filter NaN, channel 2's +Inf in one tap (or a finite
    weight, which the graph half marks finite and the kernel then reads its input in place),
    specials in the data and the residual; the output as stock TVM's unfused depthwise conv
    gives it."""
    data_shape, channels = (1, 16, 8, 8), 16
    mod = _graph(activation, data_shape, channels, 3, groups=channels)
    rng = np.random.default_rng(0)
    last, mid = data_shape[2] - 1, data_shape[2] // 2
    weight_spots = [(1, 0, 0, 0), (2, 0, 1, 1)] if weight_specials else []
    params = {
        "weight": _specials(rng, (channels, 1, 3, 3), weight_spots),
        "bias": rng.standard_normal(channels).astype("float32"),
    }
    inputs = {
        "data": _specials(rng, data_shape, [(0, 0, 0, 0), (0, 3, 0, last), (0, 4, last, 0)]),
        "residual": _specials(
            rng, data_shape, [(0, 5, last, last), (0, 0, mid, mid), (0, 6, mid, mid)]
        ),
    }
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert spec.depthwise and spec.activation == activation and "add" in spec.ops
    assert spec.finite_weight != weight_specials
    assert strategy.fast_path_refusal(spec, tvm_fuse.host_target()) is None
    (ref,) = testing.run(testing.build_stock(mod, params), inputs)
    (got,) = testing.run(tvm_fuse.build(mod, params), inputs)
    testing.assert_same_including_specials(got, ref)
    if activation == "none":
        assert np.isnan(ref).any() and np.isposinf(ref).any() and np.isneginf(ref).any()


#: NHWC data shape, Co, stride: convs the cost model gives Winograd on every machine (F(4x4) at
#: stride 1; at stride 2 F(2x2) on AVX2 and Zen 4, F(4x4) on Zen 5 and Intel's AVX-512).
WINOGRAD_CONVS = {"stride1": ((1, 16, 16, 32), 32, 1), "stride2": ((1, 112, 112, 32), 64, 2)}


@pytest.mark.parametrize("conv", WINOGRAD_CONVS)
@pytest.mark.parametrize("activation", ["none", "relu"])
def test_winograd_kernel_on_nan_and_inf_matches_stock(activation, conv):
    """A Winograd conv + bias + residual + activation with NaN, +Inf and -Inf in the data (one
    +Inf on a zero tap) and the residual: NaN and ±Inf where stock TVM's direct conv gives them,
    not NaN across the Winograd tiles they fall in."""
    data_shape, channels, stride = WINOGRAD_CONVS[conv]
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 3, data_shape[3], channels)).astype("float32") / 17
    weight[1, 1, 5, 2] = 0.0
    x = relay.var("x", shape=data_shape)
    y = relay.nn.conv2d(
        x,
        relay.const(weight),
        strides=(stride,) * 2,
        padding=(1, 1),
        channels=channels,
        kernel_size=(3, 3),
        data_layout="NHWC",
        kernel_layout="HWIO",
    )
    out_shape = (1, data_shape[1] // stride, data_shape[2] // stride, channels)
    residual = relay.var("residual", shape=out_shape)
    bias = relay.const(rng.standard_normal(channels).astype("float32"))
    y = ACTIVATIONS[activation](relay.add(relay.nn.bias_add(y, bias, axis=3), residual))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, residual], y)))
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, {}, tvm_fuse.host_target()))
    assert spec.algorithm == "winograd" and (spec.winograd_tile == 4 or stride == 2)
    inputs = {
        "x": _specials(rng, data_shape, [(0, 5, 6, 3), (0, 10, 10, 5), (0, 8, 4, 0)]),
        "residual": _specials(rng, out_shape, [(0, 3, 3, 1), (0, 7, 2, 4), (0, 1, 6, 0)]),
    }
    (ref,) = testing.run(testing.build_stock(mod), inputs)
    (got,) = testing.run(tvm_fuse.build(mod, target=tvm_fuse.host_target()), inputs)
    testing.assert_same_including_specials(got, ref, rtol=1e-4)
    if activation == "none":
        assert np.isnan(ref).any() and np.isposinf(ref).any() and np.isneginf(ref).any()


# -- tuning logs: every knob value checked against the template --------------------------------
@pytest.fixture(scope="module")
def layer():
    mod, params = small_layer()
    (task,) = extract_tasks(mod, params)
    return mod, params, task


def _set_knob(line, name, value):
    row = json.loads(line)
    row["config"]["entity"] = [
        [knob, kind, value if knob == name else old] for knob, kind, old in row["config"]["entity"]
    ]
    return json.dumps(row) + "\n"


@pytest.mark.parametrize("name, value", [("owb", 0), ("tile_ic", [-1, 3]), ("flat", "x")])
def test_a_knob_value_outside_the_config_space_refuses_the_whole_log(tmp_path, layer, name, value):
    mod, params, task = layer
    lines = open(write_log(tmp_path / "good.log", task, [0, 1]), encoding="utf-8").readlines()
    bad = tmp_path / "bad.log"
    bad.write_text(lines[0] + _set_knob(lines[1], name, value), encoding="utf-8")
    with pytest.raises(RecordsError, match=f"line 2 sets {name}="):
        check_records(bad)
    with pytest.raises(RecordsError, match=f"line 2 sets {name}="):
        tvm_fuse.build(mod, params, tuning_records=str(bad))


@pytest.mark.parametrize("n_trial", [0, -3])
def test_tune_refuses_fewer_than_one_trial(tmp_path, layer, n_trial):
    mod, params, _ = layer
    with pytest.raises(UserError, match=f"n_trial={n_trial}"):
        tvm_fuse.tune(mod, params, log_file=tmp_path / "t.log", n_trial=n_trial)
    assert not (tmp_path / "t.log").exists()
