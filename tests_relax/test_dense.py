"""DenseAsConv (Relax): a dense layer (``R.matmul`` by a constant, with its bias) runs as the fused
1x1 conv, with the numbers (NaN and Inf included) of the matmul it replaces; the forms it cannot
take stay stock ops and right."""

import numpy as np
import pytest
from tvm import relax

import tvm_fuse.relax as tfr
from helpers import module, op_names, run, tensor_var
from reference import assert_close

K, M = 96, 200  # M not a multiple of 8 or 16: the packed weight's Co is padded


def _layer(n, weight, bias=None, bias_first=False, activation=None):
    """A module of ``x [n, K] @ weight (+ bias) (-> activation(bb, y))``, every operand a
    constant."""

    def body(bb, x):
        y = bb.emit(relax.op.matmul(x, relax.const(weight)))
        if bias is not None:
            operands = (relax.const(bias), y) if bias_first else (y, relax.const(bias))
            y = bb.emit(relax.op.add(*operands))
        return activation(bb, y) if activation else y

    return module([tensor_var("x", (n, weight.shape[0]))], body)


def _operands(rng, n, bias_shape=(M,)):
    x = rng.standard_normal((n, K)).astype("float32")
    w = rng.uniform(-0.2, 0.2, (K, M)).astype("float32")
    b = rng.standard_normal(bias_shape).astype("float32")
    return x, w, b


def _reference(x, w, b=None):
    out = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    return out if b is None else out + np.asarray(b, np.float64).reshape(1, -1)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize(
    "bias_shape, bias_first", [((M,), False), ((1, M), False), ((M,), True)],
    ids=["bias", "bias_1xM", "bias_first"],
)
def test_dense_with_bias_is_one_fused_kernel(n, bias_shape, bias_first, rng, target):
    x, w, b = _operands(rng, n, bias_shape)
    mod = _layer(n, w, b, bias_first)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.ops == ("conv2d", "bias") and spec.kernel_size == (1, 1)
    assert spec.lanes is not None  # the fast kernel, its weight packed
    assert not {"relax.matmul", "relax.add"} & set(op_names(optimized))
    assert_close(run(tfr.build(mod, target=target), x), _reference(x, w, b), rel=1e-5)


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


#: Activations after a dense layer, each in the Relax form an importer or a user writes, with the
#: spec's name for it and its NumPy reference.
ACTIVATIONS = {
    "relu": (lambda bb, y: relax.op.nn.relu(y), "relu", lambda v: np.maximum(v, 0)),
    "onnx_clip": (  # ONNX's Clip(0, 6) once RaiseMinMax ran
        lambda bb, y: relax.op.minimum(
            bb.emit(relax.op.maximum(y, relax.const(0.0))), relax.const(6.0)
        ),
        "relu6_max_first",
        lambda v: np.minimum(np.maximum(v, 0), 6),
    ),
    "clip": (lambda bb, y: relax.op.clip(y, 0, 6), "relu6", lambda v: np.clip(v, 0, 6)),
    "leaky_relu": (
        lambda bb, y: relax.op.nn.leakyrelu(y, 0.1),
        "leaky_relu",
        lambda v: np.where(v > 0, v, 0.1 * v),
    ),
    "sigmoid": (lambda bb, y: relax.op.sigmoid(y), "sigmoid", _sigmoid),
    "silu": (
        lambda bb, y: relax.op.multiply(y, bb.emit(relax.op.sigmoid(y))),
        "silu",
        lambda v: v * _sigmoid(v),
    ),
}


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_dense_then_activation_is_one_fused_kernel(name, with_bias, rng, target):
    """The activation is moved in front of the reshape back to [N, M] and fused with the conv."""
    make, spec_name, reference = ACTIVATIONS[name]
    x, w, b = _operands(rng, 2)
    x *= 8  # pre-activations past 6 and below 0: every piece of each activation is used
    b = b if with_bias else None
    mod = _layer(2, w, b, activation=make)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.ops == ("conv2d",) + (("bias",) if with_bias else ()) + (spec_name,)
    assert op_names(optimized) == [
        "relax.reshape", "relax.call_tir:tvm_fuse_conv2d_nhwc_fused_0", "relax.reshape"
    ]
    want = reference(_reference(x, w, b))
    assert_close(run(tfr.build(mod, target=target), x), want, rel=1e-5)


@pytest.mark.parametrize("name", ["relu", "onnx_clip", "clip", "sigmoid"])
def test_nan_and_inf_through_a_moved_activation_come_out_as_stock_gives_them(name, rng, target):
    x, w, b = _operands(rng, 4)  # row 3 stays finite
    x[0, 5], x[1, 7], x[2, 9] = np.nan, np.inf, -np.inf
    mod = _layer(4, w, b, activation=ACTIVATIONS[name][0])
    got = run(tfr.build(mod, target=target), x)
    want = run(mod, x, target=target)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    assert not np.isfinite(_reference(x, w, b)[:3]).any()  # rows 0-2: NaN or Inf into it
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], rel=1e-5)


