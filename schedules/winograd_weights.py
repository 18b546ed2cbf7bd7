"""The Winograd-domain weight the Winograd kernel asks for, and the transform that makes it.

F(m x m, 3x3) multiplies in the transformed domain ``U = G g G^T`` (alpha = m + 2 points per
axis); the weight is transformed once at compile time and laid out ``[alpha, alpha, Co/VL, Ci,
VL]``, named ``WINO{m}_{VL}o``: one VL-slice is one vector register of output channels, and a
(point, Co block) slice is contiguous over Ci, as the kernel's GEMM streams it. A Co that is not
a multiple of VL is padded with zero output channels. The matrices are TVM's own (Cook-Toom on
the interpolation points of ``tvm.topi.nn.winograd_util``). Two forms of the transform, checked
against each other in the tests: a NumPy reference (float64, cast to float32) and Relay ops on a
weight expression, also in float64, that FoldConstant evaluates at compile time.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..spec import KernelSpec, TensorSpec


@functools.lru_cache(maxsize=None)
def transform_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A [alpha, m], B [alpha, alpha], G [alpha, 3]) of F(m x m, 3x3) in float64: the numbers
    behind ``tvm.topi.nn.winograd_util.winograd_transform_matrices(m, 3, ...)``."""
    from tvm.topi.nn import winograd_util  # pylint: disable=import-outside-toplevel

    points = winograd_util._interpolation_points(m + 1)  # pylint: disable=protected-access
    a, b, g = winograd_util._cook_toom_convolution(points, m, 3)  # pylint: disable=protected-access
    return tuple(np.asarray(x, dtype="float64") for x in (a, b, g))


def winograd_layout(m: int, lanes: int) -> str:
    """The layout string of the transformed weight, e.g. ``WINO4_8o`` (its VL is read by
    ``tvm_fuse.spec.layout_lanes``, m is the spec's ``winograd_tile``)."""
    return f"WINO{int(m)}_{int(lanes)}o"


def winograd_spec(spec: KernelSpec, m: int, lanes: int) -> KernelSpec:
    """``spec`` (a 3x3 conv on an HWIO weight) computed by Winograd F(m x m, 3x3) on the
    transformed weight for ``lanes`` fp32 lanes."""
    shape = transformed_shape(m, lanes, spec.in_channels, spec.out_channels)
    weight = TensorSpec(shape, winograd_layout(m, lanes), spec.weight.dtype)
    return dataclasses.replace(spec, algorithm="winograd", winograd_tile=int(m), weight=weight)


def transformed_shape(m: int, lanes: int, ci: int, co: int) -> tuple[int, ...]:
    alpha = m + 2
    return (alpha, alpha, -(-co // lanes), ci, lanes)


def transform_hwio(weight: np.ndarray, m: int, lanes: int) -> np.ndarray:
    """NumPy reference: ``U = G g G^T`` of an HWIO 3x3 weight in float64, Co zero-padded to
    whole vectors, laid out ``[alpha, alpha, Co/VL, Ci, VL]``, cast to float32."""
    _, _, g_mat = transform_matrices(m)
    kh, kw, ci, co = weight.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"Winograd weight transform: needs a 3x3 HWIO weight, got {weight.shape}")
    u = np.einsum("ei,ijab,nj->enab", g_mat, weight.astype("float64"), g_mat)
    co_pad = -(-co // lanes) * lanes
    u = np.pad(u, ((0, 0), (0, 0), (0, 0), (0, co_pad - co)))
    u = u.reshape(m + 2, m + 2, ci, co_pad // lanes, lanes).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(u, dtype="float32")


def relay_transform(weight, m: int, lanes: int, ci: int, co: int):
    """The same transform as Relay ops on an HWIO float32 weight expression (3x3 x Ci x Co).

    Computed in float64 like the reference; FoldConstant folds it where the weight is a
    constant (for unbound params, ``relay.build`` does once params are bound)."""
    from tvm import relay  # pylint: disable=import-outside-toplevel

    _, _, g_mat = transform_matrices(m)
    alpha, co_pad = m + 2, -(-co // lanes) * lanes
    g = relay.const(g_mat.reshape(alpha, 3, 1), "float64")

    def times_g(x):  # G x over the first axis of a [3, N] x: a broadcast product and a sum
        return relay.sum(g * relay.expand_dims(x, 0), axis=1)

    x = relay.cast(weight, "float64")
    if co_pad != co:
        x = relay.nn.pad(x, ((0, 0), (0, 0), (0, 0), (0, co_pad - co)))
    x = times_g(relay.reshape(x, (3, 3 * ci * co_pad)))  # [e, j * ci * co]
    x = relay.transpose(relay.reshape(x, (alpha, 3, ci * co_pad)), (1, 0, 2))  # [j, e, ...]
    x = times_g(relay.reshape(x, (3, alpha * ci * co_pad)))  # [nu, e * ci * co]
    x = relay.reshape(x, (alpha, alpha, ci, co_pad // lanes, lanes))  # [nu, e, ci, cb, l]
    return relay.cast(relay.transpose(x, (1, 0, 3, 2, 4)), "float32")
