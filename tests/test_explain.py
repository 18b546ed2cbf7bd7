"""``tvm_fuse.explain``: the reasons it gives for what the pipeline left alone (no LLVM build)."""

import numpy as np
import pytest
import tvm
from tvm import relay

from tvm_fuse import examples, explain, strategy
from tvm_fuse.api import describe, optimize
from tvm_fuse.schedules import loop_nest


def _const(shape, dtype="float32", value=None, rng=None):
    data = np.full(shape, value) if value is not None else rng.uniform(0.5, 1.5, shape)
    return relay.const(data.astype(dtype))


def _bn(x, rng):
    gamma, beta, mean, var = (_const((16,), rng=rng) for _ in range(4))
    return relay.nn.batch_norm(x, gamma, beta, mean, var)[0]


def _module(body, *inputs):
    return tvm.IRModule.from_expr(relay.Function(list(inputs), body))


def _data(dtype="float32"):
    return relay.var("data", shape=(1, 16, 8, 8), dtype=dtype)


def _leftovers(mod, params=None):
    report = explain.explain(mod, params, memory=False)
    return [(item.op, item.reason) for item in report.leftovers]


def test_the_seed_example_leaves_nothing_unfused():
    mod, params = examples.seed_example()
    report = explain.explain(mod, params, memory=False)
    assert [str(spec) for spec in report.kernels] == [
        str(s) for s in describe(optimize(mod, params))
    ]
    # 3x3 stride 2: the direct kernel or the polyphase Winograd, as the target's cost model says
    (spec,) = report.kernels
    kernel = "winograd" if spec.algorithm == "winograd" else "fused"
    assert report.paths == [f"fast x86 kernel (conv2d_nhwc_{kernel}.x86)"]
    assert report.leftovers == []
    assert report.transforms == [
        "NCHW -> NHWC (tvm_fuse.nchw_to_nhwc) [1, 64, 56, 56] of graph input 'data'",
        "NHWC -> NCHW (tvm_fuse.nhwc_to_nchw) [1, 28, 28, 128] of tvm_fuse.conv2d_nhwc_fused",
    ]
    text = str(report)
    assert "op:        conv2d + bias + relu" in text and "unfused (0)" in text


def test_unbound_params_leave_nothing_unfused():
    mod, _ = examples.conv_bn_act(data_shape=(1, 16, 8, 8), channels=16)
    assert _leftovers(mod) == []


def test_constant_zero_variance_keeps_its_batch_norm():
    mod, params = examples.conv_bn_act(data_shape=(1, 16, 8, 8), channels=16, epsilon=0.0)
    params["conv_var"][3] = 0.0
    ((op, reason),) = _leftovers(mod, params)
    assert (op, reason.split(":")[0]) == ("nn.batch_norm", "var + epsilon <= 0 in some channel")


@pytest.mark.parametrize("groups, channels", [(4, 16), (16, 32)])
def test_grouped_convs_are_left_with_their_groups(groups, channels):
    """Grouped convs, and a depthwise one with two filters per channel, stay stock ops."""
    mod, params = examples.conv_bn_act(data_shape=(1, 16, 8, 8), channels=channels, groups=groups)
    assert _leftovers(mod, params) == [
        (
            "nn.conv2d",
            f"groups={groups} with 16 input and {channels} output channels: the fused kernels "
            "take groups=1 or a depthwise conv (groups == input channels == output channels)",
        )
    ]


@pytest.mark.parametrize(
    "channels, path",
    [
        (16, "fast x86 kernel (depthwise_conv2d_nhwc_fused.x86)"),
        (6, "generic NHWC fallback (depthwise conv of 6 channels: the depthwise kernel needs a "
            "multiple of 4)"),
    ],
)
def test_a_depthwise_conv_is_fused_and_names_its_kernel(channels, path):
    mod, params = examples.conv_bn_act(
        data_shape=(1, channels, 8, 8), channels=channels, groups=channels
    )
    report = explain.explain(mod, params, memory=False)
    assert [spec.ops for spec in report.kernels] == [("depthwise_conv2d", "bias", "relu")]
    assert report.paths == [path]
    assert "groups " + str(channels) in str(report.kernels[0])
    assert report.loops == [None] and "loops:" not in str(report)  # no tile model to show


@pytest.mark.parametrize("algorithm", ["auto", "direct"])
def test_each_fast_kernel_shows_its_loop_nest(algorithm):
    """Under its kernel line, the kernel half's plan for the seed conv on this target: the
    direct kernel's register tile and parallel order as its Relay schedule takes them, or the
    Winograd kernel's tile, parallel blocks and where it transforms its input."""
    mod, params = examples.seed_example()
    report = explain.explain(mod, params, memory=False, algorithm=algorithm)
    (spec,), (loops,) = report.kernels, report.loops
    cores = int(report.target.attrs["num-cores"])
    assert loops == loop_nest.describe(spec, cores)
    assert ("parallel blocks of" if spec.algorithm == "winograd" else "parallel over") in loops
    assert f"loops:     {loops}" in str(report)


