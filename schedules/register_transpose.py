"""The boundary transposes as in-register block transposes: an extern kernel built with TIR's
IR builder.

Per (n, h) row, each transpose turns a matrix whose columns are contiguous in the input (the
exit's C, the entry's W) into one whose rows are contiguous in the output (the exit's W, the
entry's C). The kernel loads ``block`` rows of ``block`` columns as vectors, transposes them in
registers in log2(block) stages of interleaves (``Shuffle``: LLVM emits ``vpermt2ps`` with
AVX-512, 64 of them per 16x16 block) and stores ``block`` vectors of rows: every load and every
store is a whole vector. A tiled TE schedule (``schedules.transposes.schedule``) cannot say
this: it gathers (or scatters) one element per lane. On a 112x112x64 exit (3.2 MB) on 2 cores
of znver4 this kernel took 0.051-0.058 ms against the tiled schedule's 0.082-0.090 (a plain copy:
0.035); with 8 lanes (``-mcpu=znver3`` code) 0.059 against 0.084. On maps of at most 7x7 the two
are alike (a few microseconds, mostly the parallel launch).

Rows that do not fill a last block are zero vectors in it, and their lanes are not stored.
The block (``transposes.block_size``) is a power of two that divides the columns. The kernel is
written once (:func:`emit`) against a small emitter, because the two stacks build TIR
differently: TVM 0.19's ``tir.ir_builder`` here (:class:`IRBuilderEmitter`, a ``te.extern`` for
the Relay strategy), apache-tvm 0.27's script builder in the Relax backend
(``tvm_fuse.relax.kernel``, a PrimFunc). This module itself imports only TE.
"""

from __future__ import annotations

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
        size = 1
        for dim in buf.shape:
            size *= int(dim)
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
    (n, h); per row, column blocks, then row blocks (a last one partial)."""
    tir = emitter.expr
    full, tail = divmod(plane.rows, block)
    with emitter.loop(plane.batch * plane.height, "nh", parallel=True) as nh:
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
            steps = block.bit_length() - 1
            for step in range(steps):
                _interleave(tir, stages[step % 2], stages[(step + 1) % 2], block)
            for c in range(block):
                value = stages[steps % 2].get(c)
                if rows < block:
                    value = tir.Shuffle([value], list(range(rows)))
                start = plane.dst(n, h, col0 + c, row0)
                emitter.store(dst, value, tir.Ramp(start, 1, rows) if rows > 1 else start)

        with emitter.loop(plane.cols // block, "col_block") as cb:
            if full:
                with emitter.loop(full, "row_block") as rb:
                    transpose_block(rb * block, cb * block, block)
            if tail:
                transpose_block(full * block, cb * block, tail)


def _interleave(tir, src, dst, block: int) -> None:
    """One stage: vectors i and i + block/2 of ``src`` interleaved, the low halves to vector 2i
    of ``dst``, the high ones to 2i + 1. log2(block) stages transpose the block."""
    half = block // 2
    low = [x for i in range(half) for x in (i, block + i)]
    high = [x for i in range(half, block) for x in (i, block + i)]
    for i in range(half):
        a, b = src.get(i), src.get(i + half)
        dst.set(2 * i, tir.Shuffle([a, b], low))
        dst.set(2 * i + 1, tir.Shuffle([a, b], high))
