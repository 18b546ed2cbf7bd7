"""The meeting point: the TOPI op strategy of ``tvm_fuse.conv2d_nhwc_fused``.

This is the only module that imports both halves. The graph half hands down a fused call (its
attributes are the task description); the strategy picks the kernel that implements it.

- On x86 ``llvm`` targets, when :func:`fast_path_refusal` finds nothing against it, the
  alter-op-layout hook (run by ``relay.build`` at opt_level 3, followed by FoldConstant) rewrites
  the call to take its weight packed as ``OHWI{VL}o`` at compile time, and the ``"cpu"`` strategy
  then picks the fast kernel ``conv2d_nhwc_fused.x86`` (``schedules.conv2d_nhwc_fused``).
- Everything else keeps HWIO weights and the generic implementation (``schedules.generic``),
  which is always correct.

It also gives ``tvm_fuse.nhwc_to_nchw`` (the graph's exit transpose, ``tvm_fuse.exit_op``) its
kernel: the cache-blocked ``schedules.nhwc_to_nchw`` on CPUs, TVM's injective one elsewhere.
"""

import dataclasses

import tvm
from tvm import relay, topi
from tvm.relay.op.strategy.generic import wrap_topi_schedule
from tvm.target import override_native_generic_func

from . import exit_op
from .op import OP_NAME, spec_attrs, spec_of_attrs
from .schedules import conv2d_nhwc_fused as fast
from .schedules import generic, nhwc_to_nchw, packing
from .spec import KernelSpec, TensorSpec


def wrap_compute(topi_compute):
    """Adapt a ``schedules`` compute ``(spec, data, weight, bias, residual)`` to the strategy's
    ``(attrs, inputs, out_type)`` calling: the spec comes from the attrs, the tensors by name."""

    def _compute(attrs, inputs, out_type):
        spec = spec_of_attrs(attrs)
        tensors = {"bias": None, "residual": None, **dict(zip(spec.argument_names, inputs))}
        return [topi_compute(spec, **tensors)]

    return _compute


def wrap_schedule(topi_schedule):
    def _schedule(attrs, outs, target):
        with target:
            return topi_schedule(outs)

    return _schedule


# -- when the fast kernel applies --------------------------------------------------------------
#: Below this many output values per core the kernel launch and packing are not worth it.
MIN_OUTPUTS_PER_CORE = 64


def simd_lanes(target) -> int:
    """fp32 SIMD lanes (VL) of an x86 target: 16 with AVX-512, 8 with AVX2, 4 otherwise."""
    with target:
        return tvm.target.x86.get_simd_32bit_lanes()


def _is_x86_llvm(target) -> bool:
    triple = str(target.attrs.get("mtriple", ""))
    return target.kind.name == "llvm" and (not triple or triple.startswith(("x86_64", "i686")))


def fast_path_refusal(spec: KernelSpec, target) -> str | None:
    """Why the fast kernel does not apply to ``spec`` on ``target``, or None when it does.

    The fallback cases: a non-x86 or non-llvm target; a dtype other than float32; a tiny output
    (fewer than MIN_OUTPUTS_PER_CORE values per core). Any Co and Ci are covered: a Co that is
    not a multiple of VL is padded in the packed weight (see ``_pack_weight``).
    """
    if not _is_x86_llvm(target):
        return f"target {target} is not x86 llvm"
    dtypes = {spec.data.dtype, spec.weight.dtype, spec.out.dtype}
    if dtypes != {"float32"}:
        return f"dtypes {sorted(dtypes)} are not float32"
    outputs = 1
    for dim in spec.out.shape:
        outputs *= dim
    if outputs < MIN_OUTPUTS_PER_CORE * max(1, int(target.attrs.get("num-cores", 1))):
        return f"output {spec.out.shape} is tiny"
    return None


