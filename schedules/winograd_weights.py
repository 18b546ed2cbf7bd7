"""The Winograd-domain weight the Winograd kernel asks for, and the transform that makes it.

F(m x m, 3x3) multiplies in the transformed domain ``U = G g G^T`` (alpha points per axis); the
weight is transformed once at compile time and laid out ``[points, Co/VL, Ci, VL]``, named
``WINO{m}_{VL}o`` (stride 1) or ``WINO{m}S2_{VL}o`` (stride 2): one VL-slice is one vector
register of output channels, and a (point, Co block) slice is contiguous over Ci, as the kernel's
GEMM streams it. A Co that is not a multiple of VL is padded with zero output channels.

Stride 1: alpha = m + 2, TVM's own matrices (Cook-Toom on the interpolation points of
``tvm.topi.nn.winograd_util``). Stride 2, the polyphase form: along each axis an output
``y[i] = x[2i] g0 + x[2i+1] g1 + x[2i+2] g2`` is a 2-tap conv of the even input samples with
(g0, g2) plus a 1-tap conv of the odd ones with g1. The first is Cook-Toom F(m, 2) (m + 1
points), the second needs no transform (m points), so alpha = 2m + 1, which is also the side of
the input tile: (2m + 1)^2 products per m x m tile instead of 9 m^2 (25 / 36 for F(2x2), 81 /
144 for F(4x4)), with small exact coefficients (error as the stride-1 tile of the same m or less).
The m odd points of an axis all carry g1, so the weight stores one of them: rows = m + 2 per
axis at either stride (``weight_rows``; 16 points for F(2x2), 36 for F(4x4): 1.8x and 4x the
direct weight, not 2.8x and 9x), and the GEMM reads point (e, nu)'s slice at row ``min(e, m + 1)``
and column ``min(nu, m + 1)``.

After the ``rows^2`` points the weight stores the conv's own 9 taps (``DIRECT_TAPS``, exact
float32): the kernel's fallback for a tile whose input holds NaN or Inf computes the direct conv
on them (``schedules.winograd_te``). They are read only then, so they cost memory, not time. The
stored weight is ``[rows^2 + 9, Co/VL, Ci, VL]``: point (e, nu) at ``point_index``, tap (kh, kw)
at ``tap_index``.

Two forms of the transform, checked against each other in the tests: a NumPy reference (float64,
cast to float32) and Relay ops on a weight expression, also in float64, that FoldConstant
evaluates at compile time.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..spec import KernelSpec, TensorSpec


#: The strides the Winograd kernel computes (square: the same along H and W).
STRIDES = (1, 2)


def points(m: int, stride: int = 1) -> int:
    """alpha: the points per axis of F(m x m, 3x3) at ``stride``, also its input tile's side."""
    return m + 2 if stride == 1 else 2 * m + 1


def weight_rows(m: int) -> int:
    """The points per axis the transformed weight stores, m + 2 at either stride: stride 1 has
    m + 2 points; at stride 2 the odd points m+1..2m share row m + 1 (they all carry g1)."""
    return m + 2


#: The direct conv's taps (3x3), stored after the Winograd points for the non-finite fallback.
DIRECT_TAPS = 9


def stored_points(m: int) -> int:
    """The slices of the stored weight: ``weight_rows(m)^2`` Winograd points, the direct taps."""
    return weight_rows(m) ** 2 + DIRECT_TAPS


def fallback_tap_shape(spec: KernelSpec) -> tuple[int, ...] | None:
    """The shape of the part of a Winograd ``spec``'s stored weight that holds the direct taps:
    the memory the non-finite fallback costs (module docstring); only that fallback reads it, so
    a run reads the rest. None for a kernel that is not Winograd."""
    if spec.algorithm != "winograd" or spec.lanes is None:
        return None
    return (DIRECT_TAPS, *spec.weight.shape[1:])


def point_index(m: int, row, col):
    """The stored slice of Winograd point (``row``, ``col``), both < ``weight_rows(m)`` (ints or
    TE expressions)."""
    return row * weight_rows(m) + col


def tap_index(m: int, kh, kw):
    """The stored slice of the direct conv's tap (``kh``, ``kw``) (ints or TE expressions)."""
    return weight_rows(m) ** 2 + kh * 3 + kw


@functools.lru_cache(maxsize=None)
def transform_matrices(m: int, stride: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A [alpha, m], B [alpha, alpha], G [alpha, 3]) of F(m x m, 3x3) at ``stride`` in float64,
    such that ``Y = A^T ((G g G^T) * (B^T d B)) A`` for an alpha x alpha input tile ``d``. Stride
    1: the numbers behind ``tvm.topi.nn.winograd_util.winograd_transform_matrices(m, 3, ...)``."""
    if stride not in STRIDES:
        raise ValueError(f"Winograd transform: stride {stride} is not one of {STRIDES}")
    if stride == 2:
        return _polyphase_matrices(m)
    return _cook_toom(m, 3, _points(m + 1))


def _points(count: int) -> list:
    """The ``count`` finite interpolation points of TVM's table (``count >= 3``), chosen there
    for accuracy; the Cook-Toom construction adds the point at infinity."""
    from tvm.topi.nn import winograd_util  # pylint: disable=import-outside-toplevel

    return winograd_util._interpolation_points(count)  # pylint: disable=protected-access


def _cook_toom(m: int, taps: int, pts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TVM's Cook-Toom (A, B, G) of F(m, taps) on the points ``pts``, in float64."""
    from tvm.topi.nn import winograd_util  # pylint: disable=import-outside-toplevel

    cook_toom = winograd_util._cook_toom_convolution  # pylint: disable=protected-access
    matrices = cook_toom(pts, m, taps)
    return tuple(np.asarray(x, dtype="float64") for x in matrices)


