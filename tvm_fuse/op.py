"""The fused Relay op ``tvm_fuse.conv2d_nhwc_fused``: registration, type relation, spec <-> call.

One call of this op is one fused kernel. Its arguments are ``data`` (NHWC), ``weight`` (in the
spec's weight layout: ``HWIO`` as the graph half makes it, or a packed layout the kernel asks
for), then ``bias`` ([Co]) and ``residual`` (the output's shape) when the spec has them. Its
attributes encode the whole :class:`tvm_fuse.spec.KernelSpec`, one attribute per spec field, so
the spec of a call is known without type inference: :func:`fused_call` is the one way to build a
call and :func:`spec_of_call` the one way back. The type relation takes the output type from the
spec and refuses arguments whose types disagree with it.

The op is OPAQUE to ``FuseOps``: the epilogue is already inside it, and the kernel half, not
TVM's generic fusion, decides how it is computed. Importing this module registers the op once.
"""

from __future__ import annotations

import dataclasses
import functools

import tvm
from tvm import relay
from tvm.relay.op import op as _op

from .ir_utils import op_is_registered
from .spec import KernelSpec

OP_NAME = "tvm_fuse.conv2d_nhwc_fused"


def _register():
    if op_is_registered(OP_NAME):
        return
    _op.register(OP_NAME, "Fused NHWC conv2d + bias + [residual add] + activation (tvm_fuse).")
    fused = relay.op.get(OP_NAME)
    fused.set_num_inputs(-1)  # data, weight, then optional bias and residual
    fused.add_argument("data", "Tensor", "NHWC input")
    fused.add_argument("weight", "Tensor", "weight in the spec's weight layout")
    fused.add_argument("bias", "Tensor", "[Co] bias, present when the spec has one")
    fused.add_argument("residual", "Tensor", "output-shaped addend, when the spec has one")
    fused.add_type_rel("TvmFuseConv2DNHWCFusedRel", _type_relation)
    _op.register_pattern(OP_NAME, _op.OpPattern.OPAQUE)


# -- spec <-> attrs ---------------------------------------------------------------------------
def _to_attr(value):
    """A spec field as an attribute value; floats as float64 so that they round-trip exactly."""
    if isinstance(value, float):
        return tvm.tir.FloatImm("float64", value)
    if isinstance(value, dict):
        return tvm.runtime.convert({k: _to_attr(v) for k, v in value.items()})
    if isinstance(value, (tuple, list)):
        return tvm.runtime.convert([_to_attr(v) for v in value])
    return value


def _from_attr(value):
    """An attribute value as plain Python (the inverse of :func:`_to_attr`)."""
    if isinstance(value, (tvm.tir.IntImm, tvm.tir.FloatImm)):
        return value.value
    if isinstance(value, tvm.ir.container.Map):
        return {str(k): _from_attr(v) for k, v in value.items()}
    if isinstance(value, tvm.ir.container.Array):
        return [_from_attr(v) for v in value]
    if isinstance(value, tvm.runtime.container.String):
        return str(value)
    return value


def spec_attrs(spec: KernelSpec):
    """The fused op's attributes for ``spec`` (a ``DictAttrs``, one entry per spec field)."""
    fields = {name: _to_attr(value) for name, value in spec.to_dict().items()}
    return tvm.ir.make_node("DictAttrs", **fields)


#: Type inference asks for the spec of every fused call at each of its many rounds in a build
#: (ResNet-18: 2,500 times for 22 calls), and reading it from the attributes goes through the FFI
#: field by field: without this cache, a fifth of ``tvm_fuse.build``'s time on ResNet-18. Keyed
#: by the attributes object (TVM hashes and compares Objects by address); each entry holds its
#: key alive, so an address is not reused while cached; the attributes and the spec are immutable.
SPEC_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=SPEC_CACHE_SIZE)
def spec_of_attrs(attrs) -> KernelSpec:
    """The spec that the fused op's attributes encode (the inverse of :func:`spec_attrs`). A
    field the attributes lack (a call saved before the field existed) takes its default."""
    names = [f.name for f in dataclasses.fields(KernelSpec)]
    present = set(attrs.keys())
    return KernelSpec.from_dict(
        {name: _from_attr(attrs[name]) for name in names if name in present}
    )


# -- calls --------------------------------------------------------------------------------------
def fused_call(spec: KernelSpec, data, weight, bias=None, residual=None) -> relay.Call:
    """One call of the fused op computing ``spec``: the one way to build it.

    ``bias`` and ``residual`` are given exactly when the spec has them."""
    given = {"bias": bias, "residual": residual}
    for name, arg in given.items():
        if arg is None and getattr(spec, name) is not None:
            raise ValueError(f"{OP_NAME}: the spec has a {name}; pass {name}= as well")
        if arg is not None and getattr(spec, name) is None:
            raise ValueError(
                f"{OP_NAME}: the spec has no {name}; add it with dataclasses.replace(spec, ...)"
            )
    args = [data, weight] + [arg for arg in given.values() if arg is not None]
    return relay.Call(relay.op.get(OP_NAME), args, spec_attrs(spec))


def is_fused_call(expr) -> bool:
    return (
        isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == OP_NAME
    )


def spec_of_call(call) -> KernelSpec:
    """The task description of a fused call (no type inference needed)."""
    if not is_fused_call(call):
        raise ValueError(f"spec_of_call: expected a call of {OP_NAME}, got {type(call).__name__}")
    return spec_of_attrs(call.attrs)


def call_arguments(call) -> dict:
    """The fused call's arguments by name: data, weight, and bias / residual when present."""
    return dict(zip(spec_of_call(call).argument_names, call.args))


# -- type relation ------------------------------------------------------------------------------
def _type_relation(arg_types, attrs):
    spec = spec_of_attrs(attrs)
    names = spec.argument_names
    if len(arg_types) != len(names):
        raise ValueError(
            f"{OP_NAME}: {len(arg_types)} arguments, the spec wants {len(names)} ({', '.join(names)})"
        )
    for name, ty in zip(names, arg_types):
        _check_argument(name, ty, getattr(spec, name))
    return relay.TensorType(spec.out.shape, spec.out.dtype)


def _check_argument(name, ty, tensor) -> None:
    """Refuse an argument whose (static) type disagrees with the spec in the attributes."""
    if tvm.ir.structural_equal(ty, _tensor_type(tensor)):
        return  # the usual case, one FFI call; the walk below explains or allows the others
    if not isinstance(ty, relay.TensorType):
        return
    if not all(isinstance(d, tvm.tir.IntImm) for d in ty.shape):
        return
    shape = tuple(int(d) for d in ty.shape)
    if shape != tensor.shape or str(ty.dtype) != tensor.dtype:
        raise ValueError(
            f"{OP_NAME}: argument {name} is {ty.dtype}{list(shape)}, but the call's spec says "
            f"{tensor.dtype}{list(tensor.shape)}; rebuild the call with fused_call(spec, ...)"
        )


@functools.lru_cache(maxsize=SPEC_CACHE_SIZE)
def _tensor_type(tensor) -> relay.TensorType:
    return relay.TensorType(tensor.shape, tensor.dtype)


_register()
