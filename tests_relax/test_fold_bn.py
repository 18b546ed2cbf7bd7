"""FoldBatchNorm (Relax): what it folds (numerically against NumPy) and what it must leave alone."""

import numpy as np
import pytest
import tvm
from tvm import relax

from helpers import batch_norm, conv_nchw, module, op_names, run, tensor_var
from reference import assert_close, batch_norm as bn_ref, conv2d_nchw
from tvm_fuse.relax.fold_bn import FoldBatchNorm


def _stats(rng, c):
    return (
        rng.uniform(0.5, 1.5, c),
        rng.uniform(-0.5, 0.5, c),
        rng.uniform(-0.5, 0.5, c),
        rng.uniform(0.5, 2.0, c),
    )


def _fold(mod):
    return FoldBatchNorm()(relax.transform.FoldConstant()(mod))


@pytest.mark.parametrize(
    "case",
    [
        dict(),
        dict(conv_bias=True),
        dict(groups=4),
        dict(groups=8, cout=8),  # depthwise
        dict(center=False, scale=False),
        dict(eps=1e-3, strides=2, padding=0),
    ],
    ids=["plain", "conv_bias", "grouped", "depthwise", "no_affine", "eps_stride"],
)
def test_folds_and_matches_numpy(case, rng, target):
    cin, cout, groups = 8, case.get("cout", 16), case.get("groups", 1)
    x = rng.standard_normal((1, cin, 9, 9)).astype("float32")
    w = rng.uniform(-0.5, 0.5, (cout, cin // groups, 3, 3)).astype("float32")
    b = rng.uniform(-0.5, 0.5, cout).astype("float32")
    stats = _stats(rng, cout)
    eps, center, scale = case.get("eps", 1e-5), case.get("center", True), case.get("scale", True)
    strides, padding = case.get("strides", 1), case.get("padding", 1)

    def body(bb, data):
        y = bb.emit(conv_nchw(data, w, strides, padding, groups=groups))
        if case.get("conv_bias"):
            y = bb.emit(relax.op.add(y, relax.const(b.reshape(1, -1, 1, 1))))
        return batch_norm(bb, y, *stats, eps=eps, center=center, scale=scale)

    mod = module([tensor_var("data", x.shape)], body)
    folded = _fold(mod)
    assert "relax.nn.batch_norm" not in op_names(folded)
    assert op_names(folded) == ["relax.nn.conv2d", "relax.add"]

    ref = _grouped_conv(x, w, strides, padding, groups)
    if case.get("conv_bias"):
        ref = ref + b.reshape(1, -1, 1, 1)
    gamma, beta, mean, var = stats
    ref = bn_ref(
        ref, gamma if scale else 1.0 + 0 * gamma, beta if center else 0 * beta, mean, var, eps
    )
    assert_close(run(folded, x, target=target), ref, rel=1e-5)


def _grouped_conv(x, w, strides, padding, groups):
    cin_g, cout_g = x.shape[1] // groups, w.shape[0] // groups
    pads = (padding,) * 4
    parts = [
        conv2d_nchw(
            x[:, g * cin_g : (g + 1) * cin_g],
            w[g * cout_g : (g + 1) * cout_g],
            (strides,) * 2,
            pads,
        )
        for g in range(groups)
    ]
    return np.concatenate(parts, axis=1)


def _refused(body, x_shape=(1, 8, 6, 6), extra=()):
    mod = relax.transform.FoldConstant()(module([tensor_var("data", x_shape), *extra], body))
    after = FoldBatchNorm()(mod)
    tvm.ir.assert_structural_equal(after, mod)
    assert "relax.nn.batch_norm" in op_names(after)


def test_conv_with_two_consumers_is_not_folded(rng):
    w = rng.standard_normal((8, 8, 3, 3)).astype("float32")
    stats = _stats(rng, 8)

    def body(bb, data):
        conv = bb.emit(conv_nchw(data, w))
        normed = batch_norm(bb, conv, *stats)
        return relax.op.add(normed, conv)  # the conv's output is used twice

    _refused(body)


def test_non_constant_weight_is_not_folded(rng):
    stats = _stats(rng, 8)
    weight = tensor_var("weight", (8, 8, 3, 3))

    def body(bb, data, w):
        conv = bb.emit(relax.op.nn.conv2d(data, w, padding=1))
        return batch_norm(bb, conv, *stats)

    _refused(body, extra=(weight,))


def test_batch_norm_on_another_axis_is_not_folded(rng):
    w = rng.standard_normal((8, 8, 3, 3)).astype("float32")
    stats = _stats(rng, 6)

    def body(bb, data):
        conv = bb.emit(conv_nchw(data, w))
        return batch_norm(bb, conv, *stats, axis=3)  # W axis, 6 wide

    _refused(body)


def test_used_mean_output_is_not_folded(rng):
    w = rng.standard_normal((8, 8, 3, 3)).astype("float32")
    consts = [relax.const(np.asarray(v, "float32")) for v in _stats(rng, 8)]

    def body(bb, data):
        conv = bb.emit(conv_nchw(data, w))
        bn = bb.emit(relax.op.nn.batch_norm(conv, *consts, axis=1, training=False))
        out = bb.emit(relax.TupleGetItem(bn, 0))
        mean = bb.emit(relax.TupleGetItem(bn, 1))
        return relax.op.add(out, relax.op.reshape(mean, (1, 8, 1, 1)))

    _refused(body)


def test_training_mode_batch_norm_is_not_folded(rng):
    w = rng.standard_normal((8, 8, 3, 3)).astype("float32")
    stats = _stats(rng, 8)

    def body(bb, data):
        return batch_norm(bb, bb.emit(conv_nchw(data, w)), *stats, training=True)

    _refused(body)
