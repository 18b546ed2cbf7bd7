"""``Clip`` through the Relax backend: ONNX's (imported as ``call_tir``s) and Relax's ``R.clip``
fused as relu6 (each in its own order) when its bounds are 0 and 6, with the NaN and +-Inf
results of the stock build; left to stock ops otherwise, the graph NHWC either way."""

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_fuse.relax as tfr
from helpers import conv_nchw, module, op_names, run, tensor_var, transposes
from reference import assert_close
from tvm_fuse import onnx_example
from tvm_fuse.relax import fuse, layout
from tvm_fuse.relax.clip import ClipAsMinMax, RaiseMinMax
from tvm_fuse.relax.fold_bn import FoldBatchNorm

ort = pytest.importorskip("onnxruntime")

SHAPE = (1, 8, 10, 10)


def _model(tmp_path, clip=(0.0, 6.0), opset=onnx_example.OPSET):
    path = onnx_example.conv_bn_act(
        tmp_path / f"clip{opset}.onnx",
        data_shape=SHAPE,
        channels=16,
        strides=1,
        activation="relu6",
        clip=clip,
        opset=opset,
    )
    return path, from_onnx(onnx.load(path), keep_params_in_input=False)


def _input(seed=1, special=False):
    x = 3 * np.random.default_rng(seed).standard_normal(SHAPE).astype("float32")
    if special:  # each spreads through the 3x3 conv to a patch of outputs
        x[0, 0, 1, 1], x[0, 3, 5, 5], x[0, 5, 8, 2] = np.nan, np.inf, -np.inf
    return x


@pytest.mark.parametrize("opset", [10, 13])  # Clip-6 (attributes), Clip-13 (inputs)
def test_onnx_clip_0_6_is_fused_and_matches_onnxruntime(opset, tmp_path, target):
    path, mod = _model(tmp_path, opset=opset)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.ops == ("conv2d", "bias", "relu6_max_first")
    assert spec.epilogue == "out = min(max(acc + b, 0), 6)"
    stock = [n for n in op_names(optimized) if not n.startswith("relax.call_tir")]
    assert stock == []  # no max/min left (the entry transpose is tvm_fuse's kernel)
    x = _input()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = session.run(None, {"data": x})[0]
    assert 0 < want.max() <= 6 and want.min() == 0  # both bounds are reached
    assert_close(run(tfr.build(mod, target=target), x), want)


@pytest.mark.parametrize("opset", [10, 13])  # Clip-6 (attributes), Clip-13 (inputs)
def test_nan_and_inf_come_out_as_the_stock_build_gives_them(opset, tmp_path, target):
    """The importer's ``min(max(x, 0), 6)`` sends NaN to 0 (clip's order would give 6, ONNX
    Runtime gives NaN): the fused kernel must give what the ops it replaces gave."""
    _, mod = _model(tmp_path, opset=opset)
    x = _input(special=True)
    got = run(tfr.build(mod, target=target), x)
    want = run(tvm.compile(mod, target=target), x)
    # the NaN input makes NaN conv outputs, +Inf and -Inf ones: 0 and 6 must both come out
    stock_specials = (want == 0).sum() + (want == 6).sum()
    assert stock_specials > 9 and not np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close(got, want, rel=1e-5)
    np.testing.assert_array_equal(got[(want == 0) | (want == 6)], want[(want == 0) | (want == 6)])


@pytest.mark.parametrize("clip", [(0.0, 4.0), (-1.0, 6.0)])
def test_other_bounds_are_refused_and_stay_right(clip, tmp_path, target):
    path, mod = _model(tmp_path, clip=clip)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.activation == "none"
    assert {"relax.maximum", "relax.minimum"} <= set(op_names(optimized))
    x = _input()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert_close(run(tfr.build(mod, target=target), x), session.run(None, {"data": x})[0])


