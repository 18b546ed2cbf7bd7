"""Independent NumPy references for the Relax suite (float64; no TVM)."""

from __future__ import annotations

import numpy as np


def conv2d_nhwc(x, w_hwio, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)):
    """NHWC conv of ``x`` with an HWIO weight; padding (top, left, bottom, right)."""
    x, w = np.asarray(x, np.float64), np.asarray(w_hwio, np.float64)
    (sh, sw), (dh, dw), (top, left, bottom, right) = strides, dilation, padding
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw, _, co = w.shape
    ho = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    wo = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((x.shape[0], ho, wo, co))
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            patch = xp[:, y0 : y0 + (ho - 1) * sh + 1 : sh, x0 : x0 + (wo - 1) * sw + 1 : sw, :]
            out += patch @ w[ky, kx]
    return out


def depthwise_nhwc(x, w_hw1c, strides=(1, 1), padding=(0, 0, 0, 0)):
    """NHWC depthwise conv of ``x`` with an HWIO weight ``[Kh, Kw, 1, C]`` (one filter per
    channel); padding (top, left, bottom, right) with zeros, so a non-finite tap over the
    padding gives NaN as stock TVM's padded conv does."""
    x, w = np.asarray(x, np.float64), np.asarray(w_hw1c, np.float64)
    (sh, sw), (top, left, bottom, right) = strides, padding
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw = w.shape[:2]
    ho, wo = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], ho, wo, x.shape[3]))
    with np.errstate(invalid="ignore"):
        for ky in range(kh):
            for kx in range(kw):
                patch = xp[:, ky : ky + (ho - 1) * sh + 1 : sh, kx : kx + (wo - 1) * sw + 1 : sw]
                out += patch * w[ky, kx, 0]
    return out


def conv2d_nchw(x, w_oihw, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)):
    """NCHW conv with an OIHW weight, through :func:`conv2d_nhwc`."""
    out = conv2d_nhwc(
        np.transpose(x, (0, 2, 3, 1)),
        np.transpose(w_oihw, (2, 3, 1, 0)),
        strides,
        padding,
        dilation,
    )
    return out.transpose(0, 3, 1, 2)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


ACTIVATIONS = {
    "none": lambda x, a: x,
    "relu": lambda x, a: np.maximum(x, 0),
    "relu6": lambda x, a: np.clip(x, 0, 6),
    "relu6_max_first": lambda x, a: np.clip(x, 0, 6),
    "leaky_relu": lambda x, a: np.where(x > 0, x, a * x),
    "sigmoid": lambda x, a: sigmoid(x),
    "silu": lambda x, a: x * sigmoid(x),
}


def batch_norm(y, gamma, beta, mean, var, eps, axis=1):
    shape = [1] * y.ndim
    shape[axis] = -1
    r = [np.asarray(v, np.float64).reshape(shape) for v in (gamma, beta, mean, var)]
    return (y - r[2]) / np.sqrt(r[3] + eps) * r[0] + r[1]


def assert_close(got, want, rel=1e-4):
    """|got - want| <= rel * max|want| everywhere (the issue's tolerance)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max())
    assert err <= rel * scale, f"max error {err:.3g} > {rel:g} * max|ref| {scale:.3g}"
