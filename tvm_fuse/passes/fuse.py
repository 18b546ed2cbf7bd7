"""FuseConvBiasAct: the fusion decision — conv2d chains become one ``tvm_fuse.conv2d_nhwc_fused``.

Where it sits: last pass of ``tvm_fuse.pipeline()``, after ``FoldBatchNorm`` (which turned BN into
a bias) and ``ConvertLayoutNHWC`` (which made convs NHWC/HWIO). It matches::

    %0 = nn.conv2d(%x, %w, data_layout="NHWC", kernel_layout="HWIO")   # groups=1, float32
    %1 = nn.bias_add(%0, %b, axis=3)   # or add(%0, <constant [C] or [1,1,1,C]>); optional
    %2 = add(%1, %r)                   # residual of the output's shape, either side; optional
    %3 = nn.relu(%2)                   # or clip(0, 6), nn.leaky_relu, sigmoid,
                                       # multiply(%2, sigmoid(%2)) (SiLU); optional
    =>  tvm_fuse.conv2d_nhwc_fused(%x, %w, %b, %r, activation="relu", ...)

The chain is grown one step at a time by small rules (``RULES``): each takes the rebuilt call
and the original one and returns the grown fused call, or None when it does not apply. A step is
fused only when the intermediate it swallows has no consumer outside the step, so no tensor that
something else reads is ever fused away.

It refuses (leaves stock ops): other layouts, groups != 1, non-float32 data/weight/output,
dynamic shapes, addends that are neither per-channel nor of the output's shape, and clips other
than (0, 6).
"""

from __future__ import annotations

import tvm
from tvm import relay

from .. import op as fused_op
from ..ir_utils import deep_recursion, use_counts
from ..spec import KernelSpec


def _static_shape(ty):
    if not isinstance(ty, relay.TensorType):
        return None
    if not all(isinstance(d, tvm.tir.IntImm) for d in ty.shape):
        return None
    return tuple(int(d) for d in ty.shape)


def _conv_to_fused(call, original, _uses):
    """``nn.conv2d`` in NHWC/HWIO, groups 1, float32 -> fused call with no epilogue."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "nn.conv2d"):
        return None
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout, int(attrs.groups)) != ("NHWC", "HWIO", 1):
        return None
    data_ty, weight_ty = (arg.checked_type for arg in original.args)
    out_dtype = attrs.out_dtype or data_ty.dtype
    if {data_ty.dtype, weight_ty.dtype, out_dtype} != {"float32"}:
        return None
    if _static_shape(data_ty) is None or _static_shape(weight_ty) is None:
        return None
    padding = [int(p) for p in attrs.padding]
    if len(padding) == 2:
        padding = padding * 2
    spec = KernelSpec.conv(
        _static_shape(data_ty), _static_shape(weight_ty), attrs.strides, padding, attrs.dilation
    )
    return fused_op.fused_call(spec, call.args[0], call.args[1])


def _is_op(call, *names) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name in names


def _open_fused(expr, original, uses, *, free, consumers=1):
    """The spec of ``expr`` if it may still absorb a step, else None: ``expr`` is a fused call,
    its ``free`` fields (bias, residual, activation) are still unset, and the original
    intermediate it stands for has exactly ``consumers`` consumers (all of them inside the step
    being absorbed)."""
    if not fused_op.is_fused_call(expr) or uses.get(original, 0) != consumers:
        return None
    spec = fused_op.spec_of_call(expr)
    return spec if all(getattr(spec, name) in (None, "none") for name in free) else None


def _regrow(fused, spec, *, bias=None, residual=None, **changes):
    """A copy of the fused call with its spec grown: a bias or residual argument added, or the
    activation (and alpha) set."""
    args = {"bias": None, "residual": None, **fused_op.call_arguments(fused)}
    args.update((k, v) for k, v in (("bias", bias), ("residual", residual)) if v is not None)
    grown = spec.with_epilogue(bias is not None, residual is not None, **changes)
    return fused_op.fused_call(grown, **args)


def _per_channel_bias(expr, ty, channels):
    """``expr`` (of type ``ty``) as a [C] bias, or None: a [C] tensor, or a constant of shape
    [1,1,1,C]."""
    shape = _static_shape(ty)
    if ty.dtype != "float32" or shape is None:
        return None
    if shape == (channels,):
        return expr
    if isinstance(expr, relay.Constant) and shape == (1, 1, 1, channels):
        return relay.const(expr.data.numpy().reshape(channels))
    return None


def _absorb_bias(call, original, uses):
    """``bias_add(fused, b, axis=3)`` or ``add(fused, per-channel const)`` -> fused with bias."""
    if not _is_op(call, "nn.bias_add", "add"):
        return None
    if call.op.name == "nn.bias_add" and int(call.attrs.axis) not in (3, -1):
        return None
    spec = _open_fused(call.args[0], original.args[0], uses, free=("bias", "activation"))
    if spec is None:
        return None
    bias = _per_channel_bias(call.args[1], original.args[1].checked_type, spec.out_channels)
    return None if bias is None else _regrow(call.args[0], spec, bias=bias)


def _absorb_residual(call, original, uses):
    """``add(fused, r)`` or ``add(r, fused)`` with ``r`` of the output's shape -> fused with
    residual ``r`` (a ResNet shortcut). Only the conv chain's single consumer may be the add."""
    if not _is_op(call, "add"):
        return None
    out_type = original.checked_type
    for mine, other in ((0, 1), (1, 0)):
        spec = _open_fused(
            call.args[mine], original.args[mine], uses, free=("residual", "activation")
        )
        if spec is not None and tvm.ir.structural_equal(
            original.args[other].checked_type, out_type
        ):
            return _regrow(call.args[mine], spec, residual=call.args[other])
    return None


