"""Depthwise convs on the Relax backend: fused with their epilogue and run by the depthwise kernel.

The kernel (``relax.kernel.prim_func`` of a depthwise spec, ``schedules.depthwise``'s TE under a
TensorIR schedule) against a float64 NumPy depthwise conv + epilogue within 1e-5 of max |ref|;
NaN and Inf weights against stock Relax's build of the same module, position by position; the
pipeline on a MobileNet-v2 block against stock Relax and NumPy.
"""

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fuse.relax as tfr
from helpers import batch_norm, conv_nchw, module, run, tensor_var
from reference import ACTIVATIONS, assert_close, batch_norm as bn_reference
from reference import conv2d_nchw, depthwise_nhwc
from tvm_fuse.errors import UserError
from tvm_fuse.relax import compat, kernel, records
from tvm_fuse.schedules import depthwise, packing
from tvm_fuse.spec import KernelSpec

CASES = {
    # name: (data NHWC, kernel, stride, padding (t, l, b, r))
    "mb_s1": ((1, 14, 14, 32), 3, 1, (1, 1, 1, 1)),
    "mb_s2": ((1, 15, 15, 24), 3, 2, (1, 1, 1, 1)),
    "k5_asym_batch2": ((2, 9, 11, 16), 5, 1, (2, 1, 2, 3)),
    "valid_c12": ((1, 10, 10, 12), 3, 1, (0, 0, 0, 0)),  # 12 channels: vectors of 4
    "out_1x1": ((1, 2, 2, 32), 3, 2, (1, 1, 1, 1)),  # a one-pixel tile: no pixel loop
}


def _spec(case, lanes, finite=False, activation="relu6", residual=False):
    shape, k, s, pad = CASES[case]
    c = shape[3]
    spec = KernelSpec.conv(shape, (k, k, 1, c), (s, s), pad, groups=c)
    spec = spec.with_epilogue(True, residual, activation=activation, alpha=0.1)
    if lanes is None:  # the generic kernel: HWIO weight
        return spec
    lanes = packing.depthwise_lanes(c, lanes)
    weight = packing.packed_depthwise_weight(spec, lanes)
    return dataclasses.replace(spec, weight=weight, finite_weight=finite)


def _inputs(spec, rng):
    kh, kw = spec.kernel_size
    c = spec.out_channels
    x = rng.standard_normal(spec.data.shape).astype("float32")
    w = rng.uniform(-0.5, 0.5, (kh, kw, 1, c)).astype("float32")
    b = rng.standard_normal(c).astype("float32")
    r = rng.standard_normal(spec.out.shape).astype("float32")
    return x, w, b, r


def _run(spec, x, w, b, r, target):
    lib = tvm.compile(tvm.IRModule({"main": kernel.prim_func(spec)}), target=target)
    weight = packing.pack_depthwise_hwio(w, spec.lanes) if spec.lanes else w
    args = [x, weight, b] + ([r] if spec.residual is not None else [])
    out = tvm.runtime.empty(spec.out.shape, "float32")
    lib(*[tvm.runtime.tensor(a) for a in args], out)
    return out.numpy()


def _reference(spec, x, w, b, r):
    out = depthwise_nhwc(x, w, spec.strides, spec.padding) + b
    if spec.residual is not None:
        out = out + r
    return ACTIVATIONS[spec.activation](out, spec.alpha)


