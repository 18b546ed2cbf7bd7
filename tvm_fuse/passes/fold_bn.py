"""FoldBatchNorm: fold inference ``nn.batch_norm`` into the preceding ``nn.conv2d``.

Pipeline position: the first pass of ``tvm_fuse.pipeline()``, before ``ConvertLayoutNHWC`` and
fusion, so that those see ``conv2d -> bias_add -> activation`` chains.

It matches (the bias step is optional)::

    %0 = nn.conv2d(%data, %weight, ...);
    %1 = nn.bias_add(%0, %bias, axis=C);  /* or add(%0, %bias), %bias one value per channel */
    %2 = nn.batch_norm(%1, %gamma, %beta, %mean, %var, axis=C, epsilon=eps, center=?, scale=?);
    %2.0

and rewrites it to ``nn.bias_add(nn.conv2d(%data, W', ...), B', axis=C)``. When the weight, bias
and used BN parameters are all constants (params bound first), ``W'`` and ``B'`` are new
constants computed now by :func:`tvm_fuse.bn_fold.fold_bn`. Otherwise (e.g. function parameters
that ``relay.build(mod, params=...)`` binds later) they are Relay expressions of those operands,
the same arithmetic in float64 (``W' = w * s`` along the weight's 'O' axis, ``s = gamma /
sqrt(var + eps)``, ``B' = beta + (b - mean) * s``), which ``relay.build``'s own FoldConstant
turns into the same constants once it binds the params; operands never bound are computed at
every run, still giving the BN's result.

Non-finite statistics: where ``var + eps <= 0`` the constant path refuses (the BN stays); the
symbolic path cannot see the values, and a channel whose scale ``s`` is infinite or NaN comes
out NaN throughout, where the unfolded BN gives +-inf in some places and NaN in others. Finite
statistics give the unfolded result up to rounding, non-finite inputs included.

It refuses (leaves the match unchanged, so the graph still computes the same) when: the conv or
bias output has another consumer; the BN's mean/var outputs are used; the dtypes are not one
float type (e.g. int8 convs, or an ``out_dtype`` other than the data's); the layouts are packed,
or the BN's (or bias_add's) axis is not the conv's output channel axis; the weight's 'O' axis is
not the output channels (depthwise ``HWOI`` with a channel multiplier); an ``add`` operand is not
per-channel; constant statistics with ``var + eps`` <= 0.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import DFPatternCallback, is_op, is_tuple_get_item, wildcard

from ..bn_fold import fold_bn
from ..ir_utils import relay_functions, use_counts

_FLOATS = ("float16", "float32", "float64")
_STATS = ("gamma", "beta", "mean", "var")


class _FoldCallback(DFPatternCallback):
    """Rewrites one function; ``counts`` are the use counts of that function's (``pre``) nodes."""

    def __init__(self, counts):
        super().__init__(require_type=False, rewrite_once=True)
        self.counts = counts
        self.data, self.weight = wildcard(), wildcard()
        self.biases = (wildcard(), wildcard())  # the bias_add / add operand
        self.stats = tuple(wildcard() for _ in _STATS)
        conv = is_op("nn.conv2d")(self.data, self.weight)
        biased = conv.optional(
            lambda x: is_op("nn.bias_add")(x, self.biases[0]) | is_op("add")(x, self.biases[1])
        )
        bn = is_op("nn.batch_norm")(biased, *self.stats)
        self.pattern = is_tuple_get_item(bn, 0)

    def callback(self, pre, post, node_map):
        new = {"data": node_map[self.data][0], "weight": node_map[self.weight][0]}
        new["bias"] = next((node_map[b][0] for b in self.biases if b in node_map), None)
        new.update((name, node_map[p][0]) for name, p in zip(_STATS, self.stats))
        folded = _fold(pre.tuple_value, self.counts, new)
        return post if folded is None else folded


