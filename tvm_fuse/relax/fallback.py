"""ScheduleFallback (Relax): a plain parallel schedule for every PrimFunc nobody scheduled.

Runs in ``build`` after ``LegalizeOps``, on the TIR that TVM's stock ops became: the convs the
fusion refused (grouped but not depthwise, NCHW, other dtypes), pooling, reductions, transposes.
Stock Relax compiles those as the default loop nest, one thread and no vectors (1.6 GFLOP/s for a
conv). Each block gets: its outer spatial loops fused and parallel; for a reduction, the reduction
loops moved outside the innermost spatial loop, which is vectorized (so a conv accumulates a row of
outputs at a time), and the initialisation split off; a spatial block's innermost loop vectorized.
It leaves alone the PrimFuncs already scheduled (``compat.IS_SCHEDULED``: tvm_fuse's kernels),
blocks whose loops do not map one to one onto their iterators, and any function a primitive refuses
(it keeps its default nest; the result is right either way).
"""

from __future__ import annotations

import tvm

from . import compat

#: Widest innermost loop vectorized (longer ones are split first)
MAX_VECTOR = 16


def ScheduleFallback() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.ScheduleFallback")
    def schedule(mod, _ctx):
        mod = mod.clone()  # item assignment would change the caller's module in place
        for gv, func in list(mod.functions_items()):
            if isinstance(func, compat.PrimFunc) and not compat.has_flag(func, compat.IS_SCHEDULED):
                mod[gv] = scheduled(func)
        return mod

    return schedule


def scheduled(func):
    """``func`` with the fallback schedule, or ``func`` itself where a primitive refuses."""
    try:
        sch = compat.Schedule(tvm.IRModule({"main": func}))
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            _schedule_block(sch, block)
        return sch.mod["main"].with_attr(compat.IS_SCHEDULED, True)
    except (compat.Error, ValueError, IndexError):
        return func


def _schedule_block(sch, block):
    loops = sch.get_loops(block)
    kinds = [int(iv.iter_type) for iv in sch.get(block).iter_vars]
    if not loops or len(loops) != len(kinds) or kinds != sorted(kinds):
        return  # not the plain nest: spatial iterators first, one loop each
    spatial = [l for l, k in zip(loops, kinds) if k == 0]
    reduction = [l for l, k in zip(loops, kinds) if k != 0]
    if not spatial:
        return
    inner = spatial[-1] if len(spatial) > 1 else None
    outer = spatial[:-1] if inner is not None else spatial
    parallel = sch.fuse(*outer[:2]) if len(outer) > 1 else outer[0]
    sch.parallel(parallel)
    if inner is None:
        return
    if reduction:
        sch.reorder(*reduction, inner)
    vector = _vector_loop(sch, inner)
    if vector is not None:
        sch.vectorize(vector)
    if reduction:
        sch.decompose_reduction(block, reduction[0])


def _vector_loop(sch, loop):
    extent = sch.get(loop).extent
    if not isinstance(extent, compat.IntImm) or int(extent) < 2:
        return None
    extent = int(extent)
    if extent <= MAX_VECTOR:
        return loop
    for width in (MAX_VECTOR, 8, 4):
        if extent % width == 0:
            return sch.split(loop, [None, width])[1]
    return None
