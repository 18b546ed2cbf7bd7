"""The Relay ops ``tvm_fuse.nchw_to_nhwc`` and ``tvm_fuse.nhwc_to_nchw``: the transposes that take
an activation into the graph's NHWC region at its entry and back to NCHW at its exit.

``ConvertLayoutNHWC`` leaves one ``layout_transform`` between NCHW and NHWC wherever an
activation enters or leaves the NHWC region (a graph input, a graph output, a flatten before
dense). Those are the graph half's own transforms, so it also picks their kernels: these ops,
whose strategies (``tvm_fuse.strategy``) are cache-blocked transposes on CPUs
(``schedules.transposes``) and TVM's injective schedule elsewhere. Each computes exactly what
its ``layout_transform`` does. OPAQUE to ``FuseOps``: their schedule assumes they are alone in
their kernel.
"""

from __future__ import annotations

import tvm
from tvm import relay
from tvm.relay.op import op as _op

from .ir_utils import op_is_registered

OP_NAME = "tvm_fuse.nhwc_to_nchw"
ENTRY_OP_NAME = "tvm_fuse.nchw_to_nhwc"
#: (src, dst) layouts of each op.
LAYOUTS = {ENTRY_OP_NAME: ("NCHW", "NHWC"), OP_NAME: ("NHWC", "NCHW")}

#: The ops that change an activation's or weight's layout: TVM's and these.
LAYOUT_TRANSFORM_OPS = ("layout_transform", ENTRY_OP_NAME, OP_NAME)


def _register(name: str, src: str, dst: str):
    if op_is_registered(name):
        return
    _op.register(name, f"{src} -> {dst} transpose of an activation at the NHWC region's boundary.")
    op = relay.op.get(name)
    op.set_num_inputs(1)
    op.add_argument("data", "Tensor", f"4-D {src} activation")
    op.add_type_rel(f"TvmFuse{src}To{dst}Rel", _type_relation(src, dst))
    _op.register_pattern(name, _op.OpPattern.OPAQUE)


def _type_relation(src: str, dst: str):
    def relation(arg_types, _attrs):
        (data,) = arg_types
        dims = dict(zip(src, data.shape))
        return relay.TensorType([dims[axis] for axis in dst], data.dtype)

    return relation


def transpose(name: str, data: relay.Expr) -> relay.Call:
    """A call of the op ``name`` of this module on ``data``."""
    return relay.Call(relay.op.get(name), [data], tvm.ir.make_node("DictAttrs"))


def nhwc_to_nchw(data: relay.Expr) -> relay.Call:
    return transpose(OP_NAME, data)


def nchw_to_nhwc(data: relay.Expr) -> relay.Call:
    return transpose(ENTRY_OP_NAME, data)


def entry_input(expr: relay.Expr) -> relay.Expr | None:
    """The NCHW tensor ``expr`` is the entry transpose (``tvm_fuse.nchw_to_nhwc``) of, or None."""
    entry = relay.op.get(ENTRY_OP_NAME)
    return expr.args[0] if isinstance(expr, relay.Call) and expr.op == entry else None


def boundary_op(call: relay.Call) -> str | None:
    """The op of this module that computes ``call``, a ``layout_transform`` NCHW <-> NHWC of a
    4-D, statically shaped, non-constant tensor; None for any other call."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "layout_transform"):
        return None
    layouts = (call.attrs.src_layout, call.attrs.dst_layout)
    name = next((name for name, pair in LAYOUTS.items() if pair == layouts), None)
    data = call.args[0]
    shape = data.checked_type.shape
    static = all(isinstance(d, tvm.tir.IntImm) for d in shape)
    if name is None or len(shape) != 4 or not static or isinstance(data, relay.Constant):
        return None
    return name


for _name, (_src, _dst) in LAYOUTS.items():
    _register(_name, _src, _dst)
