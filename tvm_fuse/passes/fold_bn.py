"""FoldBatchNorm: fold inference ``nn.batch_norm`` into the preceding ``nn.conv2d``.

Pipeline position: the first pass of ``tvm_fuse.pipeline()``, before ``ConvertLayoutNHWC`` and
fusion, so that those see ``conv2d -> bias_add -> activation`` chains. Run it after binding params
(``relay.build_module.bind_params_by_name``): weights and BN statistics that are not
``relay.Constant`` (e.g. still function parameters) are left alone.

It matches (the bias step is optional)::

    %0 = nn.conv2d(%data, %weight, ...);
    %1 = nn.bias_add(%0, %bias, axis=C);  /* or add(%0, %bias), %bias a per-channel constant */
    %2 = nn.batch_norm(%1, %gamma, %beta, %mean, %var, axis=C, epsilon=eps, center=?, scale=?);
    %2.0

and rewrites it to ``nn.bias_add(nn.conv2d(%data, W', ...), B', axis=C)``, with ``W'`` and ``B'``
new constants computed now by :func:`tvm_fuse.bn_fold.fold_bn` (no multiply, add or sqrt left).

It refuses (leaves the match unchanged, so the graph still computes the same) when: the conv or
bias output has another consumer; the BN's mean/var outputs are used; a weight, bias or used BN
parameter is not a constant; the dtypes are not one float type (e.g. int8 convs, or an
``out_dtype`` other than the data's); the layouts are packed, or the BN's (or bias_add's) axis is
not the conv's output channel axis; the weight's 'O' axis is not the output channels (depthwise
``HWOI`` with a channel multiplier); an ``add`` operand is not per-channel; ``var + eps`` <= 0.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import DFPatternCallback, is_op, is_tuple_get_item, wildcard

from ..bn_fold import fold_bn
from ..ir_utils import relay_functions, use_counts

_FLOATS = ("float16", "float32", "float64")


class _FoldCallback(DFPatternCallback):
    """Rewrites one function; ``counts`` are the use counts of that function's (``pre``) nodes."""

    def __init__(self, counts):
        super().__init__(require_type=False, rewrite_once=True)
        self.counts = counts
        self.data = wildcard()
        conv = is_op("nn.conv2d")(self.data, wildcard())
        biased = conv.optional(
            lambda x: is_op("nn.bias_add")(x, wildcard()) | is_op("add")(x, wildcard())
        )
        bn = is_op("nn.batch_norm")(biased, wildcard(), wildcard(), wildcard(), wildcard())
        self.pattern = is_tuple_get_item(bn, 0)

    def callback(self, pre, post, node_map):
        folded = _fold(pre.tuple_value, self.counts, node_map[self.data][0])
        return post if folded is None else folded


def _fold(bn, counts, data):
    """The folded ``bias_add(conv2d(data, W'), B')`` for the chain ending in ``bn``, or None."""
    conv, bias_op = _split(bn.args[0])
    # TVM's PatternGrouper already drops matches whose inner nodes are used outside; this keeps
    # the rule (pytorch#104593) explicit and independent of that.
    if any(counts[node] != 1 for node in (conv, bias_op, bn) if node is not None):
        return None
    axis = _channel_axis(conv, bn)
    if axis is None or not _same_float_dtype(conv):
        return None
    channels = int(conv.checked_type.shape[axis])
    bias = _bias_value(bias_op, conv, axis, channels)
    params = _bn_params(bn)
    weight = _constant(conv.args[1])
    if bias is None or params is None or weight is None:
        return None
    out_axis = conv.attrs.kernel_layout.index("O")
    if weight.shape[out_axis] != channels or not np.all(params["var"] + bn.attrs.epsilon > 0):
        return None
    new_w, new_b = fold_bn(weight, bias, eps=bn.attrs.epsilon, out_axis=out_axis, **params)
    new_conv = relay.Call(conv.op, [data, relay.const(new_w)], conv.attrs)
    return relay.nn.bias_add(new_conv, relay.const(new_b), axis=axis)


def _split(expr):
    """(conv, bias op or None) of the BN's input."""
    if expr.op.name == "nn.conv2d":
        return expr, None
    conv = next(a for a in expr.args if isinstance(a, relay.Call) and a.op.name == "nn.conv2d")
    return conv, expr


def _channel_axis(conv, bn):
    """The conv's output channel axis if BN normalizes along it and the layouts are plain."""
    out_layout = conv.attrs.out_layout or conv.attrs.data_layout
    layouts = (out_layout, conv.attrs.data_layout, conv.attrs.kernel_layout)
    if not all(len(lay) == 4 and lay.isalpha() and lay.isupper() for lay in layouts):
        return None
    axis = out_layout.index("C")
    return axis if bn.attrs.axis % 4 == axis and "O" in conv.attrs.kernel_layout else None


def _same_float_dtype(conv):
    data, weight = (arg.checked_type.dtype for arg in conv.args)
    out_dtype = conv.attrs.out_dtype or data
    return data in _FLOATS and data == weight == out_dtype


def _bias_value(bias_op, conv, axis, channels):
    """The conv bias as a [C] array (zeros without a bias step), or None if it cannot be folded."""
    if bias_op is None:
        return np.zeros(channels)
    other = [a for a in bias_op.args if not a.same_as(conv)]
    value = _constant(other[0]) if len(other) == 1 else None
    if value is None:
        return None
    if bias_op.op.name == "nn.bias_add":
        return value if bias_op.attrs.axis % 4 == axis else None
    return _per_channel(value, axis, channels)


def _per_channel(value, axis, channels):
    """``value`` (an ``add`` operand broadcast against a 4-d output) as [C], or None."""
    shape = (1,) * (4 - value.ndim) + value.shape
    others_one = all(d == 1 for i, d in enumerate(shape) if i != axis)
    if value.ndim > 4 or not others_one or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,))


def _bn_params(bn):
    """gamma/beta/mean/var as arrays (gamma/beta None when scale/center is off), or None."""
    names = ("gamma", "beta", "mean", "var")
    used = (bn.attrs.scale, bn.attrs.center, True, True)
    params = {n: _constant(a) if u else None for n, a, u in zip(names, bn.args[1:], used)}
    missing = any(params[n] is None for n, u in zip(names, used) if u)
    return None if missing else params


def _constant(expr):
    return expr.data.numpy() if isinstance(expr, relay.Constant) else None


def FoldBatchNorm() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM pass factory)
    """Fold inference BatchNorm into the preceding conv2d in every Relay function of the module.

    Returns
    -------
    ret : tvm.transform.Pass
        The module pass ``tvm_fuse.FoldBatchNorm``.
    """

    def transform(mod, _ctx):
        mod = relay.transform.InferType()(mod)
        for gvar, func in relay_functions(mod).items():
            new_func = _FoldCallback(use_counts(func)).rewrite(func)
            if not new_func.same_as(func):
                mod.update_func(gvar, new_func)
        return relay.transform.InferType()(mod)

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.FoldBatchNorm")
