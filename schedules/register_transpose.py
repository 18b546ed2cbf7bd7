"""The boundary transposes as in-register block transposes, written once for both backends.

Per (n, h) row, each transpose turns a matrix whose columns are contiguous in the input (the
exit's C, the entry's W) into one whose rows are contiguous in the output (the exit's W, the
entry's C). The kernel loads ``block`` rows of ``block`` columns as vectors, transposes them in
registers in log2(block) stages of ``Shuffle``s and stores ``block`` vectors of rows: every
load and every store is a whole vector. The shuffles are the classic in-lane sequence (see
:func:`_stages`), which LLVM emits as ``vunpck*ps``/``vunpck*pd`` and 128-bit lane shuffles
(``vshuff64x2``, ``vperm2f128``): 64 per 16x16 block, half of them within 128-bit lanes.
A tiled TE schedule (``schedules.transposes.schedule``) cannot say this: it gathers (or
scatters) one element per lane. On a 112x112x64 exit (3.2 MB) on 2 cores of znver4 this kernel
took 0.048 ms against the tiled schedule's 0.082-0.090 (a plain copy: 0.035); with 8 lanes
(``-mcpu=znver3`` code) 0.050 against 0.084. Interleaves across the whole vector instead
(64 ``vpermt2ps``) took 0.051 and 0.059. On the Relax backend the same kernel took 0.042. On
maps of at most 7x7 all are alike (a few microseconds, mostly the parallel launch).

Rows that do not fill a last block are zero vectors in it, and their lanes are not stored.
The block (``transposes.block_size``) is a power of two that divides the columns. The kernel is
written once (:func:`emit`) against a small emitter, because the two stacks build TIR
differently: TVM 0.19's ``tir.ir_builder`` here (:class:`IRBuilderEmitter`, a ``te.extern`` for
the Relay strategy), apache-tvm 0.27's script builder in the Relax backend
(``tvm_fuse.relax.kernel``, a PrimFunc). This module itself imports only TE.
"""

from __future__ import annotations

import math

from tvm import te


def compute(data: te.Tensor, plane, out_shape, block: int, name: str) -> te.Tensor:
    """The transpose of ``data`` over ``plane`` (a ``transposes.Plane``) as an extern op named
    ``name``, for the Relay stack (TVM 0.19's ``tir.ir_builder``)."""

    def body(ins, outs):
        emitter = IRBuilderEmitter()
        emit(emitter, plane, block, emitter.flat(ins[0]), emitter.flat(outs[0]))
        return emitter.ib.get()

    return te.extern(tuple(out_shape), [data], body, name=name, dtype=data.dtype)


class IRBuilderEmitter:
    """What :func:`emit` writes TIR with, on TVM 0.19's ``tir.ir_builder``: the expression
    module (``expr``), loops, stores, and the stages of ``block`` vectors (:class:`BufferStage`).
    The Relax backend has its own, on apache-tvm's script builder (``tvm_fuse.relax.kernel``)."""

    def __init__(self):
        import tvm  # pylint: disable=import-outside-toplevel  # the stack's own TIR module

        self.expr = tvm.tir
        self.ib = tvm.tir.ir_builder.create()

    def flat(self, buf):
        """A 1-D view of ``buf`` (the kernel's indices are flat)."""
        size = math.prod(int(dim) for dim in buf.shape)
        return self.expr.decl_buffer((size,), buf.dtype, name=buf.name + "_flat", data=buf.data)

    def loop(self, extent: int, name: str, parallel: bool = False):
        return self.ib.for_range(0, extent, kind="parallel" if parallel else "serial", name=name)

    def store(self, buf, value, index) -> None:
        self.ib.emit(self.expr.BufferStore(buf, value, [index]))

    def stage(self, dtype: str, block: int, name: str) -> "BufferStage":
        return BufferStage(self, dtype, block, name)


class BufferStage:
    """``block`` vectors in one ``local`` buffer, which LLVM keeps in registers (TVM 0.19
    cannot bind vectors to variables: its LLVM debug info refuses them)."""

    def __init__(self, emitter: IRBuilderEmitter, dtype: str, block: int, name: str):
        self.emitter, self.block = emitter, block
        self.buf = emitter.ib.allocate(dtype, block * block, name=name, scope="local")._buffer

    def _vector(self, index: int):
        return self.emitter.expr.Ramp(index * self.block, 1, self.block)

    def set(self, index: int, value) -> None:
        self.emitter.store(self.buf, value, self._vector(index))

    def get(self, index: int):
        return self.emitter.expr.BufferLoad(self.buf, [self._vector(index)])


