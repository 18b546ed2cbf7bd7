"""Small Relax modules built with ``relax.BlockBuilder``, and running them, for the Relax suite."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from tvm_fuse.relax import compat


def tensor_var(name, shape, dtype="float32"):
    return relax.Var(name, compat.TensorType(shape, dtype))


def module(inputs, body):
    """A module whose ``main`` takes the vars ``inputs`` and whose dataflow block is built by
    ``body(bb, *inputs)``, which returns the output expression."""
    bb = relax.BlockBuilder()
    with bb.function("main", list(inputs)):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *inputs))
        bb.emit_func_output(out)
    return bb.get()


def conv_nchw(x, w, strides=1, padding=1, dilation=1, groups=1):
    return relax.op.nn.conv2d(
        x, relax.const(w), strides=strides, padding=padding, dilation=dilation, groups=groups
    )


def batch_norm(
    bb, x, gamma, beta, mean, var, eps=1e-5, center=True, scale=True, axis=1, training=False
):
    consts = [relax.const(np.asarray(v, "float32")) for v in (gamma, beta, mean, var)]
    bn = relax.op.nn.batch_norm(
        x, *consts, axis=axis, epsilon=eps, center=center, scale=scale, training=training
    )
    bn = bb.emit(bn)
    return bb.emit(relax.TupleGetItem(bn, 0))


def run(exe_or_mod, *inputs, target=None):
    """Run ``main`` of a compiled executable (or compile a module with stock ``tvm.compile``)."""
    if isinstance(exe_or_mod, tvm.IRModule):
        exe_or_mod = tvm.compile(exe_or_mod, target=target or compat.host_target())
    vm = relax.VirtualMachine(exe_or_mod, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs])
    return out.numpy()


def op_names(mod, func="main") -> list[str]:
    """The ops ``func`` calls, in order (``call_tir`` as ``call_tir:<callee>``)."""
    names = []
    for block in mod[func].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            if isinstance(value.op, tvm.ir.Op):
                name = value.op.name
                if name == "relax.call_tir":
                    name += ":" + value.args[0].name_hint
                names.append(name)
            elif isinstance(value.op, tvm.ir.GlobalVar):
                names.append("call:" + value.op.name_hint)
    return names


def transposes(names: list[str]) -> list[str]:
    """The layout transposes among ``op_names``: ``permute_dims`` and tvm_fuse's entry and exit
    kernels."""
    blocked = ("relax.call_tir:tvm_fuse_nchw_to_nhwc", "relax.call_tir:tvm_fuse_nhwc_to_nchw")
    return [n for n in names if n == "relax.permute_dims" or n.startswith(blocked)]
