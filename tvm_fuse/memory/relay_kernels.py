"""The Relay front end of liveness: the kernels of a module's ``main``, in graph-executor order.

Sits after the graph half's passes and before the planner. A module whose ``main`` already calls
primitive functions (``FuseOps`` ran, e.g. the result of ``relay.optimize``) is taken as it is;
any other module gets the fusion ``relay.build`` applies first (:func:`kernel_module`). ``main``
is then walked in post-order, arguments left to right: the order ``GraphExecutorCodegen`` emits
nodes in, hence the order the executor runs them. One call of a primitive function, or of an op
left outside one (e.g. ``tvm_fuse.conv2d_nhwc_fused``), is one kernel. Tuples and
``TupleGetItem`` only regroup tensors, as in TVM's graph plan (``graph_plan_memory.cc``);
reshape-only calls alias their input (the executor's ``__nop``).

Refuses, with a ``ValueError`` naming the node: ``If``, ``Let``, calls of global or closure
functions (the graph executor cannot run them), and tensors whose shapes are not static.
"""

from __future__ import annotations

import tvm
from tvm import relay

from .liveness import Liveness, Schedule

FUSION_OPT_LEVEL = 3


def _folding() -> tvm.transform.Pass:
    return tvm.transform.Sequential(
        [
            relay.transform.InferType(),
            relay.transform.SimplifyInference(),
            relay.transform.FoldConstant(),
            relay.transform.FoldScaleAxis(),
            relay.transform.FoldConstant(),
        ]
    )


def _as_module(mod) -> tvm.IRModule:
    if isinstance(mod, relay.Function):
        mod = tvm.IRModule.from_expr(mod)
    if not isinstance(mod, tvm.IRModule) or "main" not in [g.name_hint for g in mod.functions]:
        raise TypeError(f"tvm_fuse.memory: expected a Relay IRModule with a 'main', got {mod!r}")
    return mod


def is_primitive_call(expr) -> bool:
    return (
        isinstance(expr, relay.Call)
        and isinstance(expr.op, relay.Function)
        and int(expr.op.attrs.get("Primitive", 0) if expr.op.attrs else 0) == 1
    )


def is_fused(mod: tvm.IRModule) -> bool:
    """Whether ``main`` already calls primitive functions (``FuseOps`` ran)."""
    found = []
    relay.analysis.post_order_visit(mod["main"], lambda e: found.append(is_primitive_call(e)))
    return any(found)


def folded_module(mod, params=None) -> tvm.IRModule:
    """``mod`` with ``params`` bound and, unless it is already fused, BN simplified and constants
    folded as ``relay.build`` does (``SimplifyInference``, ``FoldConstant``, ``FoldScaleAxis``,
    ``FoldConstant`` under ``opt_level=3``). ``FoldConstant`` compiles every constant
    subexpression: with bound params this takes ~35 s on ResNet-18, as inside ``relay.build``."""
    mod = _as_module(mod)
    if params:
        unknown = sorted(set(params) - {p.name_hint for p in mod["main"].params})
        if unknown:
            raise ValueError(f"tvm_fuse.memory: params {unknown} are not inputs of 'main'")
        mod = tvm.IRModule(dict(mod.functions), mod.type_definitions)
        mod["main"] = relay.build_module.bind_params_by_name(mod["main"], dict(params))
    mod = relay.transform.InferType()(mod)
    if is_fused(mod):
        return mod
    with tvm.transform.PassContext(opt_level=FUSION_OPT_LEVEL):
        return _folding()(mod)


def kernel_module(mod, params=None, fuse_opt_level: int = 2) -> tvm.IRModule:
    """:func:`folded_module`, then ``FuseOps(fuse_opt_level)`` unless already fused
    (``fuse_opt_level=0``: every op its own kernel)."""
    mod = folded_module(mod, params)
    if is_fused(mod):
        return mod
    with tvm.transform.PassContext(opt_level=FUSION_OPT_LEVEL):
        return relay.transform.FuseOps(fuse_opt_level=fuse_opt_level)(mod)