def test_raise_min_max_gives_the_relax_ops_and_keeps_other_call_tir(tmp_path):
    """The importer's two call_tir become ``R.maximum``/``R.minimum`` with the bounds; a
    ``call_tir`` of anything else (here an element-wise add) stays."""
    _, mod = _model(tmp_path, clip=(0.5, 5.5))
    raised = RaiseMinMax()(relax.transform.FoldConstant()(mod))
    calls = {
        b.value.op.name: b.value
        for block in raised["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
    }
    assert "relax.call_tir" not in calls
    assert float(calls["relax.maximum"].args[1].value.numpy()) == 0.5
    assert float(calls["relax.minimum"].args[1].value.numpy()) == 5.5

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.call_te(tvm.topi.add, x, tvm.tirx.const(1.0, "float32")))
        bb.emit_func_output(out)
    other = bb.get()
    assert op_names(RaiseMinMax()(other)) == op_names(other)
    assert op_names(other)[0].startswith("relax.call_tir")


@pytest.mark.parametrize("clip", [(0.0, 4.0), (-1.0, 6.0)])
def test_the_refusal_names_the_bounds(clip, tmp_path, target):
    """The sentence ``fusion_refusal`` gives the chain that ends in the clip."""
    _, mod = _model(tmp_path, clip=clip)
    before_fusion = [
        relax.transform.FoldConstant(),
        RaiseMinMax(),
        FoldBatchNorm(),
        layout.ConvertLayoutNHWC(),
    ]
    mod = tvm.transform.Sequential(before_fusion)(mod)
    reasons = []

    def record(context):
        reasons.append(fuse.fusion_refusal(context))
        return False

    patterns = [
        relax.transform.FusionPattern(p.name, p.pattern, p.annotation_patterns, record)
        for p in fuse.fusion_patterns()
    ]
    relax.transform.FuseOpsByPattern(patterns, bind_constants=False)(mod)
    assert f"clip({clip[0]}, {clip[1]}) is not relu6" in reasons



# -- R.clip (R.nn.relu6) in a model built with Relax ops ---------------------------------------
def _nchw_conv_clip(w, low, high):
    def body(bb, data):
        y = bb.emit(conv_nchw(data, w))
        y = bb.emit(relax.op.clip(y, low, high))
        return relax.op.nn.max_pool2d(y, 2, 2)

    return module([tensor_var("data", SHAPE)], body)


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (0.0, 4.0)], ids=["relu6", "other_bounds"])
def test_relax_clip_keeps_the_graph_nhwc_and_relu6_fuses(bounds, target):
    """``ConvertLayout`` has no rule for ``clip``: ``ClipAsMinMax`` makes it ``max(min(x, hi),
    lo)``, which stays NHWC (the pool after it too) and fuses as relu6 for bounds 0 and 6; the
    NaN and +-Inf results stay the stock build's, element by element."""
    w = np.random.default_rng(2).uniform(-0.5, 0.5, (16, 8, 3, 3)).astype("float32")
    mod = _nchw_conv_clip(w, *bounds)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.activation == ("relu6" if bounds == (0.0, 6.0) else "none")
    names = op_names(optimized)
    assert len(transposes(names)) == 2 and names[-1].startswith("relax.call_tir:tvm_fuse_nhwc")
    x = _input(special=True)
    got, want = run(tfr.build(mod, target=target), x), run(mod, x, target=target)
    # the input's NaN makes NaN conv outputs, which clip's order sends to hi (the other order:
    # to lo); both bounds are reached
    assert want.max() == bounds[1] and want.min() == bounds[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close(got, want, rel=1e-5)


def test_clip_as_min_max_computes_what_clip_does_and_leaves_ints_alone(target):
    x = np.array([np.nan, np.inf, -np.inf, -1.5, 0.0, 2.5, 6.0, 7.0], "float32").reshape(1, 8)
    mod = module([tensor_var("x", x.shape)], lambda bb, v: relax.op.clip(v, 0.0, 6.0))
    split = ClipAsMinMax()(mod)
    assert op_names(split) == ["relax.minimum", "relax.maximum"]
    np.testing.assert_array_equal(run(split, x, target=target), run(mod, x, target=target))
    ints = module([tensor_var("i", (1, 8), "int32")], lambda bb, v: relax.op.clip(v, 0, 6))
    assert op_names(ClipAsMinMax()(ints)) == ["relax.clip"]
