"""The boundary transposes as in-register block transposes: an extern kernel built with TIR's
IR builder.

Per (n, h) row, each transpose turns a matrix whose columns are contiguous in the input (the
exit's C, the entry's W) into one whose rows are contiguous in the output (the exit's W, the
entry's C). The kernel loads ``block`` rows of ``block`` columns as vectors, transposes them in
registers in log2(block) stages of ``Shuffle``s and stores ``block`` vectors of rows: every
load and every store is a whole vector. The shuffles are the classic in-lane sequence (see
:func:`_stages`), which LLVM emits as ``vunpck*ps``/``vunpck*pd`` and 128-bit lane shuffles
(``vshuff64x2``, ``vperm2f128``): 64 per 16x16 block, two thirds of them within 128-bit lanes.
A tiled TE schedule (``schedules.transposes.schedule``) cannot say this: it gathers (or
scatters) one element per lane. On a 112x112x64 exit (3.2 MB) on 2 cores of znver4 this kernel
took 0.048 ms against the tiled schedule's 0.082-0.090 (a plain copy: 0.035); with 8 lanes
(``-mcpu=znver3`` code) 0.050 against 0.084. Interleaves across the whole vector instead
(64 ``vpermt2ps``) took 0.051 and 0.059. On maps of at most 7x7 all are alike (a few
microseconds, mostly the parallel launch).

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
            steps = _stages(block)
            for step, shuffles in enumerate(steps):
                _shuffle(ib, stages[step % 2], stages[(step + 1) % 2], block, shuffles)
            for c in range(block):
                value = tir.BufferLoad(stages[len(steps) % 2], [_ramp(c, block)])
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


def _shuffle(ib, src, dst, block, shuffles):
    """One stage of :func:`_stages` from stage buffer ``src`` to ``dst``."""
    for out, a, b, mask in shuffles:
        va = tir.BufferLoad(src, [_ramp(a, block)])
        vb = tir.BufferLoad(src, [_ramp(b, block)])
        ib.emit(tir.BufferStore(dst, tir.Shuffle([va, vb], mask), [_ramp(out, block)]))