def test_a_conv_output_with_a_second_consumer_keeps_its_batch_norm(rng):
    data = _data()
    conv = relay.nn.conv2d(data, _const((16, 16, 3, 3), rng=rng), padding=1)
    mod = _module(relay.add(relay.nn.relu(_bn(conv, rng)), conv), data)
    ((op, reason),) = _leftovers(mod)
    assert op == "nn.batch_norm"
    assert reason.startswith("several consumers: the conv2d output feeds 2 ops")


def test_a_batch_norm_of_a_graph_input_has_nothing_to_fold_into(rng):
    data = _data()
    conv = relay.nn.conv2d(_bn(data, rng), _const((16, 16, 3, 3), rng=rng), padding=1)
    assert _leftovers(_module(conv, data)) == [
        ("nn.batch_norm", "its input is graph input 'data', not a conv2d: nothing to fold it into")
    ]


def test_an_int8_conv_is_left_for_its_dtype():
    data = _data("int8")
    conv = relay.nn.conv2d(data, _const((16, 16, 3, 3), "int8", 1), padding=1, out_dtype="int32")
    assert _leftovers(_module(conv, data)) == [
        ("nn.conv2d", "dtype int32/int8: the fused kernel is float32 only")
    ]


def test_used_batch_norm_statistics_are_reported(rng):
    data = _data()
    conv = relay.nn.conv2d(data, _const((16, 16, 3, 3), rng=rng), padding=1)
    gamma, beta, mean, var = (_const((16,), rng=rng) for _ in range(4))
    bn = relay.nn.batch_norm(conv, gamma, beta, mean, var)
    mod = _module(relay.Tuple([bn[0], bn[1]]), data)
    ((op, reason),) = _leftovers(mod)
    assert op == "nn.batch_norm" and "mean/variance outputs are used" in reason


def test_a_layout_the_kernel_does_not_take_is_named():
    conv = relay.var("conv_in", shape=(1, 8, 8, 16))
    weight = relay.var("w", shape=(16, 16, 3, 3))  # OIHW weights with NHWC data
    call = relay.nn.conv2d(conv, weight, padding=1, data_layout="NHWC", kernel_layout="OIHW")
    typed = relay.transform.InferType()(_module(call, conv, weight))["main"].body
    assert explain.conv2d_reason(typed) == (
        "layout NHWC/OIHW: the fused kernel takes NHWC data and HWIO weights (HWOI for a "
        "depthwise conv)"
    )


def _param_bytes(params, suffix):
    return sum(value.nbytes for name, value in params.items() if name.endswith(suffix))


@pytest.mark.parametrize("algorithm", ["direct", "winograd"])
def test_the_weights_section_counts_what_each_module_holds(algorithm, monkeypatch):
    """BN folds into the weight and a bias; Winograd F(2x2) stores 16 points, then the conv's
    own 9 taps for the non-finite fallback: as many bytes as the model's weight."""
    monkeypatch.setattr(
        strategy, "winograd_tile", lambda spec, target, tiles=None: 2 * (algorithm == "winograd")
    )
    ci, co = 16, 32  # Co a whole number of vectors at 8 and 16 lanes: no padding
    mod, params = examples.conv_bn_act(data_shape=(1, ci, 8, 8), channels=co)
    weight = _param_bytes(params, "_weight")
    assert weight == 3 * 3 * ci * co * 4
    report = explain.explain(mod, params, memory=False)
    assert [spec.algorithm for spec in report.kernels] == [algorithm]
    points = 16 if algorithm == "winograd" else 9
    fused = weight * (points + 9 * (algorithm == "winograd")) // 9 + co * 4  # weight and bias
    model = sum(value.nbytes for value in params.values())
    assert model == weight + 4 * co * 4  # the weight and the four BN vectors
    lines = report.weights.splitlines()
    assert lines[1].split() == ["constants", f"{model:,}", f"{fused:,}"]
    if algorithm == "winograd":
        assert lines[2].split() == ["of", "which", "fallback", f"{weight:,}"]
    else:
        assert "fallback" not in report.weights
    assert "== weights" in str(report)


def test_a_constant_used_twice_counts_once():
    data = relay.var("data", shape=(4,))
    shared = relay.const(np.ones(4, "float32"))
    mod = _module(relay.add(relay.add(data, shared), shared), data)
    assert explain.constant_bytes(mod) == 16
