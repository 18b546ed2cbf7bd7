"""BatchNorm folding math, NumPy only (no Relay): the arithmetic behind ``FoldBatchNorm``.

In the spirit of ``torch/nn/utils/fusion.py``: a conv ``y = conv(x, w) + b`` followed by an
inference BatchNorm ``gamma * (y - mean) / sqrt(var + eps) + beta`` equals one conv with
``w' = w * s`` (``s = gamma / sqrt(var + eps)`` along the weight's output-channel axis) and bias
``b' = beta + (b - mean) * s``.
"""

from __future__ import annotations

import numpy as np


def fold_bn(weight, bias, gamma, beta, mean, var, eps, out_axis):
    """Fold inference BatchNorm statistics into a conv weight and bias.

    Parameters
    ----------
    weight : numpy.ndarray
        Conv weight in any layout; ``weight.shape[out_axis]`` is the number of output channels C.
        For grouped and depthwise convs this is still the right axis to scale.
    bias : numpy.ndarray or None
        Conv bias of shape [C]; None means zeros (a conv without bias).
    gamma, beta : numpy.ndarray or None
        BN scale and shift of shape [C]; None means ones (``scale=False``) or zeros
        (``center=False``).
    mean, var : numpy.ndarray
        BN running mean and variance of shape [C].
    eps : float
        BN epsilon, as in the model (never assume 1e-5).
    out_axis : int
        The output-channel axis of ``weight`` (the 'O' of its kernel layout).

    Returns
    -------
    (new_weight, new_bias) : tuple of numpy.ndarray
        The folded weight (same shape and dtype as ``weight``) and bias ([C], weight's dtype),
        computed in float64.
    """
    weight = np.asarray(weight)
    mean = np.asarray(mean, np.float64)
    channels = mean.shape[0] if mean.ndim == 1 else -1
    _check_shapes(weight, out_axis, channels, bias=bias, gamma=gamma, beta=beta, mean=mean, var=var)
    denom = np.asarray(var, np.float64) + eps
    if not np.all(denom > 0):
        raise ValueError(f"fold_bn: var + eps must be positive, got min {denom.min()}")
    scale = _or_fill(gamma, 1.0, channels) / np.sqrt(denom)
    shift = _or_fill(beta, 0.0, channels) + (_or_fill(bias, 0.0, channels) - mean) * scale
    bshape = [1] * weight.ndim
    bshape[out_axis] = channels
    new_weight = weight.astype(np.float64) * scale.reshape(bshape)
    return new_weight.astype(weight.dtype), shift.astype(weight.dtype)


def _or_fill(value, fill, channels):
    if value is None:
        return np.full(channels, fill, np.float64)
    return np.asarray(value, np.float64)


def _check_shapes(weight, out_axis, channels, **vectors):
    if not -weight.ndim <= out_axis < weight.ndim or weight.shape[out_axis] != channels:
        raise ValueError(
            f"fold_bn: weight of shape {weight.shape} has no axis {out_axis} of size {channels} "
            f"(the number of BatchNorm channels)"
        )
    for name, value in vectors.items():
        if value is not None and np.shape(value) != (channels,):
            raise ValueError(
                f"fold_bn: {name} has shape {np.shape(value)}, expected ({channels},) "
                f"(one value per output channel of the weight of shape {weight.shape})"
            )
