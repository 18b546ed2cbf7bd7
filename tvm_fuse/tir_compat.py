"""The TIR that tvm_fuse's lower pass (``tvm_fuse.lowering``) reads and writes, on either stack.

TVM 0.19 (the Relay backend) has ``tvm.tir`` with ``tir.stmt_functor`` to walk and rewrite IR
and buffer loads that name a ``Buffer``. apache-tvm 0.27 (the Relax backend) has ``tvm.tirx``,
walks and rewrites IR with ``tvm_ffi``'s structural functions, and its loads name the buffer's
data var (``source``) and its stores the var itself. The few operations the pass needs are here,
one function each; ``tir`` is whichever module this TVM has.
"""

from __future__ import annotations

import math

import tvm

try:  # TVM 0.19
    from tvm import tir

    _FFI = None
    _LOAD = tir.BufferLoad
    #: The statement that allocates a buffer.
    ALLOCATE = tir.Allocate
except ImportError:  # apache-tvm 0.27
    import tvm_ffi as _FFI
    from tvm import tirx as tir
    from tvm.ir.expr import TensorLoad as _LOAD

    ALLOCATE = tir.AllocBuffer

#: The intrinsics' namespace: "tir" or "tirx".
_OPS = tir.__name__.rsplit(".", 1)[1]
#: The prefetch call's type: 0.27's LLVM codegen finds ``llvm.prefetch`` only as void.
_PREFETCH_TYPE = "float32" if _FFI is None else "void"


def post_order_visit(node, visit) -> None:
    """Call ``visit`` on every node under ``node``, children first."""
    if _FFI is None:
        tir.stmt_functor.post_order_visit(node, visit)
    else:

        def walk(n):
            visit(n)

        _FFI.structural_walk(node, walk)


def rewrite(node, replace, node_type):
    """``node`` with each ``node_type`` node under it replaced by ``replace(n)`` (children
    first); ``replace`` returns None to keep ``n``."""
    if _FFI is None:
        return tir.stmt_functor.ir_transform(node, None, replace, [f"tir.{node_type.__name__}"])

    def mapped(n):
        new = replace(n)
        return n if new is None else new

    return _FFI.structural_map(node, (node_type, mapped))


def dtype(expr) -> str:
    """The dtype of a PrimExpr (``.ty.dtype`` in 0.27)."""
    return str(expr.dtype) if _FFI is None else str(expr.ty.dtype)


def is_vector_load(node) -> bool:
    """Whether ``node`` loads a vector (its last index a ``Ramp``)."""
    return isinstance(node, _LOAD) and isinstance(node.indices[-1], tir.Ramp)


def loaded_data(load):
    """The data var a buffer load reads."""
    return load.buffer.data if _FFI is None else load.source


def stored_data(node):
    """The data var ``node`` stores to, if it is a buffer store; else None."""
    if not isinstance(node, tir.BufferStore):
        return None
    return node.buffer.data if _FFI is None else node.buffer


def prefetch(load, last_index, locality: int):
    """A prefetch (``llvm.prefetch`` with ``locality``) of the element ``load`` reads with its
    last index replaced by ``last_index``."""
    if _FFI is None:
        ahead = tir.BufferLoad(load.buffer, [*load.indices[:-1], last_index])
        address = tir.call_intrin("handle", "tir.address_of", ahead)
    else:
        address = tir.address_of(tir.BufferLoad(load.source, [*load.indices[:-1], last_index]))
    call = tir.call_intrin(_PREFETCH_TYPE, f"{_OPS}.prefetch", address, 0, locality, 1)
    return tir.Evaluate(call)


def allocation(node):
    """(data var, bytes) of an ``ALLOCATE`` statement; bytes None if its shape is not
    constant."""
    if _FFI is None:
        data, dtype, extents = node.buffer_var, node.dtype, node.extents
    else:
        data, dtype, extents = node.buffer, node.buffer.dtype, node.buffer.shape
    if not all(isinstance(extent, tir.IntImm) for extent in extents):
        return data, None
    dtype = tvm.DataType(str(dtype))
    return data, math.prod(int(e) for e in extents) * dtype.bits * dtype.lanes // 8


def with_annotation(node, key: str):
    """The ``ALLOCATE`` statement ``node`` with the annotation ``key`` set."""
    flag = True if _FFI is None else tir.const(True, "bool")
    annotations = {**node.annotations, key: flag}
    if _FFI is None:
        return tir.Allocate(
            node.buffer_var, node.dtype, node.extents, node.condition, node.body, annotations
        )
    return tir.AllocBuffer(node.buffer, annotations=annotations)


def loop_vars(stmt) -> list:
    """The variables of the loops under ``stmt``."""
    found = []
    post_order_visit(stmt, lambda n: found.append(n.loop_var) if isinstance(n, tir.For) else None)
    return found


def with_body(loop, body, annotations=None):
    """``loop`` (a ``For``) with ``body`` as its body (and ``annotations``, if given). On 0.27,
    which checks that IR is in SSA form, the copy defines loop variables of its own, its own
    and those of the loops in ``body``."""
    annotations = loop.annotations if annotations is None else annotations
    step = {"step": loop.step} if getattr(loop, "step", None) is not None else {}
    var = loop.loop_var
    if _FFI is not None:
        fresh = {old: tir.Var(old.name, old.ty) for old in [var, *loop_vars(body)]}
        body = rewrite(body, fresh.get, tir.Var)
        var = fresh[var]
    return tir.For(
        var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, annotations, **step
    )