def _polyphase_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stride 2 (module docstring): points 0..m are F(m, 2) on the even input samples and taps
    (g0, g2), on TVM's first m points (those of F(m, 3)'s set); points m+1..2m carry the odd
    samples and g1 unchanged; A^T sums both phases."""
    even = m + 1
    a_even, b_even, g_even = _cook_toom(m, 2, _points(m + 1)[:m])
    alpha = points(m, 2)
    a, b, g = np.zeros((alpha, m)), np.zeros((alpha, alpha)), np.zeros((alpha, 3))
    a[:even], a[even:] = a_even, np.eye(m)
    b[0::2, :even], b[1::2, even:] = b_even, np.eye(m)
    g[:even, 0], g[:even, 2], g[even:, 1] = g_even[:, 0], g_even[:, 1], 1.0
    return a, b, g


def winograd_layout(m: int, lanes: int, stride: int = 1) -> str:
    """The layout string of the transformed weight, e.g. ``WINO4_8o``, ``WINO2S2_16o`` at stride
    2 (its VL is read by ``tvm_fuse.spec.layout_lanes``, m is the spec's ``winograd_tile``)."""
    return f"WINO{int(m)}{'' if stride == 1 else f'S{int(stride)}'}_{int(lanes)}o"


def winograd_spec(spec: KernelSpec, m: int, lanes: int) -> KernelSpec:
    """``spec`` (a 3x3 conv on an HWIO weight, stride 1 or 2) computed by Winograd F(m x m, 3x3)
    on the transformed weight for ``lanes`` fp32 lanes."""
    shape = transformed_shape(m, lanes, spec.in_channels, spec.out_channels)
    weight = TensorSpec(shape, winograd_layout(m, lanes, spec.strides[0]), spec.weight.dtype)
    return dataclasses.replace(spec, algorithm="winograd", winograd_tile=int(m), weight=weight)


def transformed_shape(m: int, lanes: int, ci: int, co: int) -> tuple[int, ...]:
    """``[points, Co/VL, Ci, VL]`` (``stored_points``), the same at either stride (the stride-2
    weight stores as many points: ``weight_rows``)."""
    return (stored_points(m), -(-co // lanes), ci, lanes)


def _weight_matrix(m: int, stride: int) -> np.ndarray:
    """G's distinct rows, one per weight row (at stride 2 the odd points' rows are one)."""
    _, _, g_mat = transform_matrices(m, stride)
    return g_mat[: weight_rows(m)]


def transform_hwio(weight: np.ndarray, m: int, lanes: int, stride: int = 1) -> np.ndarray:
    """NumPy reference: ``U = G g G^T`` of an HWIO 3x3 weight in float64 for a conv of
    ``stride``, then the weight's own taps, Co zero-padded to whole vectors, laid out
    ``[points, Co/VL, Ci, VL]`` (module docstring), cast to float32."""
    g_mat = _weight_matrix(m, stride)
    rows = g_mat.shape[0]
    kh, kw, ci, co = weight.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"Winograd weight transform: needs a 3x3 HWIO weight, got {weight.shape}")
    u = np.einsum("ei,ijab,nj->enab", g_mat, weight.astype("float64"), g_mat)
    u = np.concatenate([u.reshape(rows * rows, ci, co), weight.reshape(DIRECT_TAPS, ci, co)])
    co_pad = -(-co // lanes) * lanes
    u = np.pad(u, ((0, 0), (0, 0), (0, co_pad - co)))
    u = u.reshape(-1, ci, co_pad // lanes, lanes).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(u, dtype="float32")


def relay_transform(weight, m: int, lanes: int, ci: int, co: int, stride: int = 1):
    """The same transform as Relay ops on an HWIO float32 weight expression (3x3 x Ci x Co).

    Computed in float64 like the reference; FoldConstant folds it where the weight is a
    constant (for unbound params, ``relay.build`` does once params are bound)."""
    from tvm import relay  # pylint: disable=import-outside-toplevel

    g_mat = _weight_matrix(m, stride)
    rows, co_pad = g_mat.shape[0], -(-co // lanes) * lanes
    g = relay.const(g_mat.reshape(rows, 3, 1), "float64")

    def times_g(x):  # G x over the first axis of a [3, N] x: a broadcast product and a sum
        return relay.sum(g * relay.expand_dims(x, 0), axis=1)

    if co_pad != co:
        weight = relay.nn.pad(weight, ((0, 0), (0, 0), (0, 0), (0, co_pad - co)))
    x = relay.cast(weight, "float64")
    x = times_g(relay.reshape(x, (3, 3 * ci * co_pad)))  # [e, j * ci * co]
    x = relay.transpose(relay.reshape(x, (rows, 3, ci * co_pad)), (1, 0, 2))  # [j, e, ...]
    x = times_g(relay.reshape(x, (3, rows * ci * co_pad)))  # [nu, e * ci * co]
    x = relay.transpose(relay.reshape(x, (rows, rows, ci * co_pad)), (1, 0, 2))  # [e, nu, ...]
    points = relay.reshape(relay.cast(x, "float32"), (rows * rows, ci, co_pad))
    taps = relay.reshape(weight, (DIRECT_TAPS, ci, co_pad))
    x = relay.reshape(relay.concatenate([points, taps], 0), (-1, ci, co_pad // lanes, lanes))
    return relay.transpose(x, (0, 2, 1, 3))
