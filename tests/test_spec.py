"""KernelSpec: printing, JSON round trip, and conversion to and from the fused op's attrs."""

import dataclasses

import pytest
import tvm
from tvm import relay

from tvm_fuse import op as fused_op
from tvm_fuse.spec import KernelSpec, TensorSpec, conv_output_hw, layout_lanes

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


def test_call_and_spec_convert_both_ways():
    data = relay.var("data", shape=SEED.data.shape)
    weight = relay.var("weight", shape=SEED.weight.shape)
    bias = relay.var("bias", shape=SEED.bias.shape)
    call = fused_op.fused_call(SEED, data, weight, bias)
    assert fused_op.spec_of_call(call) == SEED  # before type inference
    mod = relay.transform.InferType()(
        tvm.IRModule.from_expr(relay.Function([data, weight, bias], call))
    )
    body = mod["main"].body
    assert fused_op.spec_of_call(body) == SEED
    assert tuple(body.checked_type.shape) == SEED.out.shape  # the type relation reads the spec


def test_leaky_relu_alpha_round_trips_exactly():
    spec = dataclasses.replace(SEED, activation="leaky_relu", alpha=0.1)
    call = fused_op.fused_call(spec, relay.var("x"), relay.var("w"), relay.var("b"))
    assert fused_op.spec_of_call(call).alpha == 0.1


def test_arguments_must_match_the_spec():
    data = relay.var("data", shape=SEED.data.shape)
    weight = relay.var("weight", shape=SEED.weight.shape)
    with pytest.raises(ValueError, match="the spec has a bias; pass bias="):
        fused_op.fused_call(SEED, data, weight)
    wrong = relay.var("bias", shape=(64,))
    call = fused_op.fused_call(SEED, data, weight, wrong)
    with pytest.raises(ValueError, match=r"argument bias is float32\[64\]"):
        relay.transform.InferType()(
            tvm.IRModule.from_expr(relay.Function([data, weight, wrong], call))
        )


def test_type_inference_reads_each_calls_attributes_once():
    """The spec of a call is read from its attributes once, however many rounds of type
    inference see the call (op.spec_of_attrs's cache)."""
    data, weight, bias = (relay.var(n, shape=getattr(SEED, n).shape) for n in SEED.argument_names)
    call = fused_op.fused_call(SEED, data, weight, bias)
    fused_op.spec_of_attrs.cache_clear()
    mod = tvm.IRModule.from_expr(relay.Function([data, weight, bias], call))
    for _ in range(3):
        mod = relay.transform.InferType()(mod)
    assert fused_op.spec_of_attrs.cache_info().misses == 1
    assert fused_op.spec_of_call(mod["main"].body) == SEED


def test_arguments_typed_with_int64_or_any_dims_are_checked_by_value():
    """Types equal in value but not in structure (ONNX imports shapes as int64; a dynamic
    batch) pass the type relation's check, as a wrong shape does not."""
    shape64 = [tvm.tir.IntImm("int64", d) for d in SEED.data.shape]
    for data_shape in (shape64, [relay.Any(), *SEED.data.shape[1:]]):
        data = relay.var("data", shape=data_shape)
        weight, bias = (relay.var(n, shape=getattr(SEED, n).shape) for n in ("weight", "bias"))
        call = fused_op.fused_call(SEED, data, weight, bias)
        mod = relay.transform.InferType()(
            tvm.IRModule.from_expr(relay.Function([data, weight, bias], call))
        )
        assert tuple(mod["main"].body.checked_type.shape) == SEED.out.shape


def test_conv_spec_computes_the_output_size():
    spec = KernelSpec.conv((1, 56, 56, 64), (3, 3, 64, 128), strides=(2, 2), padding=(1, 1, 1, 1))
    assert spec.with_epilogue(bias=True, activation="relu") == SEED


@pytest.mark.parametrize(
    "hw, kernel, strides, padding, dilation",
    [
        ((9, 10), (3, 3), (2, 1), (0, 1, 2, 1), (2, 2)),
        ((224, 224), (7, 7), (2, 2), (3,) * 4, (1, 1)),
    ],
)
def test_output_size_matches_relay_conv2d(hw, kernel, strides, padding, dilation):
    data = relay.var("x", shape=(1, *hw, 4))
    weight = relay.var("w", shape=(*kernel, 4, 8))
    conv = relay.nn.conv2d(
        data, weight, strides, padding, dilation, data_layout="NHWC", kernel_layout="HWIO"
    )
    ty = relay.transform.InferType()(tvm.IRModule.from_expr(conv))["main"].ret_type
    assert conv_output_hw(hw, kernel, strides, padding, dilation) == tuple(ty.shape[1:3])


@pytest.mark.parametrize("layout, lanes", [("HWIO", None), ("OHWI8o", 8), ("OHWI16o", 16)])
def test_lanes_come_from_the_weight_layout(layout, lanes):
    assert layout_lanes(layout) == lanes


def test_winograd_needs_a_tile():
    with pytest.raises(ValueError, match="winograd_tile 0 does not fit algorithm 'winograd'"):
        dataclasses.replace(SEED, algorithm="winograd")
    spec = dataclasses.replace(SEED, algorithm="winograd", winograd_tile=4)
    assert spec.kernel_size == (3, 3)
    assert str(spec).splitlines()[-1] == "algorithm: winograd F(4x4)"
    assert (spec.algorithm_name, SEED.algorithm_name) == ("winograd F(4x4)", "direct")
    assert KernelSpec.from_json(spec.to_json()) == spec


def test_epilogue_formulas_read_as_the_kernel_computes():
    """A compound sum is parenthesised where it is a factor; relu6 in clip's order (NaN -> 6)."""
    conv = KernelSpec.conv((1, 8, 8, 4), (3, 3, 4, 8))
    assert conv.with_epilogue(True, False, activation="silu").epilogue == (
        "out = (acc + b) * sigmoid(acc + b)"
    )
    assert conv.with_epilogue(False, False, activation="silu").epilogue == (
        "out = acc * sigmoid(acc)"
    )
    assert conv.with_epilogue(True, True, activation="relu6").epilogue == (
        "out = max(min(acc + b + r, 6), 0)"
    )
