"""The Winograd kernel's computation as TE, apart from any schedule: shared by both backends.

The Relay backend's AutoTVM template (``schedules.winograd``) and the Relax backend's TensorIR
kernel (``tvm_fuse.relax.winograd``, through ``te.create_prim_func``) compute exactly this: NHWC
data, the ``[points, Co/VL, Ci, VL]`` Winograd-domain weight (``schedules.winograd_weights``),
the epilogue of ``schedules.epilogue``; stride 1 or 2 (the stride sets the transforms' matrices
and how far apart the input tiles are). The stages, by name: ``data_pad``; ``wino_rows`` and
``wino_v`` (the input transform ``V = B^T d B``); ``wino_m`` (the alpha^2 GEMMs ``M = V U``);
``wino_cols`` and ``wino_acc`` (the output transform ``Y = A^T M A``); the epilogue; and the
non-finite fallback, ``wino_check``, ``wino_flag`` and ``wino_direct`` (below).

NaN and Inf: the transforms add and subtract a tile's inputs, so one Inf would come out as NaN
across its tile where the direct conv gives +-Inf, and a NaN would spread over the tile. Every
non-finite input a tile reads makes some of its column transform non-finite (each input reaches
some point of ``B^T d B`` with a non-zero coefficient, each point some column with one, and
``x * Inf`` and ``Inf - Inf`` are never finite), so the kernel sums the column transform of each
tile and Co vector (``wino_check``, per lane; ``wino_flag``, over the lanes). Where that sum is
not finite, the tile's outputs for those channels are the direct conv's (``wino_direct``, on the
exact taps stored with the weight), so NaN and +-Inf come out where and as the direct conv gives
them; the epilogue follows as for any tile. The fallback's sum is a select on the flag inside the
reduction (not a reduction's ``where``, which the Relax stack's ``te.create_prim_func`` drops):
the flag does not change in its loops, so LLVM moves the test out of them and a finite tile
skips them (measured: 0-3 % on the kernel's time).

The parallel block's shape changes the computation itself (the tiles of ``block_rows`` tile rows
form one axis, padded to whole register tiles of ``tile_p``), so those two are arguments here.
The transforms are written as explicit sums over the non-zero matrix entries, so no product by
0 or 1 is left once the tile loops are unrolled. This module imports TE and TOPI only.
"""

from tvm import te, topi

from ..spec import KernelSpec
from .epilogue import apply_epilogue
from .winograd_tiling import tile_grid
from .winograd_weights import point_index, points, tap_index, transform_matrices, weight_rows

GEMM_TAG = "conv2d_nhwc_winograd_gemm"


def compute(spec: KernelSpec, data, weight, bias, residual, block_rows: int, tile_p: int):
    """TE of the Winograd kernel of ``spec`` on the transformed ``weight``, for parallel blocks
    of ``block_rows`` tile rows and register tiles of ``tile_p`` tiles.

    The tiles of a block are one axis ``q``, padded to whole register tiles; the padding tiles
    repeat the block's last tile and are never stored."""
    grid = Grid(spec, block_rows, tile_p)
    dpad, v = _input_transform(spec, data, grid)
    gemm = _batched_gemm(spec, v, weight)
    acc = _output_transform(spec, gemm, grid, dpad, weight)
    return apply_epilogue(acc, bias, residual, spec.activation, spec.alpha)