def test_an_activation_with_a_vector_constant_stays_after_the_reshape(rng, target):
    """``max(y, C)`` with C one value per unit: moved onto [1, 1, N, M] it could broadcast
    otherwise, so it stays a stock op on [N, M], and right."""
    x, w, _ = _operands(rng, 2)
    floor = rng.standard_normal(M).astype("float32")

    def activation(bb, y):
        return relax.op.minimum(bb.emit(relax.op.maximum(y, relax.const(floor))), relax.const(6.0))

    mod = _layer(2, w, activation=activation)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.ops == ("conv2d",)
    assert {"relax.maximum", "relax.minimum"} <= set(op_names(optimized))
    want = np.minimum(np.maximum(_reference(x, w), floor), 6)
    assert_close(run(tfr.build(mod, target=target), x), want, rel=1e-5)


def test_an_activation_whose_input_is_read_again_stays_after_the_reshape(rng, target):
    """``relu(y) * y``: the conv's output would have two readers, so the ReLU is not moved."""
    x, w, b = _operands(rng, 2)

    def body(bb, x):
        y = bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, relax.const(w))), relax.const(b)))
        return relax.op.multiply(bb.emit(relax.op.nn.relu(y)), y)

    mod = module([tensor_var("x", x.shape)], body)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.ops == ("conv2d", "bias")
    assert op_names(optimized).count("relax.reshape") == 2  # in, and out once: not moved
    dense = _reference(x, w, b)
    assert_close(run(tfr.build(mod, target=target), x), np.maximum(dense, 0) * dense, rel=1e-5)


def test_nan_and_inf_come_out_as_the_stock_build_gives_them(rng, target):
    x, w, b = _operands(rng, 4)  # row 3 stays finite
    x[0, 5], x[1, 7], x[2, 9] = np.nan, np.inf, -np.inf
    w[7, :50] = 0  # Inf * 0: NaN in those outputs of row 1, Inf in the others
    mod = _layer(4, w, b)
    got = run(tfr.build(mod, target=target), x)
    want = run(mod, x, target=target)
    assert np.isnan(want[0]).all() and np.isnan(want[1, :50]).all() and np.isinf(want[2]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    assert np.isfinite(want[3]).all()
    assert_close(got[3], want[3], rel=1e-5)


def _weight_as_parameter(n):
    x, w = tensor_var("x", (n, K)), tensor_var("w", (K, M))
    return module([x, w], lambda bb, x, w: relax.op.matmul(x, w))


def _batched(n):
    w = np.ones((K, M), "float32")
    return module([tensor_var("x", (2, n, K))], lambda bb, x: relax.op.matmul(x, relax.const(w)))


def _tiny(n):
    w = np.ones((K, 10), "float32")  # 10 outputs: fewer than the fast kernel takes
    return module([tensor_var("x", (n, K))], lambda bb, x: relax.op.matmul(x, relax.const(w)))


@pytest.mark.parametrize(
    "make, args",
    [
        (_weight_as_parameter, lambda x, rng: (x, rng.standard_normal((K, M)).astype("float32"))),
        (_batched, lambda x, rng: (np.stack([x, 2 * x]),)),
        (_tiny, lambda x, rng: (x,)),
    ],
    ids=["weight_not_constant", "batched_matmul", "tiny_output"],
)
def test_other_forms_stay_stock_matmuls_and_right(make, args, rng, target):
    mod = make(2)
    optimized = tfr.optimize(mod, target=target)
    assert "relax.matmul" in op_names(optimized)
    assert tfr.describe(optimized) == []
    inputs = args(rng.standard_normal((2, K)).astype("float32"), rng)
    assert_close(run(tfr.build(mod, target=target), *inputs), run(mod, *inputs, target=target))


def test_a_matmul_read_twice_keeps_its_bias_outside(rng, target):
    """A matmul with another reader besides its bias sum: one conv computes it, both readers
    read it, the bias stays a stock add (taken in, the matmul would be computed twice)."""
    x, w, b = _operands(rng, 2)

    def body(bb, x):
        y = bb.emit(relax.op.matmul(x, relax.const(w)))
        biased = bb.emit(relax.op.add(y, relax.const(b)))
        return relax.op.multiply(biased, y)

    mod = module([tensor_var("x", x.shape)], body)
    optimized = tfr.optimize(mod, target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.ops == ("conv2d",)
    assert "relax.add" in op_names(optimized) and "relax.matmul" not in op_names(optimized)
    dense = _reference(x, w)
    assert_close(run(tfr.build(mod, target=target), x), (dense + b) * dense, rel=1e-5)
