"""DenseAsConv (Relax): a dense layer becomes a 1x1 NHWC conv that the fused kernel runs.

The Relax counterpart of ``tvm_fuse.passes.dense`` (whose docstring says why: at batch 1 a dense
layer is a matrix-vector product bound by streaming its weight, which the direct kernel does from
its packed weight, split across the cores by output channels). In the pipeline after
``ConvertLayoutNHWC``, before ``FuseConvBiasAct``, it rewrites::

    %0 = R.matmul(%x, W)              # float32; %x: [N, K]; W: a constant [K, M] (the importers'
                                      # Gemm / Linear, its transpose folded by FoldConstant)
    %1 = R.add(%0, B)                 # optional: B a constant [M] or [1, M], either operand
    =>  R.reshape(R.add(R.nn.conv2d(R.reshape(%x, [1, 1, N, K]), W as [1, 1, K, M],
                                    data_layout="NHWC", kernel_layout="HWIO"), B as [M]), [N, M])

which computes the same sums of the same products, so NaN and Inf come out where the matmul gave
them. An activation after the layer (a form of ``fuse.RELAX_ACTIVATIONS``: ReLU, ReLU6, leaky ReLU,
sigmoid, SiLU) is then moved in front of the reshape back to [N, M], onto the conv's output:
element-wise ops give the same values position by position in either shape. ``FuseConvBiasAct`` then
fuses the conv, its bias and its activation into one kernel. Left alone: a weight that is not a
constant (params not bound), other dtypes, an ``%x`` of another rank (a batched matmul), and a layer
the fast kernel would refuse on the target (``strategy.fast_path_refusal``, e.g. a tiny output:
stock ops are the better choice there). A matmul that another op reads besides its bias sum is
computed once all the same: both rewrites build the same conv, which Relax binds once, and
``FuseConvBiasAct`` leaves the bias of a conv output with two readers to a stock add.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from ..spec import KernelSpec
from . import compat, strategy
from .fuse import RELAX_ACTIVATIONS


def DenseAsConv(target=None) -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass style)
    """Rewrite dense layers as 1x1 NHWC convs for ``target`` (None: the enclosing ``with
    target``, else this CPU); see the module docstring."""

    def transform(func, _mod, _ctx):
        if not isinstance(func, relax.Function):
            return func
        return _Rewriter(compat.as_target(target), func).run()

    return relax.transform.function_pass(opt_level=0, name="tvm_fuse.DenseAsConv")(transform)


class _Rewriter:
    """The rewrites of one function: dense layers with a bias first (a bare matmul matched
    first would leave the bias outside the conv), then the bare ones, then the activations
    after them moved onto the convs."""

    def __init__(self, target, func):
        self.target, self.func = target, func
        self.x, self.weight, self.bias = wildcard(), is_const(), is_const()
        self.matmul = is_op("relax.matmul")(self.x, self.weight)

    def run(self):
        biased = is_op("relax.add")(self.matmul, self.bias) | is_op("relax.add")(
            self.bias, self.matmul
        )
        self.func = rewrite_call(biased, self._rewrite, self.func)
        self.func = rewrite_call(self.matmul, self._rewrite, self.func)
        return _ActivationMover(self.func).run()

    def _rewrite(self, matched, found):
        dense = found[self.matmul]
        bias = found.get(self.bias) if not matched.same_as(dense) else None
        sizes = _sizes(dense, bias)
        if sizes is None or not self._fast(sizes, bias):
            return matched
        n, k, m = sizes
        weight = compat.constant_value(found[self.weight]).reshape(1, 1, k, m)
        conv = relax.op.nn.conv2d(
            relax.op.reshape(found[self.x], (1, 1, n, k)),
            compat.constant(weight),
            data_layout="NHWC",
            kernel_layout="HWIO",
        )
        if bias is not None:
            conv = relax.op.add(conv, compat.constant(compat.constant_value(bias).reshape(m)))
        return relax.op.reshape(conv, (n, m))

    def _fast(self, sizes, bias) -> bool:
        n, k, m = sizes
        spec = KernelSpec.dense(n, k, m).with_epilogue(bias is not None)
        return strategy.fast_path_refusal(spec, self.target) is None


def _sizes(dense, bias) -> tuple[int, int, int] | None:
    """(N, K, M) of a float32 ``dense`` (``matmul`` of a 2-D ``x`` by a 2-D weight) and a
    per-unit ``bias`` ([M] or [1, M], or None), else None: the forms the rewrite takes."""
    x, weight = dense.args
    shapes = [compat.tensor_shape(e) for e in (x, weight, dense)]
    if any(s is None or len(s) != 2 for s in shapes) or shapes[0][1] != shapes[1][0]:
        return None
    operands = [x, weight, dense] + ([bias] if bias is not None else [])
    if {compat.tensor_dtype(e) for e in operands} != {"float32"}:
        return None
    (n, k), (_, m) = shapes[0], shapes[1]
    if bias is not None and compat.tensor_shape(bias) not in ((m,), (1, m)):
        return None
    return n, k, m


class _ActivationMover:
    """``act(reshape(conv [+ constant], shape))`` -> ``reshape(act(conv [+ constant]), shape)``
    for the activation forms of ``fuse.RELAX_ACTIVATIONS`` (the reshape back to [N, M] the
    rewrite left between a dense layer's conv and its activation). The activation's ops are
    rebuilt over the conv's output as they were, attributes and constants kept. Left alone: an
    activation with a constant that is not a scalar (it could broadcast to another shape), and
    one whose input or steps have readers besides it (the conv's output would have two readers,
    which ``FuseConvBiasAct`` does not fuse)."""

    def __init__(self, func):
        self.func = func
        conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
        self.conv = conv | is_op("relax.add")(conv, is_const())
        self.reshaped = is_op("relax.reshape")(self.conv, wildcard())
        self._analysis = None  # of self.func: see _analysed

    def run(self):
        """One activation form at a time (SiLU's ``sigmoid(x)`` is not moved alone: ``x`` has
        the product as a second reader)."""
        for form in RELAX_ACTIVATIONS.values():
            if form is not None:
                self._analysis = None  # the rewrite of the form before may have changed func
                self.func = rewrite_call(form(self.reshaped), self._move, self.func)
        return self.func

    def _analysed(self):
        """(var -> bound value, var -> readers, value -> var) of ``self.func``, made at a form's
        first match only: most functions have none, and the walks cover the whole function."""
        if self._analysis is None:
            values = relax.analysis.get_var2val(self.func)
            bound_to = {value: var for var, value in values.items()}
            self._analysis = values, compat.dataflow_readers(self.func), bound_to
        return self._analysis

    def _move(self, matched, found):
        values, readers, bound_to = self._analysed()
        reshape, steps = found[self.reshaped], []
        moved = _rebuilt(matched, reshape.same_as, values, found[self.conv], steps)
        inside = set(steps) | {bound_to.get(matched)}
        for var in steps:
            if not isinstance(var, relax.DataflowVar) or not set(readers.get(var, ())) <= inside:
                return matched
        return matched if moved is None else relax.op.reshape(moved, reshape.args[1])


def _rebuilt(expr, is_input, values, new_input, steps):
    """``expr``, element-wise ops over an input (a call that ``is_input``, or a var bound to
    it), rebuilt over ``new_input``; its vars followed to their calls and listed in ``steps``.
    None where it has a constant that is not a scalar."""
    value = values.get(expr) if isinstance(expr, relax.Var) else expr
    if isinstance(expr, relax.Var) and value is not None:
        steps.append(expr)
    if value is not None and is_input(value):
        return new_input
    constant = compat.constant_value(expr)
    if constant is not None:
        return expr if constant.ndim == 0 else None
    if not isinstance(value, relax.Call):
        return expr
    args = [_rebuilt(arg, is_input, values, new_input, steps) for arg in value.args]
    if any(arg is None for arg in args):
        return None
    return relax.Call(value.op, args, value.attrs)  # element-wise ops: no type arguments
