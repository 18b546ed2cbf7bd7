"""The TIR pass tvm_fuse adds to TVM's lowering: weight prefetch where a kernel asks for it.

A whole model's weights (ResNet-50: 144 MB packed) do not stay in cache from one run to the next, so
each kernel reads its weight from memory once, as it computes: the first output row (or tile) of a
group of Co blocks waits on memory while the FMA units idle, and the other rows reuse the group's
slice from cache. The two do not overlap. A kernel's schedule marks its reduction loop with
:data:`PRAGMA` (:data:`PRAGMA_L1`: into L1 too; :func:`mark`), whose value is how far ahead, in
weight elements, lies the slice its next parallel iteration reads; :func:`prefetch_weights` puts in
that loop's steps a prefetch of every weight vector a step loads, that far ahead, so the next slice
arrives while this one is computed. A parallel iteration reads its slice in several passes (Wo
tiles, rows of a Co block, the Winograd GEMM's tile groups); each vector of the next slice is
prefetched in one of them, spread evenly, not in each. Kernels mark the loop only where two slices
fit in L2 (``schedules.tiling.prefetches_next_slice``), the direct kernel only where its parallel
loop takes Co blocks before rows (``schedules.tiling.prefetches_next_group``). On Zen 5 (2 cores) a
chain of 128 convs 1x1 512->512 on 7x7, weights from memory, ran at 56.5-58 us per conv instead of
71-72 (51-57 with the weights in cache). Against the same kernels without prefetch (interleaved with
ONNX Runtime, 21 rounds), ResNet-50 ran in 0.90x the time, ResNet-18 in 0.89x, MobileNet-v2 in
0.96x; ResNet-50 as AVX2 code (``-mcpu=znver3``, 15 rounds) in 0.95x.

Prefetches are hints: they never fault and never change a result, so an address past the end
of the weight (the last group's) is harmless. The pass only runs where the PassContext lists it
(``tir.add_lower_pass``): every build tvm_fuse runs enters :func:`lowering_context`
(``dispatch.build_context``, and ``tvm_fuse.tvmc`` inside tvmc's own PassContext); a plain
``relay.build`` outside it builds the same kernels without the prefetch (a kernel marks its loop
only where the pass will run: :func:`mark`). AutoTVM measures its candidates without it too: it
changes little with the weights warm in cache, as they are while a kernel is tuned. The Relax
backend's schedules mark their loops with an annotation (:func:`annotate`), and its builds run the
pass in their TIR pipeline (``tvm_fuse.relax.tir_pipeline``); ``tvm_fuse.tir_compat`` lets the
pass read and write either stack's TIR.
"""

from __future__ import annotations

import contextlib
import dataclasses

import tvm

from . import tir_compat
from .tir_compat import tir

#: The pragma a kernel's schedule puts on its reduction loop (``stage.pragma(axis, PRAGMA, d)``):
#: prefetch into L2 (llvm.prefetch locality 2, ``prefetcht1``), as the direct kernel asks. With
#: every kernel's marks into L1, ResNet-50 ran 1.007x and 1.001x as long (Zen 5, interleaved): a
#: group's slice, up to half the L2, does not fit in L1 anyway.
PRAGMA = "tvm_fuse_prefetch_weight"
#: The same into L1 as well (locality 3, ``prefetcht0``): the Winograd GEMM's marks (see
#: ``schedules.winograd``).
PRAGMA_L1 = "tvm_fuse_prefetch_weight_l1"
#: The llvm.prefetch locality of each mark's attribute key.
_LOCALITY = {"pragma_" + PRAGMA: 2, "pragma_" + PRAGMA_L1: 3}
#: TVM's annotation that keeps an allocation on the stack (``tir.transform.LowerTVMBuiltin``).
_KEEP_ON_STACK = "disable_lower_builtin"
#: The largest accumulator buffer kept on the stack (a Wo tile is at most 2 KB, a row buffer of
#: the ``ic_outside`` knob larger).
_MAX_STACK_BYTES = 16384
#: Where the pass runs: after vectorization and unrolling, so each step is straight-line code
#: whose vector loads name the weight vectors it reads.
_PHASE = 2