def _constant_value(value) -> float:
    return float(value.value if hasattr(value, "value") else value)


def _activation_of(call):
    """``(activation, alpha)`` that a single-input call applies, or None."""
    if _is_op(call, "nn.relu"):
        return "relu", 0.0
    if _is_op(call, "sigmoid"):
        return "sigmoid", 0.0
    if _is_op(call, "nn.leaky_relu"):
        return "leaky_relu", float(call.attrs.alpha)
    if _is_op(call, "clip"):
        bounds = (_constant_value(call.attrs.a_min), _constant_value(call.attrs.a_max))
        return {(0.0, 6.0): ("relu6", 0.0)}.get(bounds)
    return None


def _absorb_activation(call, original, uses):
    """``relu | relu6 (clip 0..6) | leaky_relu | sigmoid (fused)`` -> fused with activation."""
    activation = _activation_of(call)
    if activation is None:
        return None
    spec = _open_fused(call.args[0], original.args[0], uses, free=("activation",))
    if spec is None:
        return None
    return _regrow(call.args[0], spec, activation=activation[0], alpha=activation[1])


def _absorb_silu(call, original, uses):
    """``multiply(fused, sigmoid(fused))`` -> fused with activation silu. The fused output has
    exactly the two consumers of the pattern; the sigmoid, one."""
    if not _is_op(call, "multiply"):
        return None
    for mine, gate in ((0, 1), (1, 0)):
        sig, sig_original = call.args[gate], original.args[gate]
        if not (isinstance(sig, relay.Call) and _is_op(sig, "sigmoid")):
            continue
        if not sig_original.args[0].same_as(original.args[mine]) or uses.get(sig_original) != 1:
            continue
        spec = _open_fused(
            call.args[mine], original.args[mine], uses, free=("activation",), consumers=2
        )
        if spec is not None:
            return _regrow(call.args[mine], spec, activation="silu")
    return None


#: The fusion rules, tried in order on every call after its arguments were rewritten; the
#: first that applies wins. Each returns the grown fused call, or None.
RULES = (_conv_to_fused, _absorb_bias, _absorb_residual, _absorb_activation, _absorb_silu)


class _ChainFuser(relay.ExprMutator):
    """Rebuilds a function post-order, growing fused calls with ``RULES``."""

    def __init__(self, uses):
        super().__init__()
        self.uses = uses

    def visit_call(self, call):
        rebuilt = super().visit_call(call)
        if not isinstance(rebuilt, relay.Call):
            return rebuilt
        for rule in RULES:
            grown = rule(rebuilt, call, self.uses)
            if grown is not None:
                return grown
        return rebuilt


def fuse_function(func: relay.Function) -> relay.Function:
    """Fuse every eligible conv chain of one type-checked function."""
    with deep_recursion():
        return _ChainFuser(use_counts(func)).visit(func)


def _is_primitive(func) -> bool:
    return bool(func.attrs) and bool(func.attrs.get("Primitive"))


def FuseConvBiasAct() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM pass style)
    """Fuse ``conv2d (NHWC) -> [bias] -> [relu]`` chains into one tvm_fuse fused call."""

    def transform(mod, _ctx):
        mod = relay.transform.InferType()(mod)
        updates = {
            gv: fuse_function(func)
            for gv, func in mod.functions.items()
            if isinstance(func, relay.Function) and not _is_primitive(func)
        }
        for gv, func in updates.items():
            mod[gv] = func
        return relay.transform.InferType()(mod)

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.FuseConvBiasAct")
