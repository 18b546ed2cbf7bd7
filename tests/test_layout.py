"""ConvertLayoutNHWC: structure (fast, no build), then numerics against stock relay.build."""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.contrib import graph_executor
from tvm.relay.testing import resnet

from tvm_fuse import boundary_ops
from tvm_fuse.ir_utils import relay_functions
from tvm_fuse.passes.layout import ConvertLayoutNHWC, count_layout_transforms
from tvm_fuse.target import host_target


def _const(rng, *shape):
    return relay.const(rng.standard_normal(shape).astype("float32"))


def _conv(x, weight, groups=1, data_layout="NCHW", kernel_layout="OIHW"):
    """A 'same'-padded conv2d; channels and window read from the weight (a Constant or Var)."""
    shape = (
        weight.data.shape if isinstance(weight, relay.Constant) else weight.type_annotation.shape
    )
    dims = dict(zip(kernel_layout, (int(d) for d in shape)))
    return relay.nn.conv2d(
        x,
        weight,
        padding=(dims["H"] // 2, dims["W"] // 2),
        groups=groups,
        channels=dims["O"],
        kernel_size=(dims["H"], dims["W"]),
        data_layout=data_layout,
        kernel_layout=kernel_layout,
    )


def _module(params, body):
    params = params if isinstance(params, list) else [params]
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(params, body)))


def _convert(mod):
    return ConvertLayoutNHWC()(mod)


def _calls(mod, op_name):
    """Every call of ``op_name`` in all Relay functions of ``mod`` (an IRModule or a function)."""
    funcs = relay_functions(mod).values() if isinstance(mod, tvm.IRModule) else [mod]
    op, calls = relay.op.get(op_name), []

    def visit(node):
        if isinstance(node, relay.Call) and node.op == op:
            calls.append(node)

    for func in funcs:
        relay.analysis.post_order_visit(func, visit)
    return calls


def _conv_layouts(mod):
    return {(c.attrs.data_layout, c.attrs.kernel_layout) for c in _calls(mod, "nn.conv2d")}


def _constant_transforms(mod):
    """Number of layout_transform calls whose input is a constant (a weight left unfolded)."""
    return sum(isinstance(c.args[0], relay.Constant) for c in _calls(mod, "layout_transform"))


def _residual_graph(rng, n=1, c=3, mid=17):
    """conv -> relu -> max_pool2d -> conv -> add(first conv) -> global pool -> flatten -> dense."""
    x = relay.var("x", shape=(n, c, 10, 10))
    first = relay.nn.bias_add(_conv(x, _const(rng, mid, c, 3, 3)), _const(rng, mid))
    y = relay.nn.max_pool2d(relay.nn.relu(first), (3, 3), padding=(1, 1))
    y = relay.add(_conv(y, _const(rng, mid, mid, 3, 3)), first)
    y = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(y))
    return _module(x, relay.nn.dense(y, _const(rng, 5, mid)))


# --- structure -------------------------------------------------------------------------------