class Grid:
    """The tiles of the output (``nh x nw``) and their blocks: ``blocks`` of ``rows`` tile rows,
    each padded to ``per_block`` tiles (whole register tiles of ``tile_p``). An output tile of
    m x m reads an ``alpha x alpha`` input tile, ``m * stride`` pixels from its neighbours'."""

    def __init__(self, spec: KernelSpec, rows: int, tile_p: int):
        m = spec.winograd_tile
        self.stride, self.alpha = spec.strides[0], points(m, spec.strides[0])
        self.m, self.rows = m, rows
        self.nh, self.nw = tile_grid(spec)
        self.blocks = -(-self.nh // self.rows)
        self.per_block = -(-(self.rows * self.nw) // tile_p) * tile_p

    def origin(self, blk, q):
        """(y, x) of the top-left input pixel of tile ``q`` of block ``blk`` (padding tiles:
        the block's last tile)."""
        if self.per_block != self.rows * self.nw:
            q = te.min(q, self.rows * self.nw - 1)
        step = self.m * self.stride
        return te.min(blk * self.rows + q // self.nw, self.nh - 1) * step, q % self.nw * step


def _combine(coeffs, index, term, dtype):
    """``sum_k coeffs[k, index] * term(k)`` for a symbolic ``index``: a Select over its values,
    each an explicit sum of the non-zero terms (folded to one sum once ``index`` is unrolled).
    ``dtype`` is the terms' (an expression's own dtype is spelled differently in each stack)."""
    expr = None
    for col in reversed(range(coeffs.shape[1])):
        value = _sparse_sum(coeffs[:, col], term, dtype)
        expr = value if expr is None else te.if_then_else(index == col, value, expr)
    return expr


def _sparse_sum(column, term, dtype):
    """``sum_k column[k] * term(k)`` over the non-zero entries, a positive one first (so that
    -1 entries become subtractions and 1 entries plain additions)."""
    entries = sorted((k for k in range(len(column)) if column[k] != 0), key=lambda k: column[k] < 0)
    total = None
    for k in entries:
        coeff, x = float(column[k]), term(k)
        if total is None:
            total = x if coeff == 1 else x * te.const(coeff, dtype)
        elif abs(coeff) == 1:
            total = total + x if coeff == 1 else total - x
        else:
            total = total + x * te.const(coeff, dtype)
    return total


def _input_transform(spec: KernelSpec, data, grid: Grid):
    """The padded input and ``V = B^T d B`` of every tile, ``[alpha, alpha, N, blocks,
    per_block, Ci]`` (Ci padded to whole vectors with zeros), through the row transform ``d B``."""
    n, h, w, ci = spec.data.shape
    lanes, size, step = spec.lanes, grid.alpha, grid.m * grid.stride
    _, b_mat, _ = transform_matrices(grid.m, grid.stride)
    ci_pad = -(-ci // lanes) * lanes
    top, left, _, _ = spec.padding
    # zeros under the last tiles' overhang (none where the map reaches past their input)
    bottom = max(0, (grid.nh - 1) * step + size - h - top)
    right = max(0, (grid.nw - 1) * step + size - w - left)
    pad_after = [0, bottom, right, ci_pad - ci]
    dpad = topi.nn.pad(data, [0, top, left, 0], pad_after, name="data_pad")

    def row_transform(b, blk, q, r, nu, c):
        y, x = grid.origin(blk, q)
        return _combine(b_mat, nu, lambda j: dpad[b, y + r, x + j, c], data.dtype)

    tiles = (n, grid.blocks, grid.per_block)
    rows_t = te.compute((*tiles, size, size, ci_pad), row_transform, name="wino_rows")
    return dpad, te.compute(
        (size, size, *tiles, ci_pad),
        lambda e, nu, b, blk, q, c: _combine(
            b_mat, e, lambda r: rows_t[b, blk, q, r, nu, c], data.dtype
        ),
        name="wino_v",
    )


def _batched_gemm(spec: KernelSpec, v, weight):
    """``M = V U`` at each of the alpha^2 points, over Ci. The reduction runs over whole
    vectors of Ci too: V's padded channels are zero and multiply the weight's last real row.
    At stride 2 the odd points of an axis share the weight's row m + 1 (``winograd_weights``)."""
    ci, ci_pad, lanes, m = spec.in_channels, int(v.shape[5]), spec.lanes, spec.winograd_tile
    rc = te.reduce_axis((0, ci_pad), name="rc")
    row = rc if ci == ci_pad else te.min(rc, ci - 1)
    out_dtype = spec.out.dtype
    last = weight_rows(m) - 1

    def point(e):
        return e if spec.strides == (1, 1) else te.min(e, last)

    return te.compute(
        (*v.shape[:5], spec.weight.shape[1] * lanes),
        lambda e, nu, b, blk, q, co: te.sum(
            v[e, nu, b, blk, q, rc].astype(out_dtype)
            * weight[point_index(m, point(e), point(nu)), co // lanes, row, co % lanes].astype(
                out_dtype
            ),
            axis=rc,
        ),
        name="wino_m",
        tag=GEMM_TAG,
    )


def _column_sums(cols_t, lanes: int):
    """Per tile and Co vector, the sum of its column transform (``wino_check`` per lane, then
    ``wino_flag`` over the lanes): finite exactly where Winograd's values stand (module
    docstring)."""
    n, nh, nw, size, m, channels = (int(d) for d in cols_t.shape)
    e = te.reduce_axis((0, size), name="e_check")
    x = te.reduce_axis((0, m), name="x_check")
    lane_sums = te.compute(
        (n, nh, nw, channels),
        lambda b, th, tw, c: te.sum(cols_t[b, th, tw, e, x, c], axis=[e, x]),
        name="wino_check",
    )
    lane = te.reduce_axis((0, lanes), name="lane_check")
    return te.compute(
        (n, nh, nw, channels // lanes),
        lambda b, th, tw, cv: te.sum(lane_sums[b, th, tw, cv * lanes + lane], axis=lane),
        name="wino_flag",
    )


def _direct_fallback(spec: KernelSpec, dpad, weight, winograd_is_finite, grid: Grid, channels):
    """The direct conv on the taps stored with the weight, its sum zero where
    ``winograd_is_finite(b, y, x, c)`` (a condition its loops leave unchanged: one test per
    tile and vector), over whole tiles and whole vectors of ``channels`` (the padded Co).

    Whole tiles, because cut to the output the last tiles' loops test their bounds inside,
    and LLVM then no longer moves the finite test out of them: a 55x55 F(4x4) conv ran its
    fallback's loops for every tile, 6x the time of a 56x56 one (znver5)."""
    lanes, m, dtype, stride = spec.lanes, spec.winograd_tile, spec.out.dtype, spec.strides[0]
    rc = te.reduce_axis((0, spec.in_channels), name="rc_direct")
    kh = te.reduce_axis((0, 3), name="kh_direct")
    kw = te.reduce_axis((0, 3), name="kw_direct")

    def product(b, y, x, c):
        tap = weight[tap_index(m, kh, kw), c // lanes, rc, c % lanes].astype(dtype)
        return dpad[b, y * stride + kh, x * stride + kw, rc].astype(dtype) * tap

    return te.compute(
        (spec.out.shape[0], grid.nh * m, grid.nw * m, channels),
        lambda b, y, x, c: te.sum(
            te.if_then_else(
                winograd_is_finite(b, y, x, c), te.const(0, dtype), product(b, y, x, c)
            ),
            axis=[rc, kh, kw],
        ),
        name="wino_direct",
    )


def _output_transform(spec: KernelSpec, gemm, grid: Grid, dpad, weight):
    """``Y = A^T M A`` of every tile, through the column transform ``M A``, cut to the output;
    the direct conv's values (on the padded input ``dpad`` and the taps in ``weight``) where
    the tile's column transform is not finite."""
    m, size, rows, nw = grid.m, grid.alpha, grid.rows, grid.nw
    a_mat, _, _ = transform_matrices(m, grid.stride)

    def col_transform(b, th, tw, e, x, co):
        q = th % rows * nw + tw
        return _combine(a_mat, x, lambda nu: gemm[e, nu, b, th // rows, q, co], gemm.dtype)

    n, channels, lanes = spec.data.shape[0], spec.out_channels, spec.lanes
    shape = (n, grid.nh, nw, size, m, int(gemm.shape[5]))
    cols_t = te.compute(shape, col_transform, name="wino_cols")
    flags = _column_sums(cols_t, lanes)

    def winograd_is_finite(b, y, x, c):
        return te.isfinite(flags[b, y // m, x // m, c // lanes])

    direct = _direct_fallback(spec, dpad, weight, winograd_is_finite, grid, int(gemm.shape[5]))
    return te.compute(
        (n, *spec.out_hw, channels),
        lambda b, y, x, c: te.if_then_else(
            winograd_is_finite(b, y, x, c),
            _combine(a_mat, y % m, lambda e: cols_t[b, y // m, x // m, e, x % m, c], gemm.dtype),
            direct[b, y, x, c],
        ),
        name="wino_acc",
    )
