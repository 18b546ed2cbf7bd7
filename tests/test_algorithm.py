"""The graph half's algorithm choice: which fused convs run as Winograd, and the built result.

ChooseAlgorithm asks the kernel half's cost model per conv; these tests pin its decisions on
convs that must not take Winograd (stride 2 on a small map, dilation 2, 1x1, too few channels, a
1x1 map, groups) and on ones that must (stride 1, and stride 2 on a large map), that
``algorithm="direct"`` and ``precision="high"`` reach the choice, and that built Winograd
models (stride 1 and 2) match stock TVM with no weight transform left to run.
"""

import json

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import strategy, testing
from tvm_fuse.passes.algorithm import ChooseAlgorithm
from tvm_fuse.schedules import winograd_weights as weights

# name -> (input NHWC shape, HWIO weight shape, strides, dilation, padding, groups)
CONVS = {
    "winograd_3x3_s1": ((1, 28, 28, 64), (3, 3, 64, 64), 1, 1, 1, 1),
    "winograd_3x3_s2": ((1, 56, 56, 128), (3, 3, 128, 128), 2, 1, 1, 1),
    "stride2_small_map": ((1, 14, 14, 64), (3, 3, 64, 64), 2, 1, 1, 1),  # 7x7 out
    "dilation2": ((1, 28, 28, 64), (3, 3, 64, 64), 1, 2, 2, 1),
    "pointwise": ((1, 28, 28, 64), (1, 1, 64, 64), 1, 1, 0, 1),
    "tiny_ci": ((1, 28, 28, 3), (3, 3, 3, 64), 1, 1, 1, 1),
    "map_1x1": ((1, 1, 1, 256), (3, 3, 256, 256), 1, 1, 1, 1),
    "groups2": ((1, 28, 28, 64), (3, 3, 32, 64), 1, 1, 1, 2),
}


def convs_module(names, rng):
    """One NHWC module with a conv + ReLU per name, each on its own input; the params."""
    inputs, outputs, params = [], [], {}
    for name in names:
        data_shape, weight_shape, stride, dilation, pad, groups = CONVS[name]
        data = relay.var(f"x_{name}", shape=data_shape)
        params[f"w_{name}"] = rng.standard_normal(weight_shape).astype("float32") / 24
        weight = relay.var(f"w_{name}", shape=weight_shape)
        conv = relay.nn.conv2d(
            data,
            weight,
            strides=(stride,) * 2,
            dilation=(dilation,) * 2,
            padding=(pad,) * 2,
            groups=groups,
            channels=weight_shape[3],
            kernel_size=weight_shape[:2],
            data_layout="NHWC",
            kernel_layout="HWIO",
        )
        inputs += [data, weight]
        outputs.append(relay.nn.relu(conv))
    body = outputs[0] if len(outputs) == 1 else relay.Tuple(outputs)
    return tvm.IRModule.from_expr(relay.Function(inputs, body)), params


def chosen(mod, params, **options):
    """(algorithm, m) of every fused kernel of the optimized module, in order."""
    optimized = tvm_fuse.optimize(mod, params, tvm_fuse.host_target(), **options)
    return [(s.algorithm, s.winograd_tile) for s in tvm_fuse.describe(optimized)]


def test_winograd_only_where_it_applies_and_pays(rng):
    names = list(CONVS)
    mod, params = convs_module(names, rng)
    choices = chosen(mod, params)
    fused = [n for n in names if n != "groups2"]  # a grouped conv stays a stock op
    assert len(choices) == len(fused)
    assert dict(zip(fused, choices)) == {
        "winograd_3x3_s1": ("winograd", 4),
        "winograd_3x3_s2": ("winograd", 2),  # stride 2: F(2x2) wherever it pays
        **{name: ("direct", 0) for name in fused[2:]},
    }


@pytest.mark.parametrize(
    "options, want",
    [({"algorithm": "direct"}, ("direct", 0)), ({"precision": "high"}, ("winograd", 2))],
)
def test_options_reach_the_choice(options, want, rng):
    mod, params = convs_module(["winograd_3x3_s1"], rng)
    assert chosen(mod, params, **options) == [want]


def test_the_pass_is_idempotent(rng):
    mod, params = convs_module(["winograd_3x3_s1"], rng)
    optimized = tvm_fuse.optimize(mod, params, tvm_fuse.host_target())
    again = ChooseAlgorithm(tvm_fuse.host_target())(optimized)
    assert tvm.ir.structural_equal(again, relay.transform.InferType()(optimized))


