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
The block (``transposes.block_size``) is a power of two that divides the columns. This module
needs TIR's IR builder, which the Relay stack has and the Relax one does not:
``schedules.transposes`` imports it only where the Relay strategy asks for the kernel.
"""

from __future__ import annotations

import math

import tvm
from tvm import te, tir


def compute(data: te.Tensor, plane, out_shape, block: int, name: str) -> te.Tensor:
    """The transpose of ``data`` over ``plane`` (a ``transposes.Plane``) as an extern op named
    ``name``."""

    def body(ins, outs):
        return _kernel(plane, block, _flat(ins[0]), _flat(outs[0]))

    return te.extern(tuple(out_shape), [data], body, name=name, dtype=data.dtype)


def _flat(buf):
    """A 1-D view of ``buf`` (the kernel's indices are flat)."""
    size = math.prod(int(dim) for dim in buf.shape)
    return tvm.tir.decl_buffer((size,), buf.dtype, name=buf.name + "_flat", data=buf.data)


def _kernel(plane, block: int, src, dst):
    """Parallel over (n, h); per row, column blocks, then row blocks (a last one partial)."""
    ib = tvm.tir.ir_builder.create()
    full, tail = divmod(plane.rows, block)
    with ib.for_range(0, plane.batch * plane.height, kind="parallel", name="nh") as nh:
        n, h = nh // plane.height, nh % plane.height
        stages = [
            ib.allocate(src.dtype, block * block, name=f"stage{i}", scope="local")._buffer
            for i in range(2)
        ]

        def transpose_block(row0, col0, rows):
            """The ``rows`` x ``block`` values at (row0, col0) of this (n, h) row."""
            for r in range(block):
                start = plane.src(n, h, row0 + r, col0)
                value = _vector(src, start, block, r < rows)
                ib.emit(tir.BufferStore(stages[0], value, [_ramp(r, block)]))
            steps = block.bit_length() - 1
            for step in range(steps):
                _interleave(ib, stages[step % 2], stages[(step + 1) % 2], block)
            for c in range(block):
                value = tir.BufferLoad(stages[steps % 2], [_ramp(c, block)])
                if rows < block:
                    value = tir.Shuffle([value], list(range(rows)))
                start = plane.dst(n, h, col0 + c, row0)
                index = tir.Ramp(start, 1, rows) if rows > 1 else start
                ib.emit(tir.BufferStore(dst, value, [index]))

        with ib.for_range(0, plane.cols // block, name="col_block") as cb:
            if full:
                with ib.for_range(0, full, name="row_block") as rb:
                    transpose_block(rb * block, cb * block, block)
            if tail:
                transpose_block(full * block, cb * block, tail)
    return ib.get()


def _ramp(index: int, block: int):
    """The ``index``-th vector of a ``block x block`` stage buffer."""
    return tir.Ramp(index * block, 1, block)


def _vector(buf, start, block: int, loaded: bool):
    """``block`` values of ``buf`` from ``start``, or zeros (a row past the map's last)."""
    if loaded:
        return tir.BufferLoad(buf, [tir.Ramp(start, 1, block)])
    return tir.Broadcast(tir.const(0, buf.dtype), block)


def _interleave(ib, src, dst, block):
    """One stage: vectors i and i + block/2 interleaved, low halves to 2i, high to 2i + 1.
    log2(block) stages transpose the block."""
    half = block // 2
    low = [x for i in range(half) for x in (i, block + i)]
    high = [x for i in range(half, block) for x in (i, block + i)]
    for i in range(half):
        a = tir.BufferLoad(src, [_ramp(i, block)])
        b = tir.BufferLoad(src, [_ramp(i + half, block)])
        for k, lanes in ((2 * i, low), (2 * i + 1, high)):
            ib.emit(tir.BufferStore(dst, tir.Shuffle([a, b], lanes), [_ramp(k, block)]))
