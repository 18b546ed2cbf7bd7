"""FuseConvBiasAct and LowerFusedConv (Relax): what is fused, with which spec, and what is refused.

Modules are NHWC/HWIO from the start (as ``ConvertLayoutNHWC`` leaves them); each fused module is
compiled and compared with the NumPy reference.
"""

import numpy as np
import pytest
from tvm import relax

import tvm_fuse.relax as tfr
from helpers import module, op_names, run, tensor_var
from reference import ACTIVATIONS, assert_close, conv2d_nhwc
from tvm_fuse.relax import kernel, strategy
from tvm_fuse.relax.fuse import COMPOSITE, FuseConvBiasAct

SHAPE = (1, 10, 10, 8)
CO = 16


def _conv(x, w):
    return relax.op.nn.conv2d(
        x, relax.const(w), padding=1, data_layout="NHWC", kernel_layout="HWIO"
    )


#: Relax form of each activation (as importers and users write them)
FORMS = {
    "relu": lambda bb, x: relax.op.nn.relu(x),
    "relu6": lambda bb, x: relax.op.nn.relu6(x),
    "relu6_max_first": lambda bb, x: relax.op.minimum(
        bb.emit(relax.op.maximum(x, relax.const(0.0))), relax.const(6.0)
    ),
    "leaky_relu": lambda bb, x: relax.op.nn.leakyrelu(x, 0.2),
    "sigmoid": lambda bb, x: relax.op.sigmoid(x),
    "silu": lambda bb, x: relax.op.nn.silu(x),
    "silu_mul": lambda bb, x: relax.op.multiply(x, bb.emit(relax.op.sigmoid(x))),
}


def _weights(rng):
    w = rng.uniform(-0.5, 0.5, (3, 3, SHAPE[3], CO)).astype("float32")
    b = rng.standard_normal(CO).astype("float32")
    return w, b


def _compile(mod, target, x):
    optimized = tfr.optimize(mod, target=target)
    return optimized, run(relax.transform.LegalizeOps()(optimized), x, target=target)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("residual", [False, True])
def test_each_epilogue_is_fused_and_matches_numpy(form, residual, rng, target):
    w, b = _weights(rng)
    w2 = rng.uniform(-0.5, 0.5, (3, 3, SHAPE[3], SHAPE[3])).astype("float32")

    def body(bb, data):
        y = bb.emit(_conv(data, w))
        y = bb.emit(relax.op.add(y, relax.const(b.reshape(1, 1, 1, CO))))
        if residual:  # a residual computed by another conv
            shortcut = bb.emit(
                relax.op.nn.conv2d(
                    data,
                    relax.const(np.tile(w2, (1, 1, 1, 2))),
                    padding=1,
                    data_layout="NHWC",
                    kernel_layout="HWIO",
                )
            )
            y = bb.emit(relax.op.add(shortcut, y))
        return FORMS[form](bb, y)

    x = 3 * rng.standard_normal(SHAPE).astype("float32")
    optimized, got = _compile(module([tensor_var("data", SHAPE)], body), target, x)
    specs = tfr.describe(optimized)
    activation = "silu" if form == "silu_mul" else form
    assert specs[-1].activation == activation
    assert specs[-1].bias is not None and (specs[-1].residual is not None) == residual
    if form == "leaky_relu":
        assert specs[-1].alpha == pytest.approx(0.2)
    assert [n for n in op_names(optimized) if not n.startswith("relax.call_tir")] == []

    ref = conv2d_nhwc(x, w, padding=(1,) * 4) + b
    if residual:
        ref = ref + conv2d_nhwc(x, np.tile(w2, (1, 1, 1, 2)), padding=(1,) * 4)
    assert_close(got, ACTIVATIONS[activation](ref, 0.2), rel=1e-5)


def test_bias_sum_with_two_consumers_is_fused_only_up_to_it(rng, target):
    """The add's output feeds the relu and the graph's second output: the relu stays apart."""
    w, b = _weights(rng)

    def body(bb, data):
        y = bb.emit(_conv(data, w))
        y = bb.emit(relax.op.add(y, relax.const(b)))
        act = bb.emit(relax.op.nn.relu(y))
        return relax.op.subtract(act, y)  # relu(y) - y: y has two consumers

    x = rng.standard_normal(SHAPE).astype("float32")
    optimized, got = _compile(module([tensor_var("data", SHAPE)], body), target, x)
    (spec,) = tfr.describe(optimized)
    assert spec.ops == ("conv2d", "bias")
    assert "relax.nn.relu" in op_names(optimized)
    y = conv2d_nhwc(x, w, padding=(1,) * 4) + b
    assert_close(got, np.maximum(y, 0) - y, rel=1e-5)