def mark(stage, axis, distance: int, into_l1: bool = False) -> None:
    """Ask for the weight vectors of ``stage``'s loop ``axis`` to be prefetched ``distance``
    elements ahead (the slice the next parallel iteration reads) into L2, or into L1 as well
    (``into_l1``), where the current PassContext runs :func:`prefetch_weights`. Elsewhere (a
    plain ``relay.build``, AutoTVM's builder) the mark would only be an unknown pragma to LLVM's
    codegen, a warning per kernel."""
    if _listed(tvm.transform.PassContext.current().config):
        stage.pragma(axis, PRAGMA_L1 if into_l1 else PRAGMA, int(distance))


def annotate(sch, loop, distance: int, into_l1: bool = False) -> None:
    """:func:`mark` for a TensorIR schedule ``sch`` (the Relax backend's kernels): the loop
    annotated, always (``tvm_fuse.relax.tir_pipeline`` runs :func:`prefetch_weights`; an
    annotation, unlike a pragma, is nothing to LLVM's codegen where it does not)."""
    sch.annotate(loop, PRAGMA_L1 if into_l1 else PRAGMA, int(distance))


def _stored(stmt: tir.Stmt) -> set:
    """The buffers (data vars) ``stmt`` stores to."""
    stored = set()
    tir_compat.post_order_visit(stmt, lambda n: stored.add(tir_compat.stored_data(n)))
    stored.discard(None)
    return stored


def _weight_loads(step: tir.Stmt) -> list[tir.BufferLoad]:
    """The vector loads of ``step`` from buffers it does not store to (the accumulators are
    loaded and stored; the input is loaded as scalars and broadcast): the weight's, one per
    address."""
    stored, loads, seen = _stored(step), [], set()

    def visit(node):
        if tir_compat.is_vector_load(node):
            loads.append(node)

    tir_compat.post_order_visit(step, visit)
    unique = []
    for load in loads:
        key = (tir_compat.loaded_data(load), str(load.indices[-1].base))
        if key[0] not in stored and key not in seen:
            seen.add(key)
            unique.append(load)
    return unique


def _prefetches(loads: list[tir.BufferLoad], distance: int, locality: int) -> list[tir.Stmt]:
    """A prefetch of each of the weight vectors ``loads``, ``distance`` elements ahead, with
    llvm.prefetch's ``locality``."""
    prefetches = []
    for load in loads:
        base = load.indices[-1].base
        index = base + tir.const(distance, tir_compat.dtype(base))
        prefetches.append(tir_compat.prefetch(load, index, locality))
    return prefetches


@dataclasses.dataclass(frozen=True)
class _Passes:
    """The passes a parallel iteration makes over one weight slice: ``index`` counts them,
    from 0 to ``count`` - 1."""

    index: tir.PrimExpr
    count: int


def _uses(expr: tir.PrimExpr, var: tir.Var) -> bool:
    return any(used.same_as(var) for used in tir.analysis.undefined_vars(expr))


def _rows_per_block(indices: list, var: tir.Var) -> int | None:
    """K where every use of ``var`` in ``indices`` is ``var // K``: a parallel loop over blocks
    of K iterations that read one slice (the direct kernel's, when it takes Co blocks before
    rows); else None."""
    sizes = set()

    def drop(node):
        if node.a.same_as(var) and isinstance(node.b, tir.IntImm):
            sizes.add(int(node.b))
            return tir.const(0, tir_compat.dtype(node))
        return None

    rest = [tir_compat.rewrite(tir.Evaluate(i), drop, tir.FloorDiv).value for i in indices]
    if len(sizes) != 1 or any(_uses(r, var) for r in rest):
        return None
    return sizes.pop()


