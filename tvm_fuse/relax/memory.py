"""PlaceInArena (Relax): a function's activations in one arena, at tvm_fuse's planner's offsets.

Relax's ``StaticPlanBlockMemory`` shares storages between tensors whose lives do not meet, but a
storage is a whole allocation: a tensor reuses one only from its start, and small tensors are
not packed beside each other. tvm_fuse's planner (``tvm_fuse.memory.planner``, shared with the
Relay backend) places every tensor at an offset of one arena instead. This pass runs right after
``StaticPlanBlockMemory``: it reads the live ranges of the tensors that pass put in storages
(``R.memory.alloc_tensor``; step ``k`` is the ``k``-th kernel call, a reshape or a rebinding is
the same tensor), plans them with ``planner.plan_offsets`` and rewrites the function to one
``R.memory.alloc_storage`` holding each tensor at its offset. The function's outputs (not planned
by Relax either) stay where they are. It keeps Relax's plan, unchanged, when the arena is not
smaller, or for a function that is not one block of bindings on one device.

``pipeline()`` is ``tvm.compile``'s CPU pipeline (apache-tvm 0.27's ``default_build_pipeline``)
with the pass after ``StaticPlanBlockMemory``; ``api.memory_plan(mod, params)`` gives the numbers
(Relax's storages, the arena, the lower bound) of what ``build`` does with a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax

from ..errors import UserError
from ..memory import planner
from ..memory.liveness import Liveness, Schedule
from . import compat, offsets

#: ``build``'s ``memory`` choices
MEMORY = ("tvm_fuse", "tvm")

ALLOC_STORAGE = "relax.memory.alloc_storage"
ALLOC_TENSOR = "relax.memory.alloc_tensor"
#: bindings that name (part of) a tensor already there rather than compute one
_ALIASES = ("relax.reshape", "relax.memory.view")


@dataclass(frozen=True)
class ArenaPlan:
    """One function's planned tensors: Relax's storage bytes against tvm_fuse's arena."""

    liveness: Liveness
    tensors: tuple  # the alloc_tensor variables, in the order of liveness.tensors
    offsets: tuple[int, ...]
    arena_bytes: int
    relax_bytes: int  # the sum of StaticPlanBlockMemory's storages
    lower_bound_bytes: int  # the most bytes live at one step

    def __str__(self) -> str:
        return (
            f"{len(self.tensors)} tensors over {len(self.liveness.steps)} kernels: Relax's "
            f"storages {self.relax_bytes:,} B, tvm_fuse's arena {self.arena_bytes:,} B, lower "
            f"bound {self.lower_bound_bytes:,} B"
        )


def _op(value) -> str:
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return value.op.name
    return ""


def _bindings(func):
    """The bindings of a function that is one block of them, or None."""
    body = func.body
    if not isinstance(body, relax.SeqExpr) or len(body.blocks) != 1:
        return None
    return list(body.blocks[0].bindings)


def _int(expr) -> int:
    return int(getattr(expr, "value", expr))


def plan_function(func) -> ArenaPlan | None:
    """The arena plan of a function after ``StaticPlanBlockMemory``, or None when it has nothing
    to plan or is of a form the pass does not rewrite."""
    bindings = _bindings(func)
    if bindings is None:
        return None
    storages = {b.var: b.value for b in bindings if _op(b.value) == ALLOC_STORAGE}
    devices = {(_int(s.args[1]), str(s.args[2].value)) for s in storages.values()}
    sizes = [getattr(s.args[0], "values", [None])[0] for s in storages.values()]
    if not storages or len(devices) != 1 or not all(isinstance(n, compat.IntImm) for n in sizes):
        return None  # nothing planned, several devices, or a size known only at run time
    schedule, roots, written = Schedule(), {}, []
    tensor_id = {}  # alloc_tensor var -> id in the schedule, once written
    pending = {}  # alloc_tensor var -> (shape, dtype), not yet written
    for binding in bindings:
        var, value = binding.var, binding.value
        name = _op(value)
        if name == ALLOC_STORAGE:
            continue
        if name == ALLOC_TENSOR:
            shape = compat.tensor_shape(var)
            if value.args[0] not in storages or _int(value.args[1]) != 0 or shape is None:
                return None
            pending[var] = (shape, compat.tensor_dtype(var))
            roots[var] = {var}
            continue
        used = set()
        relax.analysis.post_order_visit(
            value, lambda e: used.update(roots.get(e, ())) if isinstance(e, relax.Var) else None
        )
        if isinstance(value, (relax.Var, relax.Tuple, relax.TupleGetItem)) or name in _ALIASES:
            roots[var] = used
            continue
        outputs = [v for v in pending if v in used]
        ids = schedule.kernel(
            name or str(getattr(getattr(value, "op", None), "name_hint", "call")),
            [tensor_id[v] for v in used if v in tensor_id],
            [pending.pop(v) for v in outputs],
        )
        tensor_id.update(zip(outputs, ids))
        written += outputs
    returned = set()
    relax.analysis.post_order_visit(
        func.body.body,
        lambda e: returned.update(roots.get(e, ())) if isinstance(e, relax.Var) else None,
    )
    if returned or pending:  # a planned tensor escapes, or one is never written
        return None
    live = schedule.finish([])
    blocks = [planner.Block(t.size, t.start, t.end) for t in live.tensors]
    placement = planner.plan_offsets(blocks)
    return ArenaPlan(
        liveness=live,
        tensors=tuple(written),
        offsets=placement.offsets,
        arena_bytes=placement.arena,
        relax_bytes=sum(int(n) for n in sizes),
        lower_bound_bytes=planner.lower_bound(blocks),
    )


