"""Small read-only helpers over Relay IR, shared by the passes and their tests.

The walks run in C++ (``relay.analysis.post_order_visit``), so deep graphs do not hit Python's
recursion limit.
"""

from __future__ import annotations

import collections

import tvm
from tvm import relay

_CHILDREN = {
    relay.Call: lambda e: ([] if isinstance(e.op, tvm.ir.Op) else [e.op]) + list(e.args),
    relay.Tuple: lambda e: list(e.fields),
    relay.TupleGetItem: lambda e: [e.tuple_value],
    relay.Let: lambda e: [e.value, e.body],
    relay.If: lambda e: [e.cond, e.true_branch, e.false_branch],
    relay.Function: lambda e: [e.body],
}


def use_counts(expr: relay.Expr) -> collections.Counter:
    """How many times each sub-expression of ``expr`` is referenced (its number of consumers).

    Computed in one walk; look nodes up by identity (the nodes of ``expr`` itself, e.g. the
    ``pre`` of a ``DFPatternCallback``). The root ``expr`` counts 0 unless referenced inside.
    """
    counts = collections.Counter()

    def visit(node):
        for child in _CHILDREN.get(type(node), lambda _: [])(node):
            counts[child] += 1

    relay.analysis.post_order_visit(expr, visit)
    return counts


def static_shape(ty) -> tuple[int, ...] | None:
    """The shape of a tensor type whose dimensions are all known, else None."""
    if not isinstance(ty, relay.TensorType):
        return None
    if not all(isinstance(d, tvm.tir.IntImm) for d in ty.shape):
        return None
    return tuple(int(d) for d in ty.shape)


def count_ops(mod) -> collections.Counter:
    """Op name -> number of calls, over every Relay function of an IRModule (or one expression)."""
    exprs = relay_functions(mod).values() if isinstance(mod, tvm.IRModule) else [mod]
    counts = collections.Counter()

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op):
            counts[node.op.name] += 1

    for expr in exprs:
        relay.analysis.post_order_visit(expr, visit)
    return counts


def op_is_registered(name: str) -> bool:
    """Whether a Relay op ``name`` exists (registering an op twice is an error in TVM)."""
    try:
        relay.op.get(name)
    except tvm.TVMError:
        return False
    return True


def relay_functions(mod: tvm.IRModule) -> dict:
    """GlobalVar -> relay.Function for every Relay function of ``mod`` (PrimFuncs left out)."""
    return {gv: f for gv, f in mod.functions.items() if isinstance(f, relay.Function)}


def is_primitive(func: relay.Function) -> bool:
    """Whether ``func`` is one of TVM's fused kernels (``Primitive``), which passes leave alone."""
    return bool(func.attrs) and bool(func.attrs.get("Primitive"))


def rewrite_functions(mod: tvm.IRModule, rewrite) -> tvm.IRModule:
    """``mod`` with ``rewrite(func)`` in place of each of its Relay functions but the primitive
    ones (a pass rewrites every function, not only ``main``), type-inferred before and after."""
    mod = relay.transform.InferType()(mod)
    updates = {gv: rewrite(f) for gv, f in relay_functions(mod).items() if not is_primitive(f)}
    mod = mod.clone()
    for gv, func in updates.items():
        mod[gv] = func
    return relay.transform.InferType()(mod)
