"""The fused Relay op ``tvm_fuse.conv2d_nhwc_fused``: registration, type relation, attrs <-> spec.

One call of this op is one fused kernel. Its arguments are ``data`` (NHWC), ``weight`` (in
``kernel_layout``: ``HWIO`` as the graph half makes it, or a packed layout the kernel asks for),
then ``bias`` ([Co]) if ``has_bias`` and ``residual`` (the output's shape) if ``has_residual``.
Its attributes carry the rest of the task description (``docs/architecture.md``) and convert
both ways to :class:`tvm_fuse.spec.KernelSpec`.

The op is OPAQUE to ``FuseOps``: the epilogue is already inside it, and the kernel half, not
TVM's generic fusion, decides how it is computed. Importing this module registers the op once.
"""

from __future__ import annotations

import re

import tvm
from tvm import relay
from tvm.relay.op import op as _op

from .ir_utils import op_is_registered
from .spec import KernelSpec, TensorSpec

OP_NAME = "tvm_fuse.conv2d_nhwc_fused"


def _register():
    if op_is_registered(OP_NAME):
        return
    _op.register(OP_NAME, "Fused NHWC conv2d + bias + [residual add] + activation (tvm_fuse).")
    fused = relay.op.get(OP_NAME)
    fused.set_num_inputs(-1)  # data, weight, then optional bias and residual
    fused.add_argument("data", "Tensor", "NHWC input")
    fused.add_argument("weight", "Tensor", "weight in attrs.kernel_layout")
    fused.add_argument("bias", "Tensor", "[Co] bias, present when attrs.has_bias")
    fused.add_argument("residual", "Tensor", "output-shaped addend, when attrs.has_residual")
    fused.add_type_rel("TvmFuseConv2DNHWCFusedRel", _type_relation)
    _op.register_pattern(OP_NAME, _op.OpPattern.OPAQUE)


def kernel_out_channels_and_window(kernel_layout: str, shape) -> tuple[int, int, int]:
    """(Co, Kh, Kw) of a weight in ``HWIO``, ``OHWI`` or a packed ``OHWI{n}o`` layout."""
    base = re.sub(r"\d+o$", "", kernel_layout)
    if base not in ("HWIO", "OHWI"):
        raise ValueError(f"{OP_NAME}: unsupported kernel_layout {kernel_layout!r}")
    dims = dict(zip(base, (int(d) for d in shape)))
    block = int(shape[4]) if len(shape) == 5 else 1
    return dims["O"] * block, dims["H"], dims["W"]


