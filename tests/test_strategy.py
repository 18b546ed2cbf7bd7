"""The meeting point: which implementation the strategy picks, and the weight packing it asks for.

No LLVM build here: implementations are selected with ``select_implementation`` and the packing
is checked on the Relay module after ``PackWeights``.
"""

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relay, te
from tvm.relay.backend import te_compiler

import tvm_fuse  # noqa: F401  (registers the op and its strategy)
from tvm_fuse import strategy
from tvm_fuse.op import OP_NAME, spec_attrs, spec_of_call
from tvm_fuse.passes.pack import PackWeights
from tvm_fuse.testing import fused_conv_call
from tvm_fuse.schedules import conv2d_nhwc_fused, generic, packing
from tvm_fuse.spec import KernelSpec, TensorSpec


def host_target():
    return tvm.target.Target(f"llvm -mcpu={tvm.target.codegen.llvm_get_system_cpu()} -num-cores=2")


LANES = strategy.simd_lanes(host_target())


def select(kernel_layout, weight_shape, co, target):
    data = te.placeholder((1, 14, 14, 16), name="data")
    weight = te.placeholder(weight_shape, name="weight")
    attrs = spec_attrs(
        KernelSpec(
            data=TensorSpec(data.shape, "NHWC", "float32"),
            weight=TensorSpec(weight_shape, kernel_layout, "float32"),
            out=TensorSpec((1, 14, 14, co), "NHWC", "float32"),
            padding=(1, 1, 1, 1),
        )
    )
    out_type = relay.TensorType((1, 14, 14, co), "float32")
    op = relay.op.get(OP_NAME)
    impl, _ = te_compiler.select_implementation(op, attrs, [data, weight], out_type, target)
    return impl.name


def test_packed_weight_selects_the_fast_kernel():
    layout = packing.packed_layout(LANES)
    shape = (32 // LANES, 3, 3, 16, LANES)
    assert (
        select(layout, shape, 32, host_target())
        == conv2d_nhwc_fused.NAME
        == "conv2d_nhwc_fused.x86"
    )


def test_hwio_weight_selects_the_generic_kernel():
    assert select("HWIO", (3, 3, 16, 17), 17, host_target()) == generic.NAME


def test_non_cpu_target_with_packed_weight_is_a_clear_error():
    packed = TensorSpec((2, 3, 3, 16, 8), "OHWI8o", "float32")
    attrs = spec_attrs(dataclasses.replace(spec(co=16), weight=packed))
    with pytest.raises(ValueError, match=f"{OP_NAME}: weight layout 'OHWI8o' needs"):
        strategy._generic_strategy(attrs)


def spec(co=32, dtype="float32", out_hw=14):
    return KernelSpec(
        data=TensorSpec((1, 14, 14, 16), "NHWC", dtype),
        weight=TensorSpec((3, 3, 16, co), "HWIO", dtype),
        out=TensorSpec((1, out_hw, out_hw, co), "NHWC", dtype),
        padding=(1, 1, 1, 1),
    )


@pytest.mark.parametrize(
    "task, target, reason",
    [
        (spec(), "llvm -mtriple=aarch64-linux-gnu", "not x86 llvm"),
        (spec(), "c", "not x86 llvm"),
        (spec(dtype="float16"), None, "not float32"),
        (spec(co=LANES, out_hw=1), None, "tiny"),
    ],
)
def test_fast_path_refusals(task, target, reason):
    target = host_target() if target is None else tvm.target.Target(target)
    assert reason in strategy.fast_path_refusal(task, target)


@pytest.mark.parametrize("co", [64, 3, LANES + 1, 1000])
def test_fast_path_applies_to_any_channel_count(co):
    assert strategy.fast_path_refusal(spec(co=co), host_target()) is None


def packed_module(co, target=None):
    x = relay.var("x", shape=(1, 14, 14, 16))
    weight = relay.const(tvm.nd.array(np.ones((3, 3, 16, co), "float32")))
    call = fused_conv_call(x, weight, padding=(1, 1, 1, 1))
    mod = tvm.IRModule.from_expr(relay.Function([x], call))
    return PackWeights(target or host_target())(mod)["main"].body


def test_pack_weights_packs_the_weight_constant_at_compile_time():
    call = packed_module(co=4 * LANES)
    assert spec_of_call(call).weight.layout == packing.packed_layout(LANES)
    assert isinstance(call.args[1], relay.Constant)  # layout_transform folded away
    assert tuple(call.args[1].data.shape) == (4, 3, 3, 16, LANES)


def test_odd_co_is_padded_to_whole_vectors_and_selects_the_fast_kernel():
    co = 2 * LANES - 1  # half-width vectors would pad it as much: VL stays the target's
    call = packed_module(co=co)
    packed = spec_of_call(call)
    assert (packed.weight.layout, packed.out_channels) == (packing.packed_layout(LANES), co)
    assert tuple(call.args[1].data.shape) == (2, 3, 3, 16, LANES)  # Co padded to 2 vectors
    assert tuple(call.checked_type.shape) == (1, 14, 14, co)  # the type keeps the real Co
    assert not call.args[1].data.numpy()[1, ..., LANES - 1 :].any()  # the padding is zero
    args = [te.placeholder(a.checked_type.shape, name=f"a{i}") for i, a in enumerate(call.args)]
    impl, _ = te_compiler.select_implementation(
        call.op, call.attrs, args, call.checked_type, host_target()
    )
    assert impl.name == conv2d_nhwc_fused.NAME


def test_pack_weights_leaves_fallback_cases_in_hwio():
    call = packed_module(co=LANES + 1, target=tvm.target.Target("llvm -mtriple=aarch64-linux-gnu"))
    assert spec_of_call(call).weight.layout == "HWIO"
    assert tuple(call.args[1].data.shape) == (3, 3, 16, LANES + 1)