def test_nchw_conv_becomes_nhwc_with_folded_weight(rng):
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    x = relay.var("x", shape=(1, 3, 8, 8))
    conv = _conv(x, relay.const(w))
    before = _module(x, relay.nn.relu(relay.nn.bias_add(conv, relay.const(b))))

    nhwc = boundary_ops.nchw_to_nhwc(x)  # the entry and exit transforms: tvm_fuse's transposes
    y = _conv(nhwc, relay.const(w.transpose(2, 3, 1, 0)), data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.relu(relay.add(y, relay.const(b.reshape(1, 1, 1, 4))))
    expected = _module(x, boundary_ops.nhwc_to_nchw(y))

    # No PassContext: the pass must not depend on the caller's opt_level (default 2).
    tvm.ir.assert_structural_equal(_convert(before), expected)


def test_nhwc_graph_is_unchanged(rng):
    x = relay.var("x", shape=(1, 8, 8, 4))
    nhwc = {"data_layout": "NHWC"}
    y = _conv(x, _const(rng, 3, 3, 4, 6), kernel_layout="HWIO", **nhwc)
    y = relay.nn.max_pool2d(relay.nn.bias_add(y, _const(rng, 6), axis=3), (2, 2), layout="NHWC")
    y = _conv(y, _const(rng, 3, 3, 6, 1), groups=6, kernel_layout="HWOI", **nhwc)
    before = _module(x, y)
    # bias_add stays bias_add: the pass does nothing at all to a function that is NHWC already.
    tvm.ir.assert_structural_equal(_convert(before), before)


def test_twice_equals_once(rng):
    once = _convert(_residual_graph(rng))
    tvm.ir.assert_structural_equal(_convert(once), once)


def test_residual_graph_has_entry_and_flatten_transforms_only(rng):
    mod = _convert(_residual_graph(rng))
    assert count_layout_transforms(mod) == 2
    assert _constant_transforms(mod) == 0
    assert _conv_layouts(mod) == {("NHWC", "HWIO")}


def test_pool_before_first_conv_is_nhwc(rng):
    x = relay.var("x", shape=(1, 3, 8, 8))
    y = _conv(relay.nn.max_pool2d(x, (2, 2)), _const(rng, 4, 3, 3, 3))
    mod = _convert(_module(x, y))
    assert [pool.attrs.layout for pool in _calls(mod, "nn.max_pool2d")] == ["NHWC"]
    assert count_layout_transforms(mod) == 2


def test_free_weight_keeps_its_transform():
    x, w = relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))
    mod = _convert(_module([x, w], _conv(x, w)))
    weight_arg = mod["main"].body.args[0].args[1]  # layout_transform(conv(%x', THIS))
    assert weight_arg.op.name == "layout_transform"
    assert weight_arg.args[0].same_as(mod["main"].params[1])
    assert count_layout_transforms(mod) == 3


def test_every_function_is_converted(rng):
    x = relay.var("x", shape=(1, 3, 10, 10))
    mod = tvm.IRModule(
        {relay.GlobalVar("helper"): relay.Function([x], _conv(x, _const(rng, 3, 3, 3, 3)))}
    )
    mod = relay.transform.InferType()(mod)  # a call to @helper type-checks only once it is typed
    helper = mod.get_global_var("helper")
    x = relay.var("x", shape=(1, 3, 10, 10))
    mod["main"] = relay.Function([x], relay.nn.relu(_conv(helper(x), _const(rng, 4, 3, 1, 1))))
    mod = _convert(relay.transform.InferType()(mod))
    for func in (mod["main"], mod[helper]):
        assert _conv_layouts(func) == {("NHWC", "HWIO")}
        assert count_layout_transforms(func) == 2


def test_only_functions_not_yet_nhwc_are_rewritten(rng):
    x = relay.var("x", shape=(1, 8, 8, 4))
    y = _conv(x, _const(rng, 3, 3, 4, 4), data_layout="NHWC", kernel_layout="HWIO")
    nhwc_func = relay.Function([x], relay.nn.bias_add(y, _const(rng, 4), axis=3))
    mod = tvm.IRModule({relay.GlobalVar("nhwc"): nhwc_func})
    mod["main"] = _residual_graph(rng)["main"]
    mod = relay.transform.InferType()(mod)
    converted = _convert(mod)
    tvm.ir.assert_structural_equal(converted["nhwc"], mod["nhwc"])
    assert count_layout_transforms(converted["main"]) == 2


def test_resnet18_bound_params_has_two_transforms():
    mod, params = resnet.get_workload(num_layers=18, batch_size=1)
    mod = tvm.IRModule.from_expr(relay.build_module.bind_params_by_name(mod["main"], params))
    mod = _convert(mod)
    assert count_layout_transforms(mod) <= 2
    assert _constant_transforms(mod) == 0
    assert _conv_layouts(mod) == {("NHWC", "HWIO")}
    # bn_data normalises the NCHW input before the first conv: the entry transform follows it.
    axes = [int(bn.attrs.axis) for bn in _calls(mod, "nn.batch_norm")]
    assert axes.count(1) == 1 and axes.count(3) == len(axes) - 1