def output_shape(data_shape, attrs) -> tuple[int, int, int, int]:
    """NHWC output shape, from 4-sided padding, strides and dilation. Co is ``attrs["channels"]``
    when given (a packed weight padded to whole vectors has more), else the weight's."""
    n, h, w, _ = (int(d) for d in data_shape)
    co, kh, kw = kernel_out_channels_and_window(attrs["kernel_layout"], attrs["weight_shape"])
    co = attrs.get("channels") or co
    top, left, bottom, right = (int(p) for p in attrs["padding"])
    sh, sw = (int(s) for s in attrs["strides"])
    dh, dw = (int(d) for d in attrs["dilation"])
    ho = (h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
    wo = (w + left + right - ((kw - 1) * dw + 1)) // sw + 1
    return n, ho, wo, co


def _type_relation(arg_types, attrs):
    data, weight = arg_types[0], arg_types[1]
    shape_attrs = {
        "kernel_layout": str(attrs["kernel_layout"]),
        "weight_shape": [int(d) for d in weight.shape],
        "padding": attrs["padding"],
        "strides": attrs["strides"],
        "dilation": attrs["dilation"],
        "channels": _channels(attrs),
    }
    return relay.TensorType(output_shape(data.shape, shape_attrs), str(attrs["out_dtype"]))


def _channels(attrs) -> int | None:
    return int(attrs["channels"]) if "channels" in attrs else None


# -- attrs <-> KernelSpec ---------------------------------------------------------------------
def make_attrs(
    *,
    strides,
    padding,
    dilation,
    kernel_layout="HWIO",
    out_dtype="float32",
    activation="none",
    alpha=0.0,
    has_bias=False,
    has_residual=False,
    channels=None,
):
    """The fused op's attributes (a ``DictAttrs``). ``channels`` (the real Co) is set only for a
    packed weight whose Co was padded up to whole vectors; the attribute is absent otherwise."""
    extra = {} if channels is None else {"channels": int(channels)}
    return tvm.ir.make_node(
        "DictAttrs",
        strides=[int(s) for s in strides],
        padding=[int(p) for p in padding],
        dilation=[int(d) for d in dilation],
        kernel_layout=kernel_layout,
        out_dtype=out_dtype,
        activation=activation,
        alpha=float(alpha),
        has_bias=bool(has_bias),
        has_residual=bool(has_residual),
        **extra,
    )


def fused_conv2d(data, weight, bias=None, residual=None, **attrs) -> relay.Call:
    """Build one call of the fused op. ``attrs`` are those of :func:`make_attrs`."""
    args = [data, weight] + [a for a in (bias, residual) if a is not None]
    attrs = make_attrs(has_bias=bias is not None, has_residual=residual is not None, **attrs)
    return relay.Call(relay.op.get(OP_NAME), args, attrs)


def read_attrs(attrs) -> dict:
    """The fused op's attributes as plain Python values."""
    return {
        "strides": tuple(int(v) for v in attrs["strides"]),
        "padding": tuple(int(v) for v in attrs["padding"]),
        "dilation": tuple(int(v) for v in attrs["dilation"]),
        "kernel_layout": str(attrs["kernel_layout"]),
        "out_dtype": str(attrs["out_dtype"]),
        "activation": str(attrs["activation"]),
        "alpha": float(attrs["alpha"]),
        "has_bias": bool(attrs["has_bias"]),
        "has_residual": bool(attrs["has_residual"]),
        "channels": _channels(attrs),
    }


def is_fused_call(expr) -> bool:
    return (
        isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == OP_NAME
    )


def _tensor_spec(ty, layout) -> TensorSpec:
    return TensorSpec(tuple(int(d) for d in ty.shape), layout, str(ty.dtype))


def spec_from_call(call) -> KernelSpec:
    """The task description of a type-checked fused call."""
    attrs = read_attrs(call.attrs)
    types = [arg.checked_type for arg in call.args]
    extra = iter(types[2:])
    bias = _tensor_spec(next(extra), "C") if attrs["has_bias"] else None
    residual = _tensor_spec(next(extra), "NHWC") if attrs["has_residual"] else None
    return KernelSpec(
        data=_tensor_spec(types[0], "NHWC"),
        weight=_tensor_spec(types[1], attrs["kernel_layout"]),
        out=_tensor_spec(call.checked_type, "NHWC"),
        bias=bias,
        residual=residual,
        strides=attrs["strides"],
        padding=attrs["padding"],
        dilation=attrs["dilation"],
        activation=attrs["activation"],
        alpha=attrs["alpha"],
    )


def attrs_from_spec(spec: KernelSpec):
    """The fused op's attributes for a task description (the inverse of spec_from_call)."""
    weight_co, _, _ = kernel_out_channels_and_window(spec.weight.layout, spec.weight.shape)
    return make_attrs(
        strides=spec.strides,
        padding=spec.padding,
        dilation=spec.dilation,
        kernel_layout=spec.weight.layout,
        out_dtype=spec.out.dtype,
        activation=spec.activation,
        alpha=spec.alpha,
        has_bias=spec.bias is not None,
        has_residual=spec.residual is not None,
        channels=None if weight_co == spec.out_channels else spec.out_channels,
    )


_register()
