"""The TIR pass tvm_fuse adds to TVM's lowering: weight prefetch where a kernel asks for it.

A whole model's weights (ResNet-50: 144 MB packed) do not stay in cache from one run to the
next, so each kernel reads its weight from memory once, as it computes: the first output row
(or tile) of a group of Co blocks waits on memory while the FMA units idle, and the other rows
reuse the group's slice from cache. The two do not overlap. A kernel's schedule marks its
reduction loop with :data:`PRAGMA` (:func:`mark`), whose value is how far ahead, in weight
elements, lies the slice its next parallel iteration reads; :func:`prefetch_weights` puts before
each step of that loop a prefetch (into L2) of every weight vector the step loads, that far
ahead, so the next slice arrives while this one is computed. Kernels mark the loop only where
two slices fit in L2 (``schedules.tiling.prefetches_next_slice``). On Zen 5 (2 cores) a chain of 128
convs 1x1 512->512 on 7x7, weights from memory, ran at 58-59 us per conv instead of 71-72 (57
with the weights in cache); ResNet-50 in 0.95-0.96x the time (interleaved with ONNX Runtime,
15 rounds), ResNet-18 and MobileNet-v2 in 0.98x; AVX2 code on the same machine the same.

Prefetches are hints: they never fault and never change a result, so an address past the end
of the weight (the last group's) is harmless. The pass only runs where the PassContext lists it
(``tir.add_lower_pass``): every build tvm_fuse runs enters :func:`lowering_context`
(``dispatch.build_context``, and ``tvm_fuse.tvmc`` inside tvmc's own PassContext); a plain
``relay.build`` outside it builds the same kernels without the prefetch (a kernel marks its loop
only where the pass will run: :func:`mark`). AutoTVM measures its candidates without it too: it
changes little with the weights warm in cache, as they are while a kernel is tuned.
"""

from __future__ import annotations

import contextlib
import math

import tvm
from tvm import tir

#: The pragma a kernel's schedule puts on its reduction loop (``stage.pragma(axis, PRAGMA, d)``).
PRAGMA = "tvm_fuse_prefetch_weight"
_ATTR_KEY = "pragma_" + PRAGMA
#: llvm.prefetch locality 2: into L2 (``prefetcht1``). Into L1 (3), ResNet-50 ran 1.007x as long
#: (Zen 5, interleaved): a group's slice, up to half the L2, does not fit in L1 anyway.
_LOCALITY = 2
#: TVM's annotation that keeps an allocation on the stack (``tir.transform.LowerTVMBuiltin``).
_KEEP_ON_STACK = "disable_lower_builtin"
#: The largest accumulator buffer kept on the stack (a Wo tile is at most 2 KB, a row buffer of
#: the ``ic_outside`` knob larger).
_MAX_STACK_BYTES = 16384
#: Where the pass runs: after vectorization and unrolling, so each step is straight-line code
#: whose vector loads name the weight vectors it reads.
_PHASE = 2


def mark(stage, axis, distance: int) -> None:
    """Ask for the weight vectors of ``stage``'s loop ``axis`` to be prefetched ``distance``
    elements ahead (the slice the next parallel iteration reads), where the current PassContext
    runs :func:`prefetch_weights`. Elsewhere (a plain ``relay.build``, AutoTVM's builder) the
    mark would only be an unknown pragma to LLVM's codegen, a warning per kernel."""
    if _listed(tvm.transform.PassContext.current().config):
        stage.pragma(axis, PRAGMA, int(distance))


def _stored(stmt: tir.Stmt) -> set:
    """The buffers (data vars) ``stmt`` stores to."""
    stored = set()
    tir.stmt_functor.post_order_visit(
        stmt, lambda n: stored.add(n.buffer.data) if isinstance(n, tir.BufferStore) else None
    )
    return stored