def plan_of(mod: tvm.IRModule, name: str = "main") -> ArenaPlan | None:
    """:func:`plan_function` of ``mod[name]``."""
    return plan_function(mod[name])


def PlaceInArena() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    """The pass: each Relax function whose arena beats Relax's storages, rewritten to it, and
    the PrimFuncs it calls made to take their tensors at an offset (``offsets``)."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.PlaceInArena")
    def place(mod, _ctx):
        callees = set()
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            plan = plan_function(func)
            if plan is None or plan.arena_bytes >= plan.relax_bytes:
                continue
            mod[gv] = _rewrite(func, plan)
            callees |= _callees(mod, func)
        for gv in callees:
            mod[gv] = offsets.at_any_offset(mod[gv], planner.DEFAULT_ALIGNMENT)
        return mod

    return place


def _callees(mod, func) -> set:
    """The PrimFuncs ``func`` calls."""
    found = set()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.GlobalVar):
            if isinstance(mod[expr.op], compat.PrimFunc):
                found.add(expr.op)

    relax.analysis.post_order_visit(func.body, visit)
    return found


def _rewrite(func, plan: ArenaPlan):
    offset_of = dict(zip(plan.tensors, plan.offsets))
    arena = None
    bindings = []
    for binding in _bindings(func):
        value = binding.value
        if _op(value) == ALLOC_STORAGE:
            if arena is None:  # the first storage becomes the arena; the others go
                arena = binding.var
                size = relax.ShapeExpr([plan.arena_bytes])
                value = relax.op.memory.alloc_storage(size, *value.args[1:])
                bindings.append(relax.VarBinding(arena, value))
            continue
        if _op(value) == ALLOC_TENSOR and binding.var in offset_of:
            value = relax.op.memory.alloc_tensor(arena, offset_of[binding.var], *value.args[2:])
            binding = relax.VarBinding(binding.var, value)
        bindings.append(binding)
    body = relax.SeqExpr([relax.BindingBlock(bindings)], func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)


def until_static_plan() -> list:
    """``tvm.compile``'s CPU passes up to ``StaticPlanBlockMemory`` included (apache-tvm 0.27's
    ``relax.pipeline.default_build_pipeline``)."""
    t = relax.transform
    return [
        relax.backend.DispatchSampling(),
        relax.backend.DispatchSortScan(),
        t.LegalizeOps(),
        t.RewriteDataflowReshape(),
        t.ToNonDataflow(),
        t.RemovePurityChecking(),
        t.CallTIRRewrite(),
        t.StaticPlanBlockMemory(),
    ]


def pipeline() -> tvm.transform.Pass:
    """``tvm.compile``'s CPU pipeline with :func:`PlaceInArena` after ``StaticPlanBlockMemory``."""
    t = relax.transform
    return tvm.transform.Sequential(
        [
            *until_static_plan(),
            PlaceInArena(),
            t.RewriteCUDAGraph(),
            t.LowerAllocTensor(),
            t.KillAfterLastUse(),
            t.LowerRuntimeBuiltin(),
            t.ComputePrimValue(),
            t.VMShapeLower(),
            t.AttachGlobalSymbol(),
        ],
        name="tvm_fuse.relax.memory.pipeline",
    )


def memory_pipeline(memory: str):
    """The ``relax_pipeline`` for ``tvm.compile`` that ``memory`` asks for (see ``MEMORY``)."""
    if memory not in MEMORY:
        raise UserError(
            f"tvm_fuse.relax.build: memory={memory!r}; choose one of {', '.join(MEMORY)}"
        )
    return pipeline() if memory == "tvm_fuse" else "default"