@pytest.mark.parametrize("finite", [False, True], ids=["padded_copy_or_tested", "in_place"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_depthwise_kernel_matches_numpy(case, finite, rng, target):
    spec = _spec(case, compat.simd_lanes(target), finite)
    assert kernel.kernel_name(spec) == depthwise.NAME
    x, w, b, r = _inputs(spec, rng)
    assert_close(_run(spec, x, w, b, r, target), _reference(spec, x, w, b, r), rel=1e-5)


@pytest.mark.parametrize("activation", ["relu6_max_first", "leaky_relu", "silu", "none"])
def test_depthwise_epilogues_and_residual_match_numpy(activation, rng, target):
    spec = _spec("mb_s1", compat.simd_lanes(target), True, activation, residual=True)
    x, w, b, r = _inputs(spec, rng)
    assert_close(_run(spec, x, w, b, r, target), _reference(spec, x, w, b, r), rel=1e-5)


def test_depthwise_kernel_is_parallel_by_rows_and_vectorized(target):
    text = kernel.prim_func(_spec("mb_s1", compat.simd_lanes(target))).script()
    assert "T.parallel(14)" in text and "T.vectorized" in text  # (N, Ho) rows in parallel


@pytest.mark.parametrize("case", ["mb_s2", "valid_c12"])
def test_generic_depthwise_fallback_matches_numpy(case, rng, target):
    """Where the depthwise kernel does not apply (C not a multiple of 4, a tiny output) the
    generic kernel runs the depthwise conv on the HWIO weight."""
    spec = _spec(case, None)
    assert kernel.kernel_name(spec) == kernel.GENERIC_NAME
    x, w, b, r = _inputs(spec, rng)
    assert_close(_run(spec, x, w, b, r, target), _reference(spec, x, w, b, r), rel=1e-5)


# -- through the pipeline ------------------------------------------------------------------------
def _depthwise_module(w, stride, bias):
    def body(bb, data):
        y = bb.emit(conv_nchw(data, w, strides=stride, groups=w.shape[0]))
        # no relu: it would turn the NaNs to 0
        return relax.op.add(y, relax.const(bias.reshape(1, -1, 1, 1)))

    return module([tensor_var("data", (1, w.shape[0], 12, 12))], body)


@pytest.mark.parametrize("stride", [1, 2])
def test_nan_and_inf_weights_give_what_stock_relax_gives(stride, rng, target):
    """A non-finite tap over the padding gives NaN (0 x Inf, 0 x NaN) as stock's padded conv
    does: the lowering records the weight as not finite, and the kernel keeps those products."""
    w = rng.uniform(-0.5, 0.5, (16, 1, 3, 3)).astype("float32")
    w[3, 0, 0, 0], w[9, 0, 2, 1], w[12, 0, 1, 1] = np.nan, np.inf, -np.inf
    b = rng.standard_normal(16).astype("float32")
    x = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    mod = _depthwise_module(w, stride, b)
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert spec.depthwise and not spec.finite_weight
    got, ref = run(tfr.build(mod, target=target), x), run(mod, x, target=target)
    assert np.isnan(ref).any() and np.isinf(ref).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(ref) & (ref > 0))
    finite = np.isfinite(ref)
    assert_close(got[finite], ref[finite], rel=1e-5)


def test_a_finite_weight_is_recorded_finite(rng, target):
    w = rng.uniform(-0.5, 0.5, (16, 1, 3, 3)).astype("float32")
    mod = _depthwise_module(w, 1, np.zeros(16, "float32"))
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert spec.depthwise and spec.finite_weight and spec.weight.layout.startswith("OHW")


def test_a_weight_given_at_run_time_is_packed_by_relax_ops(rng, target):
    """A weight that is an input of ``main`` (not a constant) is packed by ops in the graph."""
    x = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    w = rng.uniform(-0.5, 0.5, (16, 1, 3, 3)).astype("float32")
    data, weight = tensor_var("data", x.shape), tensor_var("weight", w.shape)
    mod = module(
        [data, weight],
        lambda bb, d, k: relax.op.nn.relu(relax.op.nn.conv2d(d, k, padding=1, groups=16)),
    )
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert spec.depthwise and not spec.finite_weight
    ref = np.maximum(conv2d_nchw(x, _dense_equivalent(w), padding=(1,) * 4), 0)
    assert_close(run(tfr.build(mod, target=target), x, w), ref, rel=1e-5)


def _dense_equivalent(w):
    """The ``[C, C, Kh, Kw]`` weight of a plain conv that computes the depthwise ``w``."""
    c = w.shape[0]
    dense = np.zeros((c, c) + w.shape[2:], w.dtype)
    dense[np.arange(c), np.arange(c)] = w[:, 0]
    return dense


def test_mobilenet_v2_block_fuses_every_conv_and_matches_stock_and_numpy(rng, target):
    """1x1 expand -> BN -> relu6, 3x3 depthwise -> BN -> relu6, 1x1 project -> BN, + input."""
    c, e = 16, 64
    x = rng.standard_normal((1, c, 14, 14)).astype("float32")
    w1 = rng.uniform(-0.3, 0.3, (e, c, 1, 1)).astype("float32")
    wd = rng.uniform(-0.5, 0.5, (e, 1, 3, 3)).astype("float32")
    w2 = rng.uniform(-0.3, 0.3, (c, e, 1, 1)).astype("float32")
    bns = [
        [rng.uniform(0.5, 1.5, n), rng.standard_normal(n), rng.standard_normal(n) * 0.1,
         rng.uniform(0.5, 1.5, n)]
        for n in (e, e, c)
    ]

    def relu6(bb, y):  # as Relax imports ONNX's Clip(0, 6) (``clip.RaiseMinMax``)
        y = bb.emit(relax.op.maximum(y, relax.const(0.0, "float32")))
        return bb.emit(relax.op.minimum(y, relax.const(6.0, "float32")))

    def body(bb, data):
        y = relu6(bb, batch_norm(bb, bb.emit(conv_nchw(data, w1, padding=0)), *bns[0]))
        y = relu6(bb, batch_norm(bb, bb.emit(conv_nchw(y, wd, groups=e)), *bns[1]))
        y = batch_norm(bb, bb.emit(conv_nchw(y, w2, padding=0)), *bns[2])
        return relax.op.add(y, data)

    mod = module([tensor_var("data", x.shape)], body)
    specs = tfr.describe(tfr.optimize(mod, target=target))
    assert [s.depthwise for s in specs] == [False, True, False]
    assert specs[1].bias is not None and specs[1].activation == "relu6_max_first"
    got = run(tfr.build(mod, target=target), x)
    assert_close(got, run(mod, x, target=target), rel=1e-5)
    y = np.clip(bn_reference(conv2d_nchw(x, w1), *bns[0], 1e-5), 0, 6)
    nhwc = depthwise_nhwc(y.transpose(0, 2, 3, 1), wd.transpose(2, 3, 1, 0), padding=(1,) * 4)
    y = np.clip(bn_reference(nhwc.transpose(0, 3, 1, 2), *bns[1], 1e-5), 0, 6)
    assert_close(got, bn_reference(conv2d_nchw(y, w2), *bns[2], 1e-5) + x, rel=1e-5)


def test_depthwise_kernels_have_no_tiles_to_tune(rng, target, tmp_path):
    w = rng.uniform(-0.5, 0.5, (16, 1, 3, 3)).astype("float32")
    mod = _depthwise_module(w, 1, np.zeros(16, "float32"))
    (spec,) = tfr.describe(tfr.optimize(mod, target=target))
    assert spec.depthwise and not records.is_tunable(spec)
    with pytest.raises(UserError, match="nothing to tune"):
        tfr.tune(mod, target=target, trials=2, records=str(tmp_path / "rec.json"))
