"""The graph's boundary transposes, NCHW -> NHWC at its entry and NHWC -> NCHW at its exit, as
cache-blocked kernels.

Why they exist: TVM's injective schedule of ``layout_transform`` between NCHW and NHWC
parallelizes over the output and, along its innermost axis, reads the input at a stride of a
whole channel plane (entry) or of C floats (exit), so every output vector gathers from as many
cache lines. On a 112x112x64 map (a stem conv's output, 3.2 MB) the exit took 1.34 ms on 2 cores,
twice the conv itself (measured on rocketlake, AVX-512); on a 56x56x256 input the entry took
0.32 ms, 60 % of the 1x1 conv after it (znver3). These kernels run parallel over (N, H) instead:
each iteration reads one row of every channel (L1-resident); the exit on a map of many channels
runs parallel over groups of channels, each writing whole output planes (:func:`exit_plane`).
Where a power of two of at least 4 values divides the input's contiguous axis and the other one
has as many, the row is transposed in registers, block by block
(``schedules.register_transpose``: whole-vector loads and stores; it says how much faster).
Otherwise it is written as tiles of up to ``VL`` values along the input's contiguous axis x
``VL`` along the output's, the first unrolled and the second vectorized (:func:`schedule`): 0.13
ms for each of those two.
"""

from typing import Callable, NamedTuple

from tvm import te

from . import register_transpose


def exit_compute(data):
    """``out[n, c, h, w] = data[n, h, w, c]``."""
    n, h, w, c = data.shape
    return te.compute((n, c, h, w), lambda b, ch, y, x: data[b, y, x, ch], name="nhwc_to_nchw")


def entry_compute(data):
    """``out[n, h, w, c] = data[n, c, h, w]``."""
    n, c, h, w = data.shape
    return te.compute((n, h, w, c), lambda b, y, x, ch: data[b, ch, y, x], name="nchw_to_nhwc")


#: The smallest block worth the shuffles (a power of two).
MIN_BLOCK = 4


class Plane(NamedTuple):
    """The transpose of one (n, h) row: ``rows x cols`` values, flat indices of both sides."""

    batch: int
    height: int
    rows: int  # contiguous in the output
    cols: int  # contiguous in the input
    src: Callable  # (n, h, row, col) -> flat index into the input
    dst: Callable  # (n, h, col, row) -> flat index into the output
    col_group: int = 0  # columns per parallel task (0: every column in each (n, h) task)


#: Fewest parallel tasks the exit splits into by channels (:func:`exit_plane`): enough for the
#: cores of a larger machine than the 2 it was measured on.
MIN_EXIT_TASKS = 8
#: The exit's channel groups, widest first: 32 float32 values are a 128-byte pair of lines, which
#: Intel's cores fetch together; 16, one line.
EXIT_COL_GROUPS = (32, 16)


