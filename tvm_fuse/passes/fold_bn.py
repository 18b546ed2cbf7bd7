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

It refuses (leaves the match unchanged, so the graph still computes the same) when, in this
order: the conv or bias output has another consumer; the BN's output tuple has another reader
(its mean/var outputs are used); the layouts are packed, or the BN's axis is not the conv's output
channel axis; the dtypes are not one float type (e.g. int8 convs, or an ``out_dtype`` other than
the data's); the weight's 'O' axis is not the output channels (depthwise ``HWOI`` with a channel
multiplier); the bias is not one value per channel (a ``bias_add`` along another axis, an ``add``
operand of another shape); constant statistics with ``var + eps`` <= 0. :func:`fold_refusal`
says which, in one sentence, and ``tvm-fuse explain`` prints it.
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


def conv_chain(expr) -> tuple | None:
    """(conv2d, bias op or None) if ``expr`` is what FoldBatchNorm folds a BatchNorm into:
    ``nn.conv2d``, ``nn.bias_add(conv2d, b)``, or ``add`` of a conv2d and ``b`` (either order)."""
    if _is_call(expr, "nn.conv2d"):
        return expr, None
    if _is_call(expr, "nn.bias_add") and _is_call(expr.args[0], "nn.conv2d"):
        return expr.args[0], expr
    if _is_call(expr, "add"):
        conv = next((a for a in expr.args if _is_call(a, "nn.conv2d")), None)
        return None if conv is None else (conv, expr)
    return None


def _is_call(expr, name):
    return isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def fold_refusal(bn: relay.Call, counts) -> str | None:
    """Why FoldBatchNorm leaves the chain ending in ``bn`` unchanged, in one sentence, or None
    if it folds it. ``bn``: a type-checked ``nn.batch_norm`` whose input is a :func:`conv_chain`;
    ``counts``: the use counts of its function (``ir_utils.use_counts``). The pass refuses on
    this and ``tvm-fuse explain`` prints it, so the two cannot disagree."""
    conv, bias_op = conv_chain(bn.args[0])
    return (
        _consumers_refusal(counts, conv, bias_op, bn)
        or _layout_refusal(conv, bn)
        or _dtype_refusal(conv)
        or _weight_refusal(conv)
        or _bias_refusal(bias_op, conv)
        or _variance_refusal(bn, _folded_operands(_operands(bn, conv, bias_op), bn))
    )


def _fold(bn, counts, new):
    """The folded ``bias_add(conv2d(data, W'), B')`` for the chain ending in ``bn``, or None.

    ``new`` holds the rewritten (``post``) data, weight, bias and BN operands by name."""
    if fold_refusal(bn, counts) is not None:
        return None
    conv = conv_chain(bn.args[0])[0]
    axis, channels, out_axis = _channel_axis(conv), _channels(conv), _weight_out_axis(conv)
    operands = _folded_operands(new, bn)
    fold = _fold_constants if _all_constant(operands) else _fold_symbolic
    new_w, new_b = fold(operands, bn.attrs.epsilon, out_axis, channels)
    new_conv = relay.Call(conv.op, [new["data"], new_w], conv.attrs)
    return relay.nn.bias_add(new_conv, new_b, axis=axis)


def _operands(bn, conv, bias_op):
    """The chain's weight, bias and BN operands by name, as in the callback's ``new``."""
    bias = None if bias_op is None else _bias_operands(bias_op, conv)[0]
    return {"weight": conv.args[1], "bias": bias, **dict(zip(_STATS, bn.args[1:]))}


def _folded_operands(operands, bn):
    """The weight, bias and the BN operands the BN uses (gamma and beta only if it scales and
    centers); the others None."""
    used = {"gamma": bn.attrs.scale, "beta": bn.attrs.center, "mean": True, "var": True}
    folded = {name: operands[name] if use else None for name, use in used.items()}
    return {**folded, "weight": operands["weight"], "bias": operands["bias"]}


# -- the refusals, one sentence each -----------------------------------------------------------
def _consumers_refusal(counts, conv, bias_op, bn):
    # TVM's PatternGrouper already drops matches whose inner nodes are used outside; this keeps
    # the rule (pytorch#104593) explicit and independent of that.
    steps = [("conv2d", conv)] + ([] if bias_op is None else [(bias_op.op.name, bias_op)])
    for name, node in steps:
        if counts[node] != 1:
            return (
                f"several consumers: the {name} output feeds {counts[node]} ops, so folding the "
                "BatchNorm into the conv would change what the others read"
            )
    if counts[bn] != 1:
        return (
            f"its output tuple has {counts[bn]} readers, not output 0 alone (e.g. its "
            "mean/variance outputs are used, as in training mode): the fold keeps output 0 only"
        )
    return None


def _layout_refusal(conv, bn):
    """Packed layouts, or a BN that does not normalize along the conv's output channels. (A
    type-checked conv2d's kernel layout always has an 'O' axis.)"""
    attrs = conv.attrs
    out_layout = attrs.out_layout or attrs.data_layout
    layouts = (attrs.data_layout, attrs.kernel_layout, out_layout)
    if not all(len(lay) == 4 and lay.isalpha() and lay.isupper() for lay in layouts):
        return f"layouts {'/'.join(layouts)} (data/kernel/output): only plain 4-D layouts fold"
    axis = _channel_axis(conv)
    if bn.attrs.axis % 4 != axis:
        return (
            f"its axis {bn.attrs.axis} is not the conv's output channel axis {axis} ({out_layout})"
        )
    return None


def _dtype_refusal(conv):
    data, weight = (arg.checked_type.dtype for arg in conv.args)
    out_dtype = conv.attrs.out_dtype or data
    if data in _FLOATS and data == weight == out_dtype:
        return None
    return (
        f"dtypes {data} data, {weight} weight, {out_dtype} output: only a conv of one float "
        "type throughout folds"
    )


def _weight_refusal(conv):
    """The weight's 'O' axis must hold the output channels; a depthwise HWOI weight with a
    channel multiplier holds the input channels there."""
    size = int(conv.args[1].checked_type.shape[_weight_out_axis(conv)])
    if size == _channels(conv):
        return None
    return (
        f"the weight's 'O' axis ({conv.attrs.kernel_layout}) holds {size}, not the "
        f"{_channels(conv)} output channels (e.g. a depthwise conv with a channel multiplier)"
    )


def _bias_refusal(bias_op, conv):
    """Unless the bias step adds one value per output channel (or one for all)."""
    if bias_op is None:
        return None
    axis, channels = _channel_axis(conv), _channels(conv)
    if bias_op.op.name == "nn.bias_add":
        if bias_op.attrs.axis % 4 == axis:
            return None
        return (
            f"its bias_add's axis {bias_op.attrs.axis} is not the conv's output channel axis {axis}"
        )
    other = _bias_operands(bias_op, conv)
    if len(other) != 1:
        return "its add adds the conv2d output to itself, not a per-channel bias"
    shape = tuple(int(d) for d in other[0].checked_type.shape)
    padded = (1,) * (4 - len(shape)) + shape
    others_one = all(d == 1 for i, d in enumerate(padded) if i != axis)
    if len(shape) <= 4 and others_one and padded[axis] in (1, channels):
        return None
    return f"its add's operand of shape {list(shape)} is not one value per output channel"


def _variance_refusal(bn, operands):
    """Constant statistics with var + eps <= 0 (the symbolic path cannot see the values)."""
    if not _all_constant(operands):
        return None
    if np.all(operands["var"].data.numpy() + bn.attrs.epsilon > 0):
        return None
    return "var + epsilon <= 0 in some channel: the BatchNorm divides by zero or takes sqrt < 0"


def _bias_operands(bias_op, conv):
    """The bias step's operands other than the conv."""
    if bias_op.op.name == "nn.bias_add":
        return [bias_op.args[1]]
    return [a for a in bias_op.args if not a.same_as(conv)]


def _channel_axis(conv):
    """The conv's output channel axis (plain layouts: see :func:`_layout_refusal`)."""
    out_layout = conv.attrs.out_layout or conv.attrs.data_layout
    return out_layout.index("C")


def _channels(conv):
    return int(conv.checked_type.shape[_channel_axis(conv)])


def _weight_out_axis(conv):
    return conv.attrs.kernel_layout.index("O")


def _all_constant(operands):
    return all(e is None or isinstance(e, relay.Constant) for e in operands.values())


def _fold_constants(operands, eps, out_axis, channels):
    """(W', B') as new constants, computed now by ``bn_fold.fold_bn`` (var + eps > 0 checked
    by :func:`fold_refusal`)."""
    values = {name: None if e is None else e.data.numpy() for name, e in operands.items()}
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