def test_conv_output_with_two_consumers_is_not_fused(rng):
    w, b = _weights(rng)

    def body(bb, data):
        y = bb.emit(_conv(data, w))
        z = bb.emit(relax.op.add(y, relax.const(b)))
        return relax.op.multiply(z, y)

    fused = FuseConvBiasAct()(module([tensor_var("data", SHAPE)], body))
    assert op_names(fused)[:2] == [f"call:{_composite_name(fused)}", "relax.add"]
    (spec,) = tfr.describe(fused)
    assert spec.ops == ("conv2d",)  # the bare conv, its sum left to TVM


def _composite_name(mod):
    (gv,) = [gv for gv, f in mod.functions_items() if f.attrs and "Composite" in f.attrs]
    return gv.name_hint


@pytest.mark.parametrize("kind", ["nchw", "grouped"])
def test_refused_convs_stay_stock(kind, rng):
    w, _ = _weights(rng)
    if kind == "nchw":
        shape, conv = (1, 8, 10, 10), dict(weight=w.transpose(3, 2, 0, 1))
    else:
        shape = SHAPE
        conv = dict(weight=w[:, :, :2], groups=4, data_layout="NHWC", kernel_layout="HWIO")
    weight = relax.const(np.ascontiguousarray(conv.pop("weight")))

    def body(bb, data):
        return relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(data, weight, padding=1, **conv)))

    fused = FuseConvBiasAct()(module([tensor_var("data", shape)], body))
    assert COMPOSITE not in fused.script()
    assert op_names(fused) == ["relax.nn.conv2d", "relax.nn.relu"]


def test_clip_other_than_relu6_is_not_fused_into_the_kernel(rng, target):
    w, b = _weights(rng)

    def body(bb, data):
        y = bb.emit(_conv(data, w))
        y = bb.emit(relax.op.add(y, relax.const(b)))
        return relax.op.clip(y, 0.0, 4.0)

    x = 3 * rng.standard_normal(SHAPE).astype("float32")
    optimized, got = _compile(module([tensor_var("data", SHAPE)], body), target, x)
    (spec,) = tfr.describe(optimized)
    assert spec.activation == "none"
    assert_close(got, np.clip(conv2d_nhwc(x, w, padding=(1,) * 4) + b, 0, 4), rel=1e-5)


def test_the_same_spec_twice_shares_one_kernel(rng, target):
    w, b = _weights(rng)
    w2 = rng.uniform(-0.5, 0.5, (3, 3, CO, CO)).astype("float32")

    def body(bb, data):
        y = bb.emit(relax.op.nn.relu(bb.emit(_conv(data, w))))
        y = bb.emit(
            relax.op.nn.relu(
                bb.emit(
                    relax.op.nn.conv2d(
                        y, relax.const(w2), padding=1, data_layout="NHWC", kernel_layout="HWIO"
                    )
                )
            )
        )
        return relax.op.nn.relu(
            bb.emit(
                relax.op.nn.conv2d(
                    y, relax.const(w2 * 0.5), padding=1, data_layout="NHWC", kernel_layout="HWIO"
                )
            )
        )

    optimized = tfr.optimize(module([tensor_var("data", SHAPE)], body), target=target)
    names = op_names(optimized)
    assert len(names) == 3 and len(set(names)) == 2, names


def test_tiny_output_runs_the_scheduled_generic_kernel(rng, target):
    """Below 64 outputs per core the fast kernel refuses (as in the Relay backend): the fused
    call keeps its HWIO weight and runs the generic kernel, scheduled, and right."""
    shape, w = (1, 3, 3, 8), rng.uniform(-0.5, 0.5, (3, 3, 8, 8)).astype("float32")

    def body(bb, data):
        conv = relax.op.nn.conv2d(
            data, relax.const(w), padding=1, data_layout="NHWC", kernel_layout="HWIO"
        )
        return relax.op.nn.relu(bb.emit(conv))

    optimized = tfr.optimize(module([tensor_var("data", shape)], body), target=target)
    (spec,) = tfr.describe(optimized)
    assert spec.weight.layout == "HWIO" and "tiny" in strategy.fast_path_refusal(spec, target)
    kernels = [f for _, f in optimized.functions_items() if kernel.spec_of(f) is not None]
    assert str(kernels[0].attrs["tvm_fuse.kernel"]) == kernel.GENERIC_NAME
    assert "T.parallel" in kernels[0].script()
    x = rng.standard_normal(shape).astype("float32")
    assert_close(
        run(tfr.build(module([tensor_var("data", shape)], body), target=target), x),
        np.maximum(conv2d_nhwc(x, w, padding=(1,) * 4), 0),
        rel=1e-5,
    )
