"""FuseConvBiasAct: the fusion decision — conv2d chains become one ``tvm_fuse.conv2d_nhwc_fused``.

Where it sits: last pass of ``tvm_fuse.pipeline()``, after ``FoldBatchNorm`` (which turned BN into
a bias) and ``ConvertLayoutNHWC`` (which made convs NHWC/HWIO). It matches::

    %0 = nn.conv2d(%x, %w, data_layout="NHWC", kernel_layout="HWIO")   # groups=1, float32
    %1 = nn.bias_add(%0, %b, axis=3)        # or add(%0, <constant [C] or [1,1,1,C]>); optional
    %2 = nn.relu(%1)                        # optional
    =>  tvm_fuse.conv2d_nhwc_fused(%x, %w, %b, activation="relu", ...)

The chain is grown one step at a time by small rules (``RULES``): each takes the rebuilt call
and the original one and returns the grown fused call, or None when it does not apply. A step is
fused only when the intermediate it swallows has exactly one consumer in the original function,
so no tensor that something else reads is ever fused away.

It refuses (leaves stock ops): other layouts, groups != 1, non-float32 data/weight/output,
dynamic shapes, and bias operands that are not per-output-channel.
"""

from __future__ import annotations

import tvm
from tvm import relay

from .. import op as fused_op
from ..ir_utils import deep_recursion, use_counts


def _static_shape(ty):
    if not isinstance(ty, relay.TensorType):
        return None
    if not all(isinstance(d, tvm.tir.IntImm) for d in ty.shape):
        return None
    return tuple(int(d) for d in ty.shape)


def _conv_to_fused(call, _original, _uses):
    """``nn.conv2d`` in NHWC/HWIO, groups 1, float32 -> fused call with no epilogue."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "nn.conv2d"):
        return None
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout, int(attrs.groups)) != ("NHWC", "HWIO", 1):
        return None
    data_ty, weight_ty = (arg.checked_type for arg in call.args)
    out_dtype = attrs.out_dtype or data_ty.dtype
    if {data_ty.dtype, weight_ty.dtype, out_dtype} != {"float32"}:
        return None
    if _static_shape(data_ty) is None or _static_shape(weight_ty) is None:
        return None
    padding = [int(p) for p in attrs.padding]
    if len(padding) == 2:
        padding = padding * 2
    return fused_op.fused_conv2d(
        call.args[0],
        call.args[1],
        strides=attrs.strides,
        padding=padding,
        dilation=attrs.dilation,
    )


def _open_fused(expr, original, uses, *, free):
    """The fused call ``expr`` if it may still absorb a step: it is a fused call whose
    ``free`` attributes are unset and whose original intermediate has one consumer."""
    if not fused_op.is_fused_call(expr) or uses.get(original, 0) != 1:
        return None
    attrs = fused_op.read_attrs(expr.attrs)
    return attrs if all(not attrs[name] or attrs[name] == "none" for name in free) else None


def _regrow(fused, attrs, *, bias=None, activation=None):
    """A copy of the fused call with a bias and/or activation added."""
    data, weight, *rest = fused.args
    old_bias = rest[0] if attrs["has_bias"] else None
    keep = {k: attrs[k] for k in ("strides", "padding", "dilation", "kernel_layout", "out_dtype")}
    return fused_op.fused_conv2d(
        data,
        weight,
        bias if bias is not None else old_bias,
        activation=activation or attrs["activation"],
        alpha=attrs["alpha"],
        **keep,
    )


def _per_channel_bias(expr, channels):
    """``expr`` as a [C] bias, or None: a [C] tensor, or a constant of shape [1,1,1,C]."""
    shape = _static_shape(expr.checked_type)
    if expr.checked_type.dtype != "float32" or shape is None:
        return None
    if shape == (channels,):
        return expr
    if isinstance(expr, relay.Constant) and shape == (1, 1, 1, channels):
        return relay.const(expr.data.numpy().reshape(channels))
    return None


def _absorb_bias(call, original, uses):
    """``bias_add(fused, b, axis=3)`` or ``add(fused, per-channel const)`` -> fused with bias."""
    if not isinstance(call.op, tvm.ir.Op) or call.op.name not in ("nn.bias_add", "add"):
        return None
    if call.op.name == "nn.bias_add" and int(call.attrs.axis) not in (3, -1):
        return None
    attrs = _open_fused(call.args[0], original.args[0], uses, free=("has_bias", "activation"))
    if attrs is None:
        return None
    channels = _static_shape(original.checked_type)[3]
    bias = _per_channel_bias(call.args[1], channels)
    return None if bias is None else _regrow(call.args[0], attrs, bias=bias)


def _absorb_relu(call, original, uses):
    """``nn.relu(fused)`` -> fused with activation relu."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "nn.relu"):
        return None
    attrs = _open_fused(call.args[0], original.args[0], uses, free=("activation",))
    return None if attrs is None else _regrow(call.args[0], attrs, activation="relu")


#: The fusion rules, tried in order on every call after its arguments were rewritten.
RULES = (_conv_to_fused, _absorb_bias, _absorb_relu)


class _ChainFuser(relay.ExprMutator):
    """Rebuilds a function post-order, growing fused calls with ``RULES``."""

    def __init__(self, uses):
        super().__init__()
        self.uses = uses

    def visit_call(self, call):
        rebuilt = super().visit_call(call)
        for rule in RULES:
            grown = rule(rebuilt, call, self.uses)
            if grown is not None:
                rebuilt = grown
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
