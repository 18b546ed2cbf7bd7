"""The meeting point: the TOPI op strategy of ``tvm_fuse.conv2d_nhwc_fused``.

This is the only module that imports both halves. The graph half hands down a fused call whose
attributes are the task description (``KernelSpec``); the strategy hands that spec to the compute
of the kernel that implements it.

- The graph half asks :func:`preferred_spec` which weight layout the kernel wants for a spec on
  a target, and packs the weight itself (``passes.pack.PackWeights``, at any opt_level).
- On x86 ``llvm`` targets, when :func:`fast_path_refusal` finds nothing against it, that is
  ``OHWI{VL}o``, and the ``"cpu"`` strategy picks the fast kernel ``conv2d_nhwc_fused.x86``
  (``schedules.conv2d_nhwc_fused``) for a call whose weight arrives packed; the Winograd
  kernel (``schedules.winograd``) for a Winograd call, the depthwise kernel
  (``schedules.depthwise``, weight ``OHW{VL}o``) for a depthwise one.
- Everything else keeps HWIO weights and the generic implementation (``schedules.generic``),
  which is always correct.

It also gives ``tvm_fuse.nchw_to_nhwc`` and ``tvm_fuse.nhwc_to_nchw`` (the graph's entry and exit
transposes, ``tvm_fuse.boundary_ops``) their kernels: the cache-blocked ``schedules.transposes``
on CPUs, TVM's injective one elsewhere.
"""

import dataclasses

import tvm
from tvm import relay, topi
from tvm.relay.op.strategy.generic import wrap_topi_schedule
from tvm.target import override_native_generic_func

from . import boundary_ops
from .op import OP_NAME, spec_of_attrs
from .schedules import conv2d_nhwc_fused as fast
from .schedules import depthwise, generic, tiling, transposes, winograd
from .schedules import winograd_tiling, winograd_weights
from .spec import KernelSpec

#: The AutoTVM templates of the fused op's fast kernels: the ones with knobs, which
#: ``tvm_fuse.tune`` tunes and a tuning log applies to (the generic kernel has none).
TUNABLE_KERNELS = (fast.NAME, winograd.NAME)
#: The x86 kernel of a call whose weight arrives packed: by algorithm, and the depthwise one
#: (no knobs: ``schedules.depthwise``).
_FAST_KERNELS = {"direct": fast, "winograd": winograd, "depthwise": depthwise}


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
def simd_lanes(target) -> int:
    """fp32 SIMD lanes (VL) of an x86 target: 16 with AVX-512, 8 with AVX2, 4 otherwise."""
    with target:
        return tvm.target.x86.get_simd_32bit_lanes()


def _is_x86_llvm(target) -> bool:
    triple = str(target.attrs.get("mtriple", ""))
    return target.kind.name == "llvm" and (not triple or triple.startswith(("x86_64", "i686")))


def fast_path_refusal(spec: KernelSpec, target) -> str | None:
    """Why the fast kernel does not apply to ``spec`` on ``target``, or None when it does
    (the rule: ``tiling.fast_path_refusal``)."""
    cores = int(target.attrs.get("num-cores", 1))
    return tiling.fast_path_refusal(spec, str(target), _is_x86_llvm(target), cores)


# -- which algorithm: the kernel half's cost model, asked by the graph half ---------------------
def winograd_tile(spec: KernelSpec, target, tiles=winograd_tiling.TILES) -> int:
    """m of the Winograd F(m x m, 3x3) kernel (one of ``tiles``) the cost model expects to be
    faster than the direct kernel for ``spec`` on ``target``, or 0 (direct). Winograd applies to
    3x3 dilation-1 convs of stride 1 or 2 on an HWIO weight where the fast path applies."""
    if fast_path_refusal(spec, target):
        return 0
    cores = int(target.attrs.get("num-cores", 0))
    return winograd_tiling.tile_for_spec(spec, simd_lanes(target), cores, tiles)