def emit(emitter, plane, block: int, src, dst) -> None:
    """The kernel on the flat buffers ``src`` and ``dst``, through ``emitter``: parallel over
    (n, h), per row column blocks, then row blocks (a last one partial); or, where the plane
    groups its columns (``col_group``), parallel over (n, h, column groups), per group row
    blocks, then the group's column blocks."""
    tir = emitter.expr
    full, tail = divmod(plane.rows, block)
    groups = plane.cols // plane.col_group if plane.col_group else 1
    with emitter.loop(plane.batch * plane.height * groups, "task", parallel=True) as task:
        nh, group = task // groups, task % groups
        n, h = nh // plane.height, nh % plane.height
        stages = [emitter.stage(src.dtype, block, f"stage{i}") for i in range(2)]

        def transpose_block(row0, col0, rows):
            """The ``rows`` x ``block`` values at (row0, col0) of this (n, h) row."""
            for r in range(block):
                if r < rows:
                    start = plane.src(n, h, row0 + r, col0)
                    value = tir.BufferLoad(src, [tir.Ramp(start, 1, block)])
                else:  # a row past the map's last
                    value = tir.Broadcast(tir.const(0, src.dtype), block)
                stages[0].set(r, value)
            steps = _stages(block)
            for step, shuffles in enumerate(steps):
                _shuffle(tir, stages[step % 2], stages[(step + 1) % 2], shuffles)
            for c in range(block):
                value = stages[len(steps) % 2].get(c)
                if rows < block:
                    value = tir.Shuffle([value], list(range(rows)))
                start = plane.dst(n, h, col0 + c, row0)
                emitter.store(dst, value, tir.Ramp(start, 1, rows) if rows > 1 else start)

        if plane.col_group:
            _group_blocks(emitter, full, tail, block, plane.col_group, group, transpose_block)
            return
        with emitter.loop(plane.cols // block, "col_block") as cb:
            if full:
                with emitter.loop(full, "row_block") as rb:
                    transpose_block(rb * block, cb * block, block)
            if tail:
                transpose_block(full * block, cb * block, tail)


def _group_blocks(emitter, full, tail, block, col_group, group, transpose_block) -> None:
    """One task's column group: row blocks outside its column blocks, so that the task reads each
    input row's ``col_group`` values at once (a line or a pair)."""
    col0 = group * col_group
    if full:
        with emitter.loop(full, "row_block") as rb:
            with emitter.loop(col_group // block, "col_block") as cb:
                transpose_block(rb * block, col0 + cb * block, block)
    if tail:
        with emitter.loop(col_group // block, "col_block") as cb:
            transpose_block(full * block, col0 + cb * block, tail)


#: Values in a 128-bit lane: the unit of the unpack instructions.
LANE = 4


def _stages(block: int) -> list[list[tuple[int, int, int, list[int]]]]:
    """The shuffles that transpose a ``block x block`` stage, per stage as ``(out, a, b, mask)``:
    vector ``out`` of the next stage is ``Shuffle([a, b], mask)`` of this one's. Vector ``c`` of
    the last stage is column ``c``.

    The first two stages unpack within 128-bit lanes (``unpck{l,h}ps`` on rows 2i, 2i+1, then
    ``unpck{l,h}pd`` on the results 4j + (0, 2) and 4j + (1, 3)): each lane then holds four rows
    of one column. Each further stage pairs vectors ``span`` apart (4, then 8) and takes the
    even, then the odd, lanes of both, as ``vshuff64x2``/``vperm2f128`` do."""
    steps = [
        [(2 * i + high, 2 * i, 2 * i + 1, _unpack_mask(block, 1, high))
         for i in range(block // 2) for high in (0, 1)],
        [(j + 2 * p + high, j + p, j + p + 2, _unpack_mask(block, 2, high))
         for j in range(0, block, LANE) for p in (0, 1) for high in (0, 1)],
    ]
    span = LANE
    while span < block:
        starts = [v for v in range(block) if v // span % 2 == 0]
        steps.append([(v + h * span, v, v + span, _lanes(block, h))
                      for v in starts for h in (0, 1)])
        span *= 2
    return steps


def _unpack_mask(block, width, high):
    """unpck{l,h}ps (``width`` 1) or unpck{l,h}pd (2): in each 128-bit lane, the low (high) half
    of ``a`` and of ``b``, interleaved by ``width`` values."""
    mask = []
    for lane in range(0, block, LANE):
        half = lane + high * LANE // 2
        for k in range(0, LANE // 2, width):
            mask += [half + k + j for j in range(width)]
            mask += [block + half + k + j for j in range(width)]
    return mask


def _lanes(block, odd):
    """The even (odd) 128-bit lanes of ``a``, then those of ``b``."""
    lanes = range(odd, block // LANE, 2)
    return [src + lane * LANE + i for src in (0, block) for lane in lanes for i in range(LANE)]


def _shuffle(tir, src, dst, shuffles) -> None:
    """One stage of :func:`_stages`, from the stage ``src`` to ``dst``."""
    for out, a, b, mask in shuffles:
        dst.set(out, tir.Shuffle([src.get(a), src.get(b)], mask))
