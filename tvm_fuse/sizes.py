"""Tensor sizes a build can run: refused before compiling, with the tensor's name and size.

TVM indexes a buffer with int32 when its shape fits (a tensor of 2^31 elements or more fails deep
in lowering with an ``InternalError``), and a tensor larger than this machine's memory compiles
and then fails at load time with ``std::bad_alloc``. So every input and every intermediate of the
module is checked first: elements below 2^31, bytes below the physical memory.
"""

from __future__ import annotations

import os

import numpy as np
import tvm
from tvm import relay

from .errors import UserError

INT32_ELEMENTS = 2**31 - 1


def physical_memory() -> int:
    """Bytes of RAM in this machine (0 if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_tensor_sizes(mod: tvm.IRModule, where: str = "tvm_fuse") -> None:
    """A UserError naming the first input or op of ``mod['main']`` whose tensor is too large."""
    main = relay.transform.InferType()(mod)["main"]
    for param in main.params:
        _check(where, f"input {param.name_hint!r}", param.checked_type)
    calls = []
    relay.analysis.post_order_visit(
        main.body, lambda e: calls.append(e) if isinstance(e, relay.Call) else None
    )
    for call in calls:
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else "a function call"
        _check(where, f"the output of {name}", call.checked_type)


def _check(where: str, what: str, ty) -> None:
    if isinstance(ty, relay.TupleType):
        for field in ty.fields:
            _check(where, what, field)
        return
    if not isinstance(ty, relay.TensorType):
        return
    dims = [int(d) for d in ty.shape if isinstance(d, tvm.tir.IntImm)]
    if len(dims) == len(ty.shape):  # dynamic: refused elsewhere, with how to make it static
        check_shape(where, what, dims, ty.dtype)


def check_shape(where: str, what: str, dims, dtype) -> None:
    """A UserError if a ``dtype`` tensor of shape ``dims`` is too large (see the module)."""
    elements = int(np.prod(dims, dtype=object))
    size = elements * np.dtype(dtype).itemsize
    shape = "[" + ",".join(map(str, dims)) + "]"
    if elements > INT32_ELEMENTS:
        raise UserError(
            f"{where}: {what} has shape {shape}, {elements:,} elements: more than TVM's int32 "
            f"indexing allows ({INT32_ELEMENTS:,}); use a smaller shape"
        )
    memory = physical_memory()
    if memory and size > memory:
        raise UserError(
            f"{where}: {what} has shape {shape}, {size / 2**30:.1f} GiB: more than this "
            f"machine's {memory / 2**30:.1f} GiB of memory; use a smaller shape"
        )