# -- what the kernel half wants -----------------------------------------------------------------
def preferred_spec(spec: KernelSpec, target) -> KernelSpec:
    """``spec`` with the weight layout the kernel for ``spec.algorithm`` wants on ``target``.

    The direct algorithm on x86 llvm (when :func:`fast_path_refusal` finds nothing): the weight
    packed as ``OHWI{VL}o``, Co zero-padded to whole vectors (``schedules.packing``). Otherwise
    ``spec`` unchanged, HWIO weight: the generic kernel. The graph half's ``PackWeights`` asks
    this for every fused call and computes the packed weight with Relay ops. The Winograd
    algorithm (chosen by the graph half): the weight transformed to ``WINO{m}_{VL}o``
    (``schedules.winograd_weights``). A depthwise conv: ``OHW{VL}o``, VL a divisor of C
    (``packing.depthwise_lanes``), for ``schedules.depthwise``. The fast path's layouts are
    ``tiling.fast_weight_spec``'s, which the Relax backend's strategy asks too."""
    if spec.weight.layout != "HWIO":
        return spec
    if fast_path_refusal(spec, target):
        return dataclasses.replace(spec, algorithm="direct", winograd_tile=0)
    return tiling.fast_weight_spec(spec, simd_lanes(target), str(target.attrs.get("mcpu", "")))


def reads_nchw_data(spec: KernelSpec) -> bool:
    """Whether the kernel of ``spec``, its weight as ``PackWeights`` left it, wants the NCHW
    tensor its NHWC data is the graph's entry transpose of (``passes.entry.ReadNCHWInput``): the
    direct fast kernel, where its tile model says so (``tiling.reads_nchw_data``)."""
    direct = spec.lanes is not None and fast_kernel(spec) is fast
    return direct and spec.data.layout == "NHWC" and tiling.reads_nchw_data(spec)


def winograd_weight_expr(weight, spec: KernelSpec, wanted: KernelSpec):
    """Relay ops computing the Winograd-domain weight of ``wanted`` from the HWIO ``weight`` of
    ``spec`` (``U = G g G^T`` in float64, Co padded, laid out for the kernel)."""
    m, lanes, stride = wanted.winograd_tile, wanted.lanes, wanted.strides[0]
    return winograd_weights.relay_transform(
        weight, m, lanes, spec.in_channels, spec.out_channels, stride
    )


# -- the strategy --------------------------------------------------------------------------------
def fast_kernel(spec: KernelSpec):
    """The ``schedules`` module of the x86 kernel that computes ``spec`` (weight packed)."""
    return _FAST_KERNELS["depthwise" if spec.depthwise else spec.algorithm]


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
    """CPU: the fast kernel for packed weights (see :func:`preferred_spec`), else the generic
    one."""
    spec = spec_of_attrs(attrs)
    if spec.lanes is None:
        return _generic_strategy(attrs)
    kernel = fast_kernel(spec)
    strategy = relay.op.OpStrategy()
    strategy.add_implementation(
        wrap_compute(kernel.compute), wrap_schedule(kernel.schedule), name=kernel.NAME, plevel=15
    )
    return strategy


relay.op.op.register_strategy(OP_NAME, fused_conv2d_strategy)


# -- the boundary transposes ---------------------------------------------------------------------
def _transpose_strategy(op_name: str, name: str):
    """Register the strategy of the boundary transpose ``op_name``, which computes the transpose
    ``name`` of ``schedules.transposes``: on CPUs its cache-blocked kernel (parallel over rows,
    blocks of up to VL x VL values transposed in registers or tiled), TVM's injective schedule
    on every other target."""
    compute = transposes.TRANSPOSES[name].compute

    def _compute(attrs, inputs, out_type):
        return [compute(inputs[0])]

    @override_native_generic_func(f"tvm_fuse_{name}_strategy")
    def transpose_strategy(attrs, inputs, out_type, target):
        strategy = relay.op.OpStrategy()
        schedule = wrap_topi_schedule(topi.generic.schedule_injective)
        strategy.add_implementation(
            _compute, schedule, name=transposes.implementation(name, "generic")
        )
        return strategy

    @transpose_strategy.register("cpu")
    def _transpose_strategy_cpu(attrs, inputs, out_type, target):
        strategy = relay.op.OpStrategy()
        lanes = simd_lanes(target)
        strategy.add_implementation(
            lambda attrs, inputs, out_type: [transposes.cpu_compute(name, inputs[0], lanes)],
            lambda attrs, outs, target: transposes.schedule(outs, lanes),
            name=transposes.implementation(name),
            plevel=15,
        )
        return strategy

    relay.op.op.register_strategy(op_name, transpose_strategy)
    return transpose_strategy


exit_transpose_strategy = _transpose_strategy(boundary_ops.OP_NAME, "nhwc_to_nchw")
entry_transpose_strategy = _transpose_strategy(boundary_ops.ENTRY_OP_NAME, "nchw_to_nhwc")