def _children(expr) -> list:
    if isinstance(expr, relay.Call):
        return list(expr.args)
    if isinstance(expr, relay.Tuple):
        return list(expr.fields)
    if isinstance(expr, relay.TupleGetItem):
        return [expr.tuple_value]
    if isinstance(expr, (relay.Var, relay.Constant)):
        return []
    raise ValueError(
        f"tvm_fuse.memory: {type(expr).__name__} in 'main' is not supported: the graph executor "
        f"runs only calls, tuples, variables and constants"
    )


def post_order(body) -> list:
    """The nodes of ``body`` outside primitive functions, each after its arguments (left to
    right), iteratively (ResNet-sized graphs are deeper than Python's recursion limit)."""
    order, done, stack = [], set(), [(body, False)]
    while stack:
        expr, expanded = stack.pop()
        if expr in done:
            continue
        if expanded:
            done.add(expr)
            order.append(expr)
            continue
        stack.append((expr, True))
        stack.extend((child, False) for child in reversed(_children(expr)) if child not in done)
    return order


def tensor_types(ty, where) -> list[tuple[tuple[int, ...], str]]:
    if isinstance(ty, relay.TupleType):
        return [tt for field in ty.fields for tt in tensor_types(field, where)]
    if not isinstance(ty, relay.TensorType):
        raise ValueError(f"tvm_fuse.memory: {where} has type {ty}, not a tensor or tuple")
    if not all(isinstance(d, tvm.tir.IntImm) for d in ty.shape):
        raise ValueError(f"tvm_fuse.memory: {where} has a dynamic shape {list(ty.shape)}")
    return [(tuple(int(d) for d in ty.shape), ty.dtype)]


def kernel_name(call) -> str:
    """``fused_`` + the ops inside, as TVM names the lowered function (without its prefix)."""
    if isinstance(call.op, tvm.ir.Op):
        return call.op.name.replace(".", "_")
    ops = []
    relay.analysis.post_order_visit(
        call.op.body,
        lambda e: ops.append(e.op.name) if isinstance(e, relay.Call) else None,
    )
    return "fused_" + "_".join(name.replace(".", "_") for name in ops)


def is_reshape_only(call) -> bool:
    if isinstance(call.op, tvm.ir.Op):
        return bool(call.op.get_attr("TReshapeOp"))
    return int(call.op.attrs.get("relay.reshape_only", 0)) == 1


def _check_callee(call) -> None:
    if not (isinstance(call.op, tvm.ir.Op) or is_primitive_call(call)):
        raise ValueError(
            f"tvm_fuse.memory: 'main' calls {call.op!r}, which is neither an op nor a primitive "
            f"function; the graph executor cannot run it (inline it first)"
        )


def _visit_call(call, values: dict, schedule: Schedule) -> list:
    _check_callee(call)
    inputs = [v for arg in call.args for v in values[arg]]
    if is_reshape_only(call) and len(inputs) == 1:
        return inputs
    name = kernel_name(call)
    return schedule.kernel(name, inputs, tensor_types(call.checked_type, f"kernel {name}"))


def _values_of(expr, values: dict, schedule: Schedule) -> list:
    if isinstance(expr, relay.Call):
        return _visit_call(expr, values, schedule)
    if isinstance(expr, relay.Tuple):
        return [v for field in expr.fields for v in values[field]]
    if isinstance(expr, relay.TupleGetItem):
        return [values[expr.tuple_value][expr.index]]
    return [None] * len(tensor_types(expr.checked_type, f"{type(expr).__name__}"))


def liveness(mod, params=None, fuse_opt_level: int = 2) -> Liveness:
    """The kernels of ``mod``'s ``main`` (fused by :func:`kernel_module` if needed) and the live
    ranges of the tensors they write."""
    main = kernel_module(mod, params, fuse_opt_level)["main"]
    schedule, values = Schedule(), {}
    for expr in post_order(main.body):
        values[expr] = _values_of(expr, values, schedule)
    return schedule.finish(values[main.body])