def _rereading(marked: tir.Stmt, loads: list, loops: tuple) -> list[_Passes] | None:
    """How the parallel iteration around ``marked`` rereads the weight slice of its ``loads``,
    outermost first: the loops inside it whose variable no weight index uses (the direct
    kernel's Wo tiles, the Winograd GEMM's passes over its tiles), and the parallel loop's rows
    of one slice. None if the slice is also the next iteration's (the parallel loop does not
    index the weight: no next slice) or an index uses a variable bound elsewhere, which might
    depend on such a loop."""
    indices = [index for load in loads for index in load.indices]
    bound = [loop.loop_var for loop in loops] + tir_compat.loop_vars(marked)
    if any(tir.analysis.undefined_vars(index, bound) for index in indices):
        return None
    parallel = [i for i, loop in enumerate(loops) if loop.kind == tir.ForKind.PARALLEL]
    passes = []
    if parallel:
        var = loops[parallel[-1]].loop_var
        if not any(_uses(i, var) for i in indices):
            return None
        rows = _rows_per_block(indices, var)
        if rows is not None:
            passes.append(_Passes(tir.FloorMod(var, rows), rows))
    for loop in loops[parallel[-1] + 1 :] if parallel else loops:
        rereads = not any(_uses(index, loop.loop_var) for index in indices)
        if rereads and isinstance(loop.extent, tir.IntImm):
            passes.append(_Passes(loop.loop_var - loop.min, int(loop.extent)))
    return passes


def _with_body(loop: tir.Stmt, body: tir.Stmt) -> tir.Stmt:
    if not isinstance(loop, tir.For):  # a loop of one step, removed by the lowering
        return body
    return tir_compat.with_body(loop, body)


def _prefetching(marked: tir.AttrStmt, loops: tuple) -> tir.Stmt:
    """The marked loop with each of the next slice's prefetches in one pass over this slice:
    spread over the passes of the innermost loop that rereads it, in the first pass of the
    others. Prefetched in every pass, ResNet-50 ran 1.01-1.03x as long and the Winograd F(2x2)
    layer l4 (weights warm) 1.09-1.13x; all in the first pass, 1.02-1.03x and 1.02-1.09x (Zen 5,
    interleaved runs)."""
    loop = marked.body
    step = loop.body if isinstance(loop, tir.For) else loop
    loads = _weight_loads(step)
    prefetches = _prefetches(loads, int(marked.value), _LOCALITY[marked.attr_key])
    rereading = _rereading(loop, loads, loops)
    if rereading is None or not prefetches:
        return loop
    if not rereading:
        return _with_body(loop, tir.SeqStmt([*prefetches, step]))
    *outer, spread = rereading
    shares = [prefetches[j :: spread.count] for j in range(min(spread.count, len(prefetches)))]
    branches = [_with_body(loop, tir.SeqStmt([*share, step])) for share in shares]

    def plain():  # a copy of its own each time: apache-tvm 0.27 wants each variable defined once
        return _with_body(loop, step)

    result = branches.pop() if len(shares) == spread.count else plain()  # the last pass: else
    for j, branch in reversed(list(enumerate(branches))):
        result = tir.IfThenElse(tir.EQ(spread.index, j), branch, result)
    for passes in outer:
        result = tir.IfThenElse(tir.EQ(passes.index, 0), result, plain())
    return result


def _children(stmt: tir.Stmt) -> list:
    if isinstance(stmt, tir.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tir.IfThenElse):
        return [c for c in (stmt.then_case, stmt.else_case) if c is not None]
    body = getattr(stmt, "body", None)
    return [body] if isinstance(body, tir.Stmt) else []


def _marks_in(stmt: tir.Stmt, loops: tuple = ()):
    """(marked AttrStmt, the loops around it, outermost first), for each mark."""
    if isinstance(stmt, tir.AttrStmt) and stmt.attr_key in _LOCALITY:
        yield stmt, loops
    if isinstance(stmt, tir.For):
        loops = (*loops, stmt)
    for child in _children(stmt):
        yield from _marks_in(child, loops)


