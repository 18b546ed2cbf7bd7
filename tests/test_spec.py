"""KernelSpec: printing, JSON round trip, and conversion to and from the fused op's attrs."""

import pytest
import tvm
from tvm import relay

from tvm_fuse import op as fused_op
from tvm_fuse.spec import KernelSpec, TensorSpec

SEED = KernelSpec(
    data=TensorSpec((1, 56, 56, 64), "NHWC", "float32"),
    weight=TensorSpec((3, 3, 64, 128), "HWIO", "float32"),
    bias=TensorSpec((128,), "C", "float32"),
    out=TensorSpec((1, 28, 28, 128), "NHWC", "float32"),
    strides=(2, 2),
    padding=(1, 1, 1, 1),
    dilation=(1, 1),
    activation="relu",
)


def test_str_prints_the_task_block():
    assert str(SEED).splitlines() == [
        "op:        conv2d + bias + relu",
        "input:     A [1, 56, 56, 64]  NHWC  float32",
        "weight:    w [3, 3, 64, 128]  HWIO  float32",
        "bias:      b [128]  C  float32",
        "output:    out [1, 28, 28, 128]  NHWC  float32",
        "conv:      stride 2, padding 1, dilation 1",
        "epilogue:  out = max(0, acc + b)",
    ]


def test_json_round_trip():
    assert KernelSpec.from_json(SEED.to_json()) == SEED


def test_derived_properties():
    assert SEED.kernel_size == (3, 3)
    assert (SEED.in_channels, SEED.out_channels) == (64, 128)
    assert SEED.flops == 2 * 28 * 28 * 128 * 3 * 3 * 64


def test_asymmetric_padding_is_printed_in_full():
    spec = KernelSpec(SEED.data, SEED.weight, SEED.out, padding=(0, 1, 2, 1))
    assert "padding (0, 1, 2, 1)" in str(spec)
    assert spec.ops == ("conv2d",)
    assert spec.epilogue == "out = acc"


def test_unknown_activation_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        KernelSpec(SEED.data, SEED.weight, SEED.out, activation="gelu")


def test_attrs_and_spec_convert_both_ways():
    data = relay.var("data", shape=SEED.data.shape)
    weight = relay.var("weight", shape=SEED.weight.shape)
    bias = relay.var("bias", shape=SEED.bias.shape)
    call = relay.Call(
        relay.op.get(fused_op.OP_NAME), [data, weight, bias], fused_op.attrs_from_spec(SEED)
    )
    mod = relay.transform.InferType()(
        tvm.IRModule.from_expr(relay.Function([data, weight, bias], call))
    )
    assert fused_op.spec_from_call(mod["main"].body) == SEED
