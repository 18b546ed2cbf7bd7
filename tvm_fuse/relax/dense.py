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
them; ``FuseConvBiasAct`` then fuses the conv and its bias into one kernel. An activation after
the layer stays a stock op after the reshape (on [N, M] values, next to nothing). Left alone: a
weight that is not a constant (params not bound), other dtypes, an ``%x`` of another rank (a
batched matmul), and a layer the fast kernel would refuse on the target
(``strategy.fast_path_refusal``, e.g. a tiny output: stock ops are the better choice there). A
matmul that another op reads besides its bias sum is computed once all the same: both rewrites
build the same conv, which Relax binds once, and ``FuseConvBiasAct`` leaves the bias of a conv
output with two readers to a stock add.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from ..spec import KernelSpec
from . import compat, strategy


def DenseAsConv(target=None) -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass style)
    """Rewrite dense layers as 1x1 NHWC convs for ``target`` (None: the enclosing ``with
    target``, else this CPU); see the module docstring."""

    def transform(func, _mod, _ctx):
        if not isinstance(func, relax.Function):
            return func
        return _Rewriter(compat.as_target(target), func).run()

    return relax.transform.function_pass(opt_level=0, name="tvm_fuse.DenseAsConv")(transform)


class _Rewriter:
    """The two rewrites of one function: dense layers with a bias first (a bare matmul matched
    first would leave the bias outside the conv), then the bare ones."""

    def __init__(self, target, func):
        self.target, self.func = target, func
        self.x, self.weight, self.bias = wildcard(), is_const(), is_const()
        self.matmul = is_op("relax.matmul")(self.x, self.weight)

    def run(self):
        biased = is_op("relax.add")(self.matmul, self.bias) | is_op("relax.add")(
            self.bias, self.matmul
        )
        self.func = rewrite_call(biased, self._rewrite, self.func)
        return rewrite_call(self.matmul, self._rewrite, self.func)

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
