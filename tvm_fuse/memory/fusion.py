"""What fusion removed: the tensors computed inside a kernel that never reach memory.

Sits beside liveness, on the same fused module (``relay_kernels.kernel_module``, or the result of
``relay.optimize``). Inside a primitive function every op result except the function's results is
such a tensor (an unfused graph would have allocated it); reshape-like ops are skipped, as the
executor aliases them anyway. A ``tvm_fuse.conv2d_nhwc_fused`` call stands for conv2d followed by
its epilogue, so it keeps one output-shaped tensor inside per epilogue stage (bias, residual add,
activation): in the seed's example, ``conv_out`` and ``bn_out``.
"""

from __future__ import annotations

from tvm import relay

from .. import op as fused_op
from .liveness import Tensor, tensor_bytes
from .relay_kernels import (
    is_primitive_call,
    is_reshape_only,
    kernel_module,
    post_order,
    tensor_types,
)


def _results(body) -> set:
    """The calls whose values leave the function (through tuples and reshapes)."""
    pending, found = [body], set()
    while pending:
        expr = pending.pop()
        if isinstance(expr, relay.Tuple):
            pending.extend(expr.fields)
        elif isinstance(expr, relay.Call) and is_reshape_only(expr):
            pending.append(expr.args[0])
        else:
            found.add(expr)
    return found


def _stages(call) -> list[str]:
    """The tensors a fused-op call computes in turn; the last one is its output."""
    spec = fused_op.spec_of_call(call)
    stages = ["conv2d"] + ["bias"] * (spec.bias is not None)
    stages += ["residual_add"] * (spec.residual is not None)
    return stages + [spec.activation] * (spec.activation != "none")


def _inside(call) -> list:
    """(name, type) of each tensor a kernel call keeps inside."""
    if fused_op.is_fused_call(call):
        return [(f"{fused_op.OP_NAME}:{s}", call.checked_type) for s in _stages(call)[:-1]]
    if not is_primitive_call(call):
        return []
    calls = []
    relay.analysis.post_order_visit(
        call.op.body, lambda e: calls.append(e) if isinstance(e, relay.Call) else None
    )
    results = _results(call.op.body)
    kept = []
    for inner in calls:
        if fused_op.is_fused_call(inner):
            kept.extend(_inside(inner))
        if inner not in results and not is_reshape_only(inner):
            kept.append((inner.op.name, inner.checked_type))
    return kept


def fused_away(mod, params=None, fuse_opt_level: int = 2) -> list[Tensor]:
    """The tensors the kernels of ``mod`` (fused as ``kernel_module`` does) keep inside, in
    execution order; ``start``/``end`` are the step of the kernel that computes them."""
    main = kernel_module(mod, params, fuse_opt_level)["main"]
    kernels = [e for e in post_order(main.body) if isinstance(e, relay.Call)]
    kept = []
    for step, call in enumerate(k for k in kernels if not is_reshape_only(k)):
        for name, ty in _inside(call):
            for shape, dtype in tensor_types(ty, name):
                kept.append(Tensor(name, shape, dtype, tensor_bytes(shape, dtype), step, step))
    return kept