def _weight_loads(step: tir.Stmt) -> list[tir.BufferLoad]:
    """The vector loads of ``step`` from buffers it does not store to (the accumulators are
    loaded and stored; the input is loaded as scalars and broadcast): the weight's, one per
    address."""
    stored, loads, seen = _stored(step), [], set()

    def visit(node):
        if isinstance(node, tir.BufferLoad) and isinstance(node.indices[-1], tir.Ramp):
            loads.append(node)

    tir.stmt_functor.post_order_visit(step, visit)
    unique = []
    for load in loads:
        key = (load.buffer.data, str(load.indices[-1].base))
        if load.buffer.data not in stored and key not in seen:
            seen.add(key)
            unique.append(load)
    return unique


def _with_prefetches(step: tir.Stmt, distance: int) -> tir.Stmt:
    prefetches = []
    for load in _weight_loads(step):
        base = load.indices[-1].base
        index = base + tir.const(distance, base.dtype)
        ahead = tir.BufferLoad(load.buffer, [*load.indices[:-1], index])
        address = tir.call_intrin("handle", "tir.address_of", ahead)
        prefetches.append(
            tir.Evaluate(tir.call_intrin("float32", "tir.prefetch", address, 0, _LOCALITY, 1))
        )
    return tir.SeqStmt([*prefetches, step]) if prefetches else step


def _rewrite(node):
    if not (isinstance(node, tir.AttrStmt) and node.attr_key == _ATTR_KEY):
        return None
    loop = node.body
    if isinstance(loop, tir.For):  # prefetch in each step of the marked loop
        return tir.For(
            loop.loop_var,
            loop.min,
            loop.extent,
            loop.kind,
            _with_prefetches(loop.body, int(node.value)),
            loop.thread_binding,
            loop.annotations,
        )
    return _with_prefetches(loop, int(node.value))  # a loop of one step, removed by the lowering


def _stored_in_marked_loops(body: tir.Stmt) -> set:
    """The buffers the marked loops store to: the kernel's accumulators."""
    stored = set()

    def visit(node):
        if isinstance(node, tir.AttrStmt) and node.attr_key == _ATTR_KEY:
            stored.update(_stored(node.body))

    tir.stmt_functor.post_order_visit(body, visit)
    return stored


def _fits_stack(allocate: tir.Allocate) -> bool:
    if not all(isinstance(extent, tir.IntImm) for extent in allocate.extents):
        return False
    dtype = tvm.DataType(allocate.dtype)
    bits = math.prod(int(e) for e in allocate.extents) * dtype.bits * dtype.lanes
    return bits // 8 <= _MAX_STACK_BYTES


def _on_stack(accumulators: set):
    """Keep the ``accumulators``' allocations on the stack. TVM puts an allocation over 1 KB
    (a 14 x 2 vector tile is 1.8 KB) in a heap workspace, whose pointer LLVM cannot tell from
    the prefetched one: it then stores every accumulator at every step instead of keeping it in
    a register (2.5x the time). On the stack, LLVM keeps them in registers as without prefetch."""

    def rewrite(node):
        if node.buffer_var not in accumulators or not _fits_stack(node):
            return None
        annotations = {**node.annotations, _KEEP_ON_STACK: True}
        return tir.Allocate(
            node.buffer_var, node.dtype, node.extents, node.condition, node.body, annotations
        )

    return rewrite


@tvm.tir.transform.prim_func_pass(opt_level=0, name="tvm_fuse.PrefetchWeights")
def prefetch_weights(func, _mod, _ctx):
    """Prefetches before each step of the loops marked with :data:`PRAGMA` (the marks go), and
    those loops' accumulators on the stack."""
    transform = tir.stmt_functor.ir_transform
    on_stack = _on_stack(_stored_in_marked_loops(func.body))
    body = transform(func.body, None, on_stack, ["tir.Allocate"])
    return func.with_body(transform(body, None, _rewrite, ["tir.AttrStmt"]))


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
