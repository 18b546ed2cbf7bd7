"""FoldBatchNorm (Relax): inference BatchNorm folded into the conv2d before it.

First pass of the Relax pipeline, after constants are bound (``optimize`` binds the params and
runs ``FoldConstant`` first, so that a bias ``reshape(const)`` is a constant). It rewrites::

    %c = R.nn.conv2d(%x, W)            # any layout, groups, strides, padding, dilation
    %b = R.add(%c, B)                  # optional constant per-channel bias
    %t = R.nn.batch_norm(%b, gamma, beta, mean, var)      # axis: the conv's output channels
    %y = %t[0]

into ``%y = R.add(R.nn.conv2d(%x, W'), B')`` with ``W'`` and ``B'`` from ``tvm_fuse.bn_fold``
(the same NumPy math as the Relay backend, computed in float64); ``center``/``scale`` off are
honoured. It covers what Relax's ``FoldBatchnormToConv2D`` misses: a conv with a bias, a
grouped or depthwise conv, a BN without affine parameters. It refuses (leaves the chain as it is,
with the reason in :func:`fold_refusal`): a conv or bias output with another consumer (or
returned by the function), a non-constant weight, bias or BN parameter, a BN in training mode,
a BN on another axis than the conv's output channels, a BN whose mean or variance output is used.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..bn_fold import fold_bn
from . import compat


def FoldBatchNorm() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    """The pass: every inference BatchNorm after a conv2d it can prove safe folds into it."""

    def transform(func, mod, _ctx):
        if not isinstance(func, relax.Function):
            return func
        folded = _Folder(mod, compat.dataflow_readers(func)).visit_expr(func)
        return relax.analysis.remove_all_unused(folded)

    return relax.transform.function_pass(opt_level=0, name="tvm_fuse.FoldBatchNorm")(transform)


class Chain:
    """The bindings of one conv -> [bias add] -> batch_norm -> [0] chain."""

    def __init__(self, conv_var, conv, bias_var, bias, bn_var, bn):
        self.conv_var, self.conv, self.bias_var, self.bias = conv_var, conv, bias_var, bias
        self.bn_var, self.bn = bn_var, bn


def match_chain(value, values: dict) -> Chain | None:
    """The chain ending in ``value`` (a ``TupleGetItem(bn, 0)``), or None."""
    if not (isinstance(value, relax.TupleGetItem) and value.index == 0):
        return None
    bn_var = value.tuple_value
    bn = values.get(bn_var)
    if not _is_op(bn, "relax.nn.batch_norm"):
        return None
    bias_var, bias = None, None
    conv_var = bn.args[0]
    conv = values.get(conv_var)
    if _is_op(conv, "relax.add"):
        bias_var, bias = conv_var, conv
        conv_var = next((a for a in conv.args if _is_op(values.get(a), "relax.nn.conv2d")), None)
        conv = values.get(conv_var)
    if not _is_op(conv, "relax.nn.conv2d"):
        return None
    return Chain(conv_var, conv, bias_var, bias, bn_var, bn)


def fold_refusal(chain: Chain, users: dict, values: dict) -> str | None:
    """Why the chain's BatchNorm cannot be folded (a sentence), or None when it can; ``users``:
    the dataflow block's use-def chain, ``values``: the value bound to each variable."""
    bn, conv = chain.bn, chain.conv
    if bool(bn.attrs.training):
        return "the BatchNorm is in training mode"
    out_layout = str(conv.attrs.out_layout or conv.attrs.data_layout)
    if int(bn.attrs.axis) % len(out_layout) != out_layout.index("C"):
        return f"the BatchNorm's axis {int(bn.attrs.axis)} is not the conv's channel axis"
    for var in (v for v in (chain.conv_var, chain.bias_var) if v is not None):
        if not isinstance(var, relax.DataflowVar) or len(users.get(var, ())) != 1:
            return f"the conv's output {var.name} has several consumers"
    for user in users.get(chain.bn_var, ()):
        getter = values.get(user)
        if not (isinstance(getter, relax.TupleGetItem) and getter.index == 0) and users.get(user):
            return "the BatchNorm's mean or variance output is used"
    if compat.constant_value(conv.args[1]) is None:
        return "the conv's weight is not a constant"
    if chain.bias is not None and _bias_vector(chain) is None:
        return "the add after the conv is not a constant per-channel bias"
    if any(compat.constant_value(a) is None for a in bn.args[1:]):
        return "the BatchNorm's parameters are not constants"
    return None


def _bias_vector(chain: Chain) -> np.ndarray | None:
    """The per-channel bias added after the conv, as a [C] vector, or None."""
    other = next(a for a in chain.bias.args if not a.same_as(chain.conv_var))
    value = compat.constant_value(other)
    out_layout = str(chain.conv.attrs.out_layout or chain.conv.attrs.data_layout)
    channels = compat.tensor_shape(chain.conv)[out_layout.index("C")]
    if value is None or value.size not in (1, channels):
        return None
    axis = out_layout.index("C") - len(out_layout)  # from the right, as broadcasting aligns
    if (
        value.size == channels
        and value.ndim
        and value.shape[axis if value.ndim >= -axis else 0] != channels
    ):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(value.dtype)


def folded(chain: Chain, data):
    """``(conv2d(data, W') , B')``: the folded conv call and bias vector of ``chain``."""
    bn, conv = chain.bn, chain.conv
    gamma, beta, mean, var = (compat.constant_value(a) for a in bn.args[1:])
    weight = compat.constant_value(conv.args[1])
    bias = _bias_vector(chain) if chain.bias is not None else None
    out_axis = str(conv.attrs.kernel_layout).index("O")
    new_w, new_b = fold_bn(
        weight,
        bias,
        gamma if bn.attrs.scale else None,
        beta if bn.attrs.center else None,
        mean,
        var,
        float(bn.attrs.epsilon),
        out_axis,
    )
    attrs = conv.attrs
    call = relax.op.nn.conv2d(
        data,
        compat.constant(new_w),
        strides=attrs.strides,
        padding=attrs.padding,
        dilation=attrs.dilation,
        groups=attrs.groups,
        data_layout=attrs.data_layout,
        kernel_layout=attrs.kernel_layout,
        out_layout=attrs.out_layout,
        out_dtype=attrs.out_dtype if attrs.out_dtype is not None else None,
    )
    return call, new_b


def _is_op(expr, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


@relax.expr_functor.mutator
class _Folder(relax.PyExprMutator):
    def __init__(self, mod, users):
        super().__init__(mod)
        self.users = users
        self.values = {}

    def visit_var_binding_(self, binding):
        self.values[binding.var] = binding.value
        chain = match_chain(binding.value, self.values)
        if chain is None or fold_refusal(chain, self.users, self.values) is not None:
            super().visit_var_binding_(binding)
            return
        call, bias = folded(chain, self.visit_expr(chain.conv.args[0]))
        out_layout = str(chain.conv.attrs.out_layout or chain.conv.attrs.data_layout)
        shape = [1] * len(out_layout)
        shape[out_layout.index("C")] = -1
        conv = self.builder_.emit(call)
        value = relax.op.add(conv, compat.constant(bias.reshape(shape)))
        if isinstance(binding.var, relax.DataflowVar):
            new_var = self.builder_.emit(value)
        else:
            new_var = self.builder_.emit_output(value)
        self.set_var_remap(binding.var, new_var)