# --- numerics against stock relay.build of the original graph ---------------------------------


def _run(mod, data):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=host_target())
    runner = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    runner.set_input(0, data)
    runner.run()
    return runner.get_output(0).numpy()


def _assert_same_as_stock(mod, rng):
    converted = _convert(mod)
    assert all(layout == "NHWC" for layout, _ in _conv_layouts(converted))
    data = rng.standard_normal([int(d) for d in mod["main"].params[0].checked_type.shape])
    data = data.astype("float32")
    ref, out = _run(mod, data), _run(converted, data)
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()
    return converted


def test_residual_graph_matches_stock(rng):
    _assert_same_as_stock(_residual_graph(rng, n=2), rng)


def test_concatenate_avg_pool_pad_match_stock(rng):
    x = relay.var("x", shape=(2, 17, 9, 9))
    left = relay.nn.relu(_conv(x, _const(rng, 8, 17, 3, 3)))
    right = relay.nn.avg_pool2d(_conv(x, _const(rng, 5, 17, 1, 1)), (3, 3), (1, 1), padding=(1, 1))
    y = relay.concatenate([left, right], axis=1)
    y = relay.nn.pad(y, ((0, 0), (0, 0), (1, 2), (0, 1)))
    y = _conv(y, _const(rng, 3, 13, 3, 3))
    converted = _assert_same_as_stock(_module(x, y), rng)
    assert count_layout_transforms(converted) == 2


@pytest.mark.parametrize("groups,ci,co", [(17, 17, 17), (2, 6, 34)], ids=["depthwise", "grouped"])
def test_grouped_convs_match_stock(rng, groups, ci, co):
    x = relay.var("x", shape=(2, ci, 9, 9))
    y = _conv(x, _const(rng, co, ci // groups, 3, 3), groups=groups)
    converted = _assert_same_as_stock(_module(x, relay.nn.relu(y)), rng)
    assert _conv_layouts(converted) == {("NHWC", "HWOI" if groups == ci == co else "HWIO")}


def test_constant_weight_transposes_are_computed_in_numpy_and_blocked_ones_left():
    from tvm_fuse.passes.layout import _TransposedConstants  # pylint: disable=import-outside-toplevel

    weight = np.arange(2 * 16 * 3 * 3, dtype="float32").reshape(2, 16, 3, 3)
    permuted = relay.layout_transform(relay.const(weight), "OIHW", "HWIO")
    folded = _TransposedConstants().rewrite(permuted)
    assert isinstance(folded, relay.Constant)
    np.testing.assert_array_equal(folded.data.numpy(), weight.transpose(2, 3, 1, 0))
    blocked = relay.layout_transform(relay.const(weight), "OIHW", "OIHW8i")
    assert _TransposedConstants().rewrite(blocked).same_as(blocked)


def test_a_blocked_layout_function_is_built_as_it_is():
    """An NCHW4c conv followed by BatchNorm: TVM's layout inference cannot convert the BN."""
    from tvm_fuse import testing  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(3)
    x = relay.var("x", shape=(1, 2, 8, 8, 4))
    weight = relay.const(rng.standard_normal((4, 2, 3, 3, 4, 4)).astype("float32"))
    conv = relay.nn.conv2d(
        x, weight, padding=(1, 1), channels=16, kernel_size=(3, 3),
        data_layout="NCHW4c", kernel_layout="OIHW4i4o",
    )
    gamma, beta, mean = (relay.const(rng.uniform(0.5, 1.5, 4).astype("float32")) for _ in "abc")
    var = relay.const(rng.uniform(0.5, 1.5, 4).astype("float32"))
    bn = relay.nn.batch_norm(conv, gamma, beta, mean, var, axis=1)[0]
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(bn)))
    converted = ConvertLayoutNHWC()(mod)
    assert tvm.ir.structural_equal(converted["main"], relay.transform.InferType()(mod)["main"])
    testing.assert_matches_stock(mod)