def _fold(bn, counts, new):
    """The folded ``bias_add(conv2d(data, W'), B')`` for the chain ending in ``bn``, or None.

    ``new`` holds the rewritten (``post``) data, weight, bias and BN operands by name."""
    conv, bias_op = _split(bn.args[0])
    # TVM's PatternGrouper already drops matches whose inner nodes are used outside; this keeps
    # the rule (pytorch#104593) explicit and independent of that.
    if any(counts[node] != 1 for node in (conv, bias_op, bn) if node is not None):
        return None
    axis = _channel_axis(conv, bn)
    if axis is None or not _same_float_dtype(conv):
        return None
    channels = int(conv.checked_type.shape[axis])
    out_axis = conv.attrs.kernel_layout.index("O")
    if int(conv.args[1].checked_type.shape[out_axis]) != channels:
        return None
    if bias_op is not None and not _bias_is_per_channel(bias_op, conv, axis, channels):
        return None
    used = {"gamma": bn.attrs.scale, "beta": bn.attrs.center, "mean": True, "var": True}
    operands = {name: new[name] if use else None for name, use in used.items()}
    operands.update(weight=new["weight"], bias=new["bias"])
    fold = _fold_constants if _all_constant(operands) else _fold_symbolic
    folded = fold(operands, bn.attrs.epsilon, out_axis, channels)
    if folded is None:
        return None
    new_conv = relay.Call(conv.op, [new["data"], folded[0]], conv.attrs)
    return relay.nn.bias_add(new_conv, folded[1], axis=axis)


def _all_constant(operands):
    return all(e is None or isinstance(e, relay.Constant) for e in operands.values())


def _fold_constants(operands, eps, out_axis, channels):
    """(W', B') as new constants, computed now by ``bn_fold.fold_bn``; None if var + eps <= 0."""
    values = {name: None if e is None else e.data.numpy() for name, e in operands.items()}
    if not np.all(values["var"] + eps > 0):
        return None
    if values["bias"] is not None:
        values["bias"] = np.broadcast_to(values["bias"].reshape(-1), (channels,))
    new_w, new_b = fold_bn(eps=eps, out_axis=out_axis, **values)
    return relay.const(new_w), relay.const(new_b)


def _fold_symbolic(operands, eps, out_axis, channels):
    """(W', B') as Relay expressions of the operands, in float64 like ``bn_fold.fold_bn``, so
    that FoldConstant gives the same constants once the params are bound."""
    weight = operands["weight"]
    dtype = weight.checked_type.dtype

    def f64(name, fill):
        expr = operands[name]
        if expr is None:
            return relay.const(fill, "float64")
        return relay.cast(expr, "float64")

    bias = operands["bias"]
    if bias is not None and [int(d) for d in bias.checked_type.shape] != [channels]:
        operands["bias"] = relay.broadcast_to(relay.reshape(bias, [-1]), [channels])
    scale = f64("gamma", 1.0) / relay.sqrt(f64("var", 0.0) + relay.const(eps, "float64"))
    shift = f64("beta", 0.0) + (f64("bias", 0.0) - f64("mean", 0.0)) * scale
    bshape = [1] * len(weight.checked_type.shape)
    bshape[out_axis] = channels
    new_w = relay.cast(weight, "float64") * relay.reshape(scale, bshape)
    return _narrow(new_w, dtype), _narrow(shift, dtype)


def _narrow(expr, dtype):
    """``expr`` (float64) cast to ``dtype``; via float32 for float16, because LLVM's direct
    float64 -> float16 conversion gives zeros on x86 (a rounding may differ from NumPy's)."""
    if dtype == "float16":
        expr = relay.cast(expr, "float32")
    return relay.cast(expr, dtype)


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


def _bias_is_per_channel(bias_op, conv, axis, channels):
    """Whether the bias step adds one value per output channel (or one for all)."""
    if bias_op.op.name == "nn.bias_add":
        return bias_op.attrs.axis % 4 == axis
    other = [a for a in bias_op.args if not a.same_as(conv)]
    if len(other) != 1:
        return False
    shape = tuple(int(d) for d in other[0].checked_type.shape)
    padded = (1,) * (4 - len(shape)) + shape
    others_one = all(d == 1 for i, d in enumerate(padded) if i != axis)
    return len(shape) <= 4 and others_one and padded[axis] in (1, channels)


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