def exit_plane(shape) -> Plane:
    """NHWC ``[n, h, w, c]`` -> NCHW ``[n, c, h, w]``, split by channels where that makes at least
    ``MIN_EXIT_TASKS`` parallel tasks: one plane of rows H*W (the output's contiguous axis) and
    columns C, each task a group of ``EXIT_COL_GROUPS`` channels, whose output planes it writes
    whole. Elsewhere (few channels: large maps), rows W and columns C per (n, h) task.

    Split by H, the cores wrote into the same cache lines, for a channel's row of W values is less
    than a line on small maps, and each task read the whole row of C values. On emeraldrapids (2
    cores, kernels alone) the exit split by channels took 0.018 ms on 7x7x2048 (0.137 split by H,
    slower than its 0.061 on 1 core), 0.033 on 14x14x1024 (0.104), 0.009 on 28x28x128 (0.033) and
    0.022 on 28x28x256 (0.112)."""
    n, h, w, c = shape
    group = next((g for g in EXIT_COL_GROUPS if c % g == 0 and n * c // g >= MIN_EXIT_TASKS), 0)
    if group:
        hw = h * w
        return Plane(
            n,
            1,
            hw,
            c,
            lambda b, _, p, ch: (b * hw + p) * c + ch,
            lambda b, _, ch, p: (b * c + ch) * hw + p,
            col_group=group,
        )
    return Plane(
        n,
        h,
        w,
        c,
        lambda b, y, x, ch: ((b * h + y) * w + x) * c + ch,
        lambda b, y, ch, x: ((b * c + ch) * h + y) * w + x,
    )


def entry_plane(shape) -> Plane:
    """NCHW ``[n, c, h, w]`` -> NHWC ``[n, h, w, c]``: rows C, columns W."""
    n, c, h, w = shape
    return Plane(
        n,
        h,
        c,
        w,
        lambda b, y, ch, x: ((b * c + ch) * h + y) * w + x,
        lambda b, y, x, ch: ((b * h + y) * w + x) * c + ch,
    )


def block_size(plane: Plane, lanes: int) -> int:
    """The largest power of two up to ``lanes`` and the rows that divides the columns, or 0
    below ``MIN_BLOCK`` (the tiled schedule is as fast on so few rows or lanes)."""
    block = 1 << (max(min(lanes, plane.rows), 1).bit_length() - 1)
    while block >= MIN_BLOCK and plane.cols % block:
        block //= 2
    return block if block >= MIN_BLOCK else 0


class Transpose(NamedTuple):
    """One boundary transpose: how it is computed and tiled."""

    compute: Callable  # data -> the transposed tensor, a stage named as the transpose
    axes: tuple[int, int, int, int]  # the permutation, as NumPy's transpose (Relax's permute_dims)
    tile_axes: tuple[int, int, int]  # output axes: the parallel row (H), the input's contiguous
    # axis (unrolled) and the output's contiguous axis (vectorized)
    plane: Callable  # input shape -> its rows as a ``Plane``


#: Each transpose by the name of its stage (and kernel).
TRANSPOSES = {
    "nchw_to_nhwc": Transpose(entry_compute, (0, 2, 3, 1), (1, 2, 3), entry_plane),
    "nhwc_to_nchw": Transpose(exit_compute, (0, 3, 1, 2), (2, 1, 3), exit_plane),
}


def register_plan(name: str, shape, dtype: str, lanes: int) -> tuple[Plane, int] | None:
    """``(plane, block)`` of the in-register kernel for the transpose ``name`` of a ``shape``
    tensor, or None where the tiled schedule runs: not float32, a symbolic dimension, or no
    block (:func:`block_size`). Both backends choose their kernel by it."""
    if dtype != "float32":
        return None
    try:
        plane = TRANSPOSES[name].plane([int(d) for d in shape])
    except TypeError:  # a symbolic dimension
        return None
    block = block_size(plane, lanes)
    return (plane, block) if block else None


def cpu_compute(name: str, data, lanes: int):
    """The transpose ``name`` of ``data`` as the CPU kernel computes it: in-register blocks
    where they apply (:func:`register_plan`), else the TE stage that :func:`schedule` tiles."""
    out = TRANSPOSES[name].compute(data)
    plan = register_plan(name, data.shape, data.dtype, lanes)
    if plan is None:
        return out
    plane, block = plan
    return register_transpose.compute(data, plane, out.shape, block, name)


def implementation(name: str, kind: str = "x86") -> str:
    """The implementation name of the transpose ``name``: ``x86`` for the blocked kernel (as both
    backends name it), ``generic`` for TVM's injective schedule."""
    return f"{name}.{kind}"


EXIT_NAME = implementation("nhwc_to_nchw")
ENTRY_NAME = implementation("nchw_to_nhwc")


def tile_size(extent: int, lanes: int) -> int:
    """The largest divisor of ``extent`` up to ``lanes``: tiles with no ragged tail, whose loops
    stay vectorizable (a tail would leave the whole vector loop scalar)."""
    return max(d for d in range(1, min(extent, lanes) + 1) if extent % d == 0)


def schedule(outs, lanes: int):
    """Parallel (N, H); per row, tiles of up to ``lanes`` x ``lanes`` values, the input's
    contiguous axis unrolled and the output's vectorized. The in-register kernel of
    :func:`cpu_compute` comes scheduled."""
    out = outs[0]
    s = te.create_schedule(out.op)
    if isinstance(out.op, te.ExternOp):
        return s
    axes = s[out].op.axis
    row, unrolled, vectorized = (axes[i] for i in TRANSPOSES[out.op.name].tile_axes)
    u_blk, u_in = s[out].split(unrolled, tile_size(int(unrolled.dom.extent), lanes))
    v_blk, v_in = s[out].split(vectorized, tile_size(int(vectorized.dom.extent), lanes))
    s[out].reorder(axes[0], row, u_blk, v_blk, u_in, v_in)
    s[out].parallel(s[out].fuse(axes[0], row))
    s[out].unroll(u_in)
    s[out].vectorize(v_in)
    return s
