"""Whole networks through tvm_fuse: the NHWC graph between the fused kernels, the zoo.

Numeric checks compare ``tvm_fuse.build`` with stock ``relay.build`` of the original module. The
other zoo models (ResNet-50, MobileNet, VGG, SqueezeNet, Inception, DenseNet, batch 2) run in
``benchmarks/zoo.py``.
"""

import functools

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import boundary_ops, examples, models, testing
from tvm_fuse import op as fused_op
from tvm_fuse.examples import conv_bn_layer
from tvm_fuse.ir_utils import count_ops
from tvm_fuse.passes.layout import count_layout_transforms

from graph_json_facts import live_ranges, storage_bytes

POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d")


def _module(body, params):
    free = {v.name_hint: v for v in relay.analysis.free_vars(body)}
    inputs = [free.pop("data")] + sorted(free.values(), key=lambda v: v.name_hint)
    return tvm.IRModule.from_expr(relay.Function(inputs, body)), params


def _dense(x, name, units, params, rng):
    cin = int(relay.transform.InferTypeLocal(x).shape[1])
    params[name] = rng.uniform(-0.5, 0.5, (units, cin)).astype("float32")
    return relay.nn.dense(x, relay.var(name, shape=(units, cin)))


def between_kernels(batch=1):
    """conv-BN-relu layers with the ops real networks put between them (NCHW, seeded)::

    conv -> max_pool -> pad -> {conv, conv} -> concatenate -> multiply(per-channel const)
    -> {conv 1x1 -> add(shortcut)} -> avg_pool -> {global_avg_pool -> batch_flatten -> dense,
    global_max_pool -> reshape -> dense} -> add -> softmax
    """
    rng, params = np.random.default_rng(0), {}
    layer = functools.partial(conv_bn_layer, params=params, rng=rng)
    data = relay.var("data", shape=(batch, 3, 20, 20))
    x = relay.nn.max_pool2d(layer(data, name="c1", channels=8), (2, 2), (2, 2))
    x = relay.nn.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    x = relay.concatenate(
        [layer(x, name="c2", channels=8, padding=0), layer(x, name="c3", channels=4, padding=0)], 1
    )
    x = relay.multiply(x, relay.const(rng.uniform(0.5, 1.5, (12, 1, 1)).astype("float32")))
    x = relay.add(layer(x, name="c4", channels=12, kernel=1, padding=0), x)
    x = relay.nn.avg_pool2d(x, (2, 2), (2, 2))
    flat = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    reshaped = relay.reshape(relay.nn.global_max_pool2d(x), (batch, -1))
    logits = relay.add(_dense(flat, "d1", 10, params, rng), _dense(reshaped, "d2", 10, params, rng))
    return _module(relay.nn.softmax(logits), params)


def grouped_convs():
    """depthwise conv-BN-relu -> grouped (2 groups) conv-BN-relu -> 1x1 conv-BN-relu (NCHW)."""
    rng, params = np.random.default_rng(0), {}
    layer = functools.partial(conv_bn_layer, params=params, rng=rng)
    x = relay.var("data", shape=(1, 8, 12, 12))
    x = layer(x, name="dw", channels=8, groups=8)
    x = layer(x, name="g2", channels=8, groups=2, strides=2)
    return _module(layer(x, name="pw", channels=16, kernel=1, padding=0), params)


def _calls(mod, *names):
    """The calls of ``main`` to the ops ``names``, in post order."""
    calls = []

    def visit(node):
        if isinstance(node, relay.Call) and getattr(node.op, "name", None) in names:
            calls.append(node)

    relay.analysis.post_order_visit(mod["main"], visit)
    return calls


# -- the ops between fused kernels -----------------------------------------------------------
def test_between_kernels_graph_is_nhwc_throughout():
    mod, params = between_kernels()
    optimized = tvm_fuse.optimize(mod, params)
    ops = count_ops(optimized)
    assert ops["nn.conv2d"] == 0 and ops["tvm_fuse.conv2d_nhwc_fused"] == 4
    assert all(call.attrs.layout == "NHWC" for call in _calls(optimized, *POOLS))
    # entry, and one back to NCHW before each of the two flattening ops
    assert count_layout_transforms(optimized) <= 3


@pytest.mark.parametrize("batch", [1, 2])
def test_between_kernels_graph_matches_stock(batch):
    mod, params = between_kernels(batch)
    lib = testing.assert_matches_stock(mod, params)
    assert len(models.built_layout_transforms(lib)) <= 3