@pytest.mark.parametrize("option", [{"algorithm": "fast"}, {"precision": "low"}])
def test_unknown_options_are_one_clear_error(option, rng):
    mod, params = convs_module(["winograd_3x3_s1"], rng)
    name, value = next(iter(option.items()))
    with pytest.raises(ValueError, match=f"unknown {name} '{value}'; choose one of"):
        tvm_fuse.build(mod, params, tvm_fuse.host_target(), **option)


def test_built_winograd_matches_stock_with_nothing_left_to_transform(rng):
    """conv + bias + residual + ReLU as Winograd, against stock TVM; the weight transform is
    folded at compile time (only the kernel runs, on a transformed constant). 16x16x32: F(4x4)
    on every kind of core (at 14x14 full-width AVX-512's direct kernel is as fast)."""
    x = relay.var("x", shape=(1, 16, 16, 32))
    w = relay.const(rng.standard_normal((3, 3, 32, 32)).astype("float32") / 17)
    b = relay.const(rng.standard_normal(32).astype("float32"))
    conv = relay.nn.conv2d(
        x,
        w,
        padding=(1, 1),
        channels=32,
        kernel_size=(3, 3),
        data_layout="NHWC",
        kernel_layout="HWIO",
    )
    out = relay.nn.relu(relay.add(relay.nn.bias_add(conv, b, axis=3), x))
    mod = tvm.IRModule.from_expr(relay.Function([x], out))
    assert chosen(mod, {}) == [("winograd", 4)]
    lib = tvm_fuse.build(mod, target=tvm_fuse.host_target())
    data = {"x": rng.standard_normal((1, 16, 16, 32)).astype("float32")}
    testing.assert_close(testing.run(lib, data), testing.run(testing.build_stock(mod), data), 1e-4)
    kernels = {
        node["attrs"]["func_name"]
        for node in json.loads(lib.get_graph_json())["nodes"]
        if node["op"] == "tvm_op"
    }
    assert all("tvm_fuse_conv2d_nhwc_fused" in k for k in kernels), kernels
    lanes = strategy.simd_lanes(tvm_fuse.host_target())
    shapes = [p.shape for p in lib.get_params().values()]
    assert weights.transformed_shape(4, lanes, 32, 32) in shapes  # [36 + 9, 32 / VL, 32, VL]


def test_built_stride2_winograd_matches_stock(rng):
    """conv + bias + ReLU, stride 2 on an odd 109x109 map (55x55 out: the last tiles overhang),
    as Winograd against stock TVM: F(4x4) with 16 full-width lanes (Zen 5, Intel), F(2x2) where
    that pays (AVX2, Zen 4); the weight is the polyphase one (alpha = 2m + 1 points per axis, of
    which the m odd ones share a row: m + 2 rows), transformed at compile time."""
    x = relay.var("x", shape=(1, 109, 109, 64))
    w = relay.const(rng.standard_normal((3, 3, 64, 64)).astype("float32") / 24)
    b = relay.const(rng.standard_normal(64).astype("float32"))
    conv = relay.nn.conv2d(
        x,
        w,
        strides=(2, 2),
        padding=(1, 1),
        channels=64,
        kernel_size=(3, 3),
        data_layout="NHWC",
        kernel_layout="HWIO",
    )
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.bias_add(conv, b, 3))))
    ((algorithm, m),) = chosen(mod, {})
    assert algorithm == "winograd"
    lib = tvm_fuse.build(mod, target=tvm_fuse.host_target())
    data = {"x": rng.standard_normal((1, 109, 109, 64)).astype("float32")}
    testing.assert_close(testing.run(lib, data), testing.run(testing.build_stock(mod), data), 1e-4)
    lanes = strategy.simd_lanes(tvm_fuse.host_target())
    shapes = [p.shape for p in lib.get_params().values()]
    assert weights.transformed_shape(m, lanes, 64, 64) in shapes  # [(m + 2)^2 + 9, 64 / VL, ..]


def test_cli_algorithm_options_reach_explain(rng):
    """``tvm-fuse compile/explain --algorithm/--precision`` parse to what ``explain`` (and
    ``package.compile_onnx``) hand to ``tvm_fuse.optimize``."""
    from tvm_fuse import cli, explain  # pylint: disable=import-outside-toplevel

    args = cli.parser().parse_args(["explain", "m.onnx", "--algorithm", "direct"])
    assert (args.algorithm, args.precision) == ("direct", "default")
    args = cli.parser().parse_args(["compile", "m.onnx", "--precision", "high"])
    assert (args.algorithm, args.precision) == ("auto", "high")
    mod, params = convs_module(["winograd_3x3_s1"], rng)
    for algorithm, want in (("auto", "winograd"), ("direct", "direct")):
        kernels = explain.explain(mod, params, memory=False, algorithm=algorithm).kernels
        assert [k.algorithm for k in kernels] == [want]