def _rewrite(body: tir.Stmt):
    marks = list(_marks_in(body))

    def rewrite(node):
        for marked, loops in marks:
            if node.same_as(marked):
                return _prefetching(marked, loops)
        return None

    return rewrite


def _stored_in_marked_loops(body: tir.Stmt) -> set:
    """The buffers the marked loops store to: the kernel's accumulators."""
    return set().union(*(_stored(marked.body) for marked, _ in _marks_in(body)))


def _on_stack(accumulators: set):
    """Keep the ``accumulators``' allocations on the stack. TVM puts an allocation over 1 KB
    (a 14 x 2 vector tile is 1.8 KB; apache-tvm 0.27 any ``local`` buffer) in a heap workspace,
    whose pointer LLVM cannot tell from the prefetched one: it then stores every accumulator at
    every step instead of keeping it in a register (2.5x the time). On the stack, LLVM keeps
    them in registers as without prefetch."""

    def rewrite(node):
        data, nbytes = tir_compat.allocation(node)
        if data not in accumulators or nbytes is None or nbytes > _MAX_STACK_BYTES:
            return None
        return tir_compat.with_annotation(node, _KEEP_ON_STACK)

    return rewrite


def _annotation_as_mark(loop):
    """A loop annotated with :data:`PRAGMA` or :data:`PRAGMA_L1` (a TensorIR schedule's mark,
    ``sch.annotate``) as the pragma a TE schedule's mark lowers to, around the loop."""
    marks = [key for key in (PRAGMA, PRAGMA_L1) if key in loop.annotations]
    if not marks:
        return None
    rest = {k: v for k, v in loop.annotations.items() if k not in marks}
    bare = tir_compat.with_body(loop, loop.body, rest)
    return tir.AttrStmt(bare.loop_var, "pragma_" + marks[0], loop.annotations[marks[0]], bare)


@tir.transform.prim_func_pass(opt_level=0, name="tvm_fuse.PrefetchWeights")
def prefetch_weights(func, _mod, _ctx):
    """The next slice's prefetches in the steps of the loops marked with :data:`PRAGMA`, each
    in one pass over the current slice (the marks go), and those loops' accumulators on the
    stack."""
    body = tir_compat.rewrite(func.body, _annotation_as_mark, tir.For)
    on_stack = _on_stack(_stored_in_marked_loops(body))
    body = tir_compat.rewrite(body, on_stack, tir_compat.ALLOCATE)
    return func.with_body(tir_compat.rewrite(body, _rewrite(body), tir.AttrStmt))


def _listed(config) -> bool:
    """Whether :func:`prefetch_weights` is among the lower passes of ``config`` (a
    PassContext's)."""
    return any(p.same_as(prefetch_weights) for _, p in config.get("tir.add_lower_pass", []))


def with_lowering(config: dict) -> dict:
    """``config`` (a PassContext's) with :func:`prefetch_weights` among its lower passes."""
    if _listed(config):
        return config
    passes = [*config.get("tir.add_lower_pass", []), (_PHASE, prefetch_weights)]
    return {**config, "tir.add_lower_pass": passes}


def pass_context_like(
    context: tvm.transform.PassContext, opt_level: int | None = None, config: dict | None = None
) -> tvm.transform.PassContext:
    """A PassContext with everything of ``context`` (required and disabled passes,
    instruments) but the ``opt_level`` and ``config`` given, so that tvm_fuse's changes to a
    caller's context drop none of its settings."""
    return tvm.transform.PassContext(
        opt_level=context.opt_level if opt_level is None else opt_level,
        required_pass=list(context.required_pass),
        disabled_pass=list(context.disabled_pass),
        instruments=list(context.instruments),
        config=dict(context.config) if config is None else config,
    )


@contextlib.contextmanager
def lowering_context():
    """The current PassContext, everything kept, with tvm_fuse's lower pass added."""
    current = tvm.transform.PassContext.current()
    with pass_context_like(current, config=with_lowering(dict(current.config))) as context:
        yield context