def test_depthwise_convs_fuse_and_grouped_ones_take_the_stock_nhwc_path():
    mod, params = grouped_convs()
    optimized = tvm_fuse.optimize(mod, params)
    convs = _calls(optimized, "nn.conv2d")
    assert [int(c.attrs.groups) for c in convs] == [2]
    assert all(c.attrs.data_layout == "NHWC" for c in convs)
    assert [spec.ops for spec in tvm_fuse.describe(optimized)] == [
        ("depthwise_conv2d", "bias", "relu"),
        ("conv2d", "bias", "relu"),
    ]
    testing.assert_matches_stock(mod, params)


# -- the zoo, without building -----------------------------------------------------------------
def test_zoo_workload_redraws_identity_batch_norms():
    _, raw = models.ZOO["resnet-18"](1)
    _, params = models.zoo_workload("resnet-18")
    assert np.all(raw["bn0_moving_var"].numpy() == 1.0)  # why the redraw is needed
    for suffix in ("_gamma", "_beta", "_moving_mean", "_moving_var"):
        value = params["bn0" + suffix].numpy()
        assert np.unique(value).size == value.size, suffix
    assert np.all(params["bn0_moving_var"].numpy() > 0)
    again = models.zoo_workload("resnet-18")[1]["bn0_gamma"].numpy()
    np.testing.assert_array_equal(params["bn0_gamma"].numpy(), again)


def test_zoo_workload_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown model 'resnet-19'.*resnet-18"):
        models.zoo_workload("resnet-19")


@pytest.fixture(scope="module")
def resnet18():
    mod, params = models.zoo_workload("resnet-18")
    return mod, params, tvm_fuse.optimize(mod, params)


def test_resnet18_layout_transforms_only_at_entry_and_exit(resnet18):
    mod, _, optimized = resnet18
    assert count_layout_transforms(optimized) <= 2
    assert _calls(optimized, "layout_transform") == []
    # no transpose at the entry: the stem conv reads the NCHW image itself (passes/entry.py)
    assert _calls(optimized, boundary_ops.ENTRY_OP_NAME) == []
    stem = _calls(optimized, fused_op.OP_NAME)[0]
    assert fused_op.spec_of_call(stem).data.layout == "NCHW"
    assert tuple(stem.args[0].checked_type.shape) == (1, 3, 224, 224)  # bn_data's NCHW output
    assert len(_calls(optimized, boundary_ops.OP_NAME)) == 1  # back to NCHW before the flatten
    assert count_ops(mod)["layout_transform"] == 0


def test_resnet18_every_conv_is_fused(resnet18):
    _, _, optimized = resnet18
    specs = tvm_fuse.describe(optimized)
    assert count_ops(optimized)["nn.conv2d"] == 0 and len(specs) == 22
    # the last kernel is the classifier's dense layer (passes/dense.py), its bias fused
    assert count_ops(optimized)["nn.dense"] == 0
    assert specs[-1].ops == ("conv2d", "bias") and specs[-1].data.shape == (1, 1, 1, 512)
    # relay.testing's ResNet v2: BN-relu precede the convs; the shortcut adds fuse as residuals
    assert sum("add" in spec.ops for spec in specs) >= 7


@pytest.fixture(scope="module")
def resnet18_builds(resnet18):
    """ResNet-18 built by ``tvm_fuse.build`` (its storage plan applied) and by stock
    ``relay.build``, and both outputs on the same seeded inputs: the suite's costliest pair of
    builds, made once for the whole-model checks below."""
    mod, params, _ = resnet18
    fused, stock = tvm_fuse.build(mod, params), testing.build_stock(mod, params)
    inputs = examples.random_inputs(mod, params)
    return fused, stock, testing.run(fused, inputs), testing.run(stock, inputs)


@pytest.mark.slow
def test_resnet18_matches_stock(resnet18_builds):
    fused, _, got, ref = resnet18_builds
    testing.assert_close(got, ref, 1e-4)
    assert len(models.built_layout_transforms(fused)) <= 2


@pytest.mark.slow
def test_resnet18_applied_storage_plan_is_smaller_than_stocks(resnet18_builds):
    """tvm_fuse's storage plan, applied to the built graph: less activation storage than stock's,
    and no two kernel outputs live at once on one storage (read from the JSON by the tests'
    own ``graph_json_facts``)."""
    fused, stock, _, _ = resnet18_builds
    assert storage_bytes(fused.get_graph_json()) < storage_bytes(stock.get_graph_json())
    for sid, spans in live_ranges(fused.get_graph_json()).items():
        spans.sort()
        assert all(b[0] > a[1] for a, b in zip(spans, spans[1:])), (sid, spans)
