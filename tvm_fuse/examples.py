"""Small NCHW Relay models with seeded random weights, for the demo, the tests and notebooks.

``seed_example()`` is the worked example of ``docs/architecture.md``: ``[1,64,56,56] -> conv 3x3 s2 p1
(128) -> BatchNorm -> ReLU``. ``conv_bn_act()`` builds any variation of it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay


def conv_bn_layer(
    data,
    *,
    name,
    params,
    rng,
    channels,
    kernel=3,
    strides=1,
    padding=1,
    dilation=1,
    groups=1,
    conv_bias=False,
    relu=True,
    epsilon=1e-5,
    scale=True,
    center=True,
):
    """Append ``conv2d -> [bias_add] -> batch_norm -> [relu]`` (NCHW) to ``data``.

    New weights go into ``params`` under ``{name}_weight``, ``{name}_gamma``, ...; returns the
    layer's output expression. The BN statistics are random but sane (variance > 0), so folding
    errors show up in the output.
    """
    cin = int(relay.transform.InferTypeLocal(data).shape[1])
    kernel = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)

    def param(suffix, shape, low=-1.0, high=1.0):
        params[f"{name}_{suffix}"] = rng.uniform(low, high, shape).astype("float32")
        return relay.var(f"{name}_{suffix}", shape=shape)

    weight = param("weight", (channels, cin // groups, *kernel), -0.5, 0.5)
    y = relay.nn.conv2d(
        data,
        weight,
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
        channels=channels,
        kernel_size=kernel,
    )
    if conv_bias:
        y = relay.nn.bias_add(y, param("bias", (channels,)))
    stats = [
        param("gamma", (channels,), 0.5, 1.5),
        param("beta", (channels,)),
        param("mean", (channels,)),
        param("var", (channels,), 0.5, 2.0),
    ]
    y = relay.nn.batch_norm(y, *stats, epsilon=epsilon, center=center, scale=scale)[0]
    return relay.nn.relu(y) if relu else y


def _module(body, params):
    """``(mod, params)`` with ``data`` first and the params in creation order."""
    free = {v.name_hint: v for v in relay.analysis.free_vars(body)}
    order = [free.pop("data")] + [free.pop(name) for name in params]
    return tvm.IRModule.from_expr(relay.Function(order + list(free.values()), body)), params


def conv_bn_act(data_shape=(1, 64, 56, 56), seed=0, **layer):
    """One ``conv_bn_layer`` on an NCHW input ``data``; returns ``(mod, params)``.

    ``layer`` takes the keywords of :func:`conv_bn_layer` (``channels`` defaults to 128).
    """
    layer.setdefault("channels", 128)
    data = relay.var("data", shape=data_shape)
    params: dict = {}
    body = conv_bn_layer(data, name="conv", params=params, rng=np.random.default_rng(seed), **layer)
    return _module(body, params)


def small_layer(cin=16, size=14, channels=16, **layer):
    """A conv-BN-ReLU on ``[1, cin, size, size]`` small enough to tune and build in seconds."""
    return conv_bn_act(data_shape=(1, cin, size, size), channels=channels, **layer)


def basic_block(data_shape=(1, 16, 12, 12), seed=0):
    """A ResNet basic block: conv-BN-relu -> conv-BN -> add(shortcut) -> relu."""
    data = relay.var("data", shape=data_shape)
    params: dict = {}
    rng = np.random.default_rng(seed)
    channels = data_shape[1]
    y = conv_bn_layer(data, name="conv1", params=params, rng=rng, channels=channels)
    y = conv_bn_layer(y, name="conv2", params=params, rng=rng, channels=channels, relu=False)
    return _module(relay.nn.relu(relay.add(y, data)), params)


def seed_example(batch=1):
    """The worked example: ``[1,64,56,56] -> conv 3x3 s2 p1 (128) -> BatchNorm -> ReLU``."""
    return conv_bn_act(data_shape=(batch, 64, 56, 56), channels=128, kernel=3, strides=2, padding=1)


def random_inputs(mod, params=None, seed=1) -> dict:
    """Seeded random values for every input of ``main`` that is not in ``params``."""
    rng = np.random.default_rng(seed)
    params = params or {}
    return {
        p.name_hint: rng.standard_normal([int(d) for d in p.checked_type.shape]).astype(
            p.checked_type.dtype
        )
        for p in relay.transform.InferType()(mod)["main"].params
        if p.name_hint not in params
    }