# -- compile-time weight packing -----------------------------------------------------------------
@relay.op.op.register_alter_op_layout(OP_NAME)
def _pack_weight(attrs, inputs, tinfos, out_type):
    """HWIO -> ``OHWI{VL}o`` when the fast kernel applies, Co zero-padded to a multiple of VL
    (FoldConstant then folds the pad and the transform)."""
    target = tvm.target.Target.current(allow_none=True)
    spec = spec_of_attrs(attrs)
    if target is None or spec.weight.layout != "HWIO" or fast_path_refusal(spec, target):
        return None
    lanes = simd_lanes(target)
    co = spec.out_channels
    co_pad = packing.padded_channels(co, lanes)
    weight = inputs[1]
    if co_pad != co:
        weight = relay.nn.pad(weight, ((0, 0), (0, 0), (0, 0), (0, co_pad - co)))
    layout = packing.packed_layout(lanes)
    weight = relay.layout_transform(weight, "HWIO", layout)
    kh, kw = spec.kernel_size
    packed = TensorSpec((co_pad // lanes, kh, kw, spec.in_channels, lanes), layout, "float32")
    packed_spec = dataclasses.replace(spec, weight=packed)
    return relay.Call(
        relay.op.get(OP_NAME), [inputs[0], weight, *inputs[2:]], spec_attrs(packed_spec)
    )


# -- the strategy --------------------------------------------------------------------------------
def _generic_strategy(attrs):
    layout = spec_of_attrs(attrs).weight.layout
    if layout != "HWIO":
        raise ValueError(f"{OP_NAME}: weight layout {layout!r} needs the x86 fast kernel")
    strategy = relay.op.OpStrategy()
    strategy.add_implementation(
        wrap_compute(generic.compute), wrap_schedule(generic.schedule), name=generic.NAME
    )
    return strategy


@override_native_generic_func("tvm_fuse_conv2d_nhwc_fused_strategy")
def fused_conv2d_strategy(attrs, inputs, out_type, target):
    """Every target: the generic NHWC implementation (HWIO weights)."""
    return _generic_strategy(attrs)


@fused_conv2d_strategy.register("cpu")
def _fused_conv2d_strategy_cpu(attrs, inputs, out_type, target):
    """CPU: the fast kernel for packed weights (see ``_pack_weight``), else the generic one."""
    if spec_of_attrs(attrs).lanes is None:
        return _generic_strategy(attrs)
    strategy = relay.op.OpStrategy()
    strategy.add_implementation(
        wrap_compute(fast.compute), wrap_schedule(fast.schedule), name=fast.NAME, plevel=15
    )
    return strategy


relay.op.op.register_strategy(OP_NAME, fused_conv2d_strategy)


# -- the exit transpose --------------------------------------------------------------------------
def _exit_compute(attrs, inputs, out_type):
    return [nhwc_to_nchw.compute(inputs[0])]


@override_native_generic_func("tvm_fuse_nhwc_to_nchw_strategy")
def exit_transpose_strategy(attrs, inputs, out_type, target):
    """Every target: TVM's injective schedule."""
    strategy = relay.op.OpStrategy()
    schedule = wrap_topi_schedule(topi.generic.schedule_injective)
    strategy.add_implementation(_exit_compute, schedule, name="nhwc_to_nchw.generic")
    return strategy


@exit_transpose_strategy.register("cpu")
def _exit_transpose_strategy_cpu(attrs, inputs, out_type, target):
    """CPU: parallel over rows, tiles of VL channels x VL columns (``schedules.nhwc_to_nchw``)."""
    strategy = relay.op.OpStrategy()
    lanes = simd_lanes(target)
    strategy.add_implementation(
        _exit_compute,
        lambda attrs, outs, target: nhwc_to_nchw.schedule(outs, lanes),
        name=nhwc_to_nchw.NAME,
        plevel=15,
    )
    return strategy


relay.op.op.register_strategy(exit_op.OP_NAME, exit_transpose_strategy)
