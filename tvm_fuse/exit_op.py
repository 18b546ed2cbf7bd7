"""The Relay op ``tvm_fuse.nhwc_to_nchw``: the transpose that takes an NHWC activation back to
NCHW at the graph's exit.

``ConvertLayoutNHWC`` leaves one ``layout_transform(NHWC -> NCHW)`` wherever an activation
leaves the NHWC region (a graph output, a flatten before dense). Those are the graph half's own
transforms, so it also picks their kernel: this op, whose strategy (``tvm_fuse.strategy``) is a
cache-blocked transpose on CPUs (``schedules.nhwc_to_nchw``) and TVM's injective schedule
elsewhere. It computes exactly what ``layout_transform`` does. OPAQUE to ``FuseOps``: its
schedule assumes it is alone in its kernel.
"""

from __future__ import annotations

import tvm
from tvm import relay
from tvm.relay.op import op as _op

from .ir_utils import op_is_registered

OP_NAME = "tvm_fuse.nhwc_to_nchw"


#: The ops that change an activation's or weight's layout: TVM's and this one.
LAYOUT_TRANSFORM_OPS = ("layout_transform", OP_NAME)


def _register():
    if op_is_registered(OP_NAME):
        return
    _op.register(OP_NAME, "NHWC -> NCHW transpose of an activation at the graph exit (tvm_fuse).")
    exit_op = relay.op.get(OP_NAME)
    exit_op.set_num_inputs(1)
    exit_op.add_argument("data", "Tensor", "4-D NHWC activation")
    exit_op.add_type_rel("TvmFuseNHWCToNCHWRel", _type_relation)
    _op.register_pattern(OP_NAME, _op.OpPattern.OPAQUE)


def _type_relation(arg_types, _attrs):
    (data,) = arg_types
    n, h, w, c = data.shape
    return relay.TensorType((n, c, h, w), data.dtype)


def nhwc_to_nchw(data: relay.Expr) -> relay.Call:
    return relay.Call(relay.op.get(OP_NAME), [data], tvm.ir.make_node("DictAttrs"))


def is_exit_transform(call: relay.Call) -> bool:
    """A ``layout_transform`` NHWC -> NCHW of a 4-D, statically shaped, non-constant tensor."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "layout_transform"):
        return False
    if (call.attrs.src_layout, call.attrs.dst_layout) != ("NHWC", "NCHW"):
        return False
    data = call.args[0]
    shape = data.checked_type.shape
    static = all(isinstance(d, tvm.tir.IntImm) for d in shape)
    return len(shape) == 4 and static and not isinstance(data, relay.Constant)


_register()
