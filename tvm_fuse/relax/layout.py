"""ConvertLayoutNHWC (Relax): the whole graph in NHWC, transposes only at its boundaries.

Runs after ``FoldBatchNorm``. Relax's ``ConvertLayout`` makes every ``conv2d`` take NHWC data and
an HWIO weight and carries NHWC through the layout-agnostic ops after it (element-wise ops,
pooling, reductions); ``FoldConstant`` then computes the transposed constant weights at compile
time and ``EliminateCommonSubexpr`` merges the entry transposes of an input that feeds several
convs. What is left are ``permute_dims`` at the graph's entry and exit (and around an op that has
no NHWC form). It refuses nothing itself: what ``ConvertLayout`` cannot convert stays NCHW.

``FoldConstantTransforms`` computes ``permute_dims`` and ``reshape`` of constants with NumPy
before ``FoldConstant`` sees them: FoldConstant compiles and runs one TIR function per shape
(ResNet-18: 42 LLVM builds, 8 s), NumPy moves the bytes at once.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from . import compat

DESIRED_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "HWIO"]}


def ConvertLayoutNHWC() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    return tvm.transform.Sequential(
        [
            relax.transform.ConvertLayout(DESIRED_LAYOUTS),
            FoldConstantTransforms(),
            relax.transform.FoldConstant(),
            relax.transform.EliminateCommonSubexpr(),
            relax.transform.DeadCodeElimination(),
        ],
        name="tvm_fuse.ConvertLayoutNHWC",
    )


def FoldConstantTransforms() -> tvm.transform.Pass:  # pylint: disable=invalid-name
    """``permute_dims(C)`` and ``reshape(C, static shape)`` of a constant ``C``, computed."""

    def transform(func, mod, _ctx):
        if not isinstance(func, relax.Function):
            return func
        return _ConstantTransforms(mod).visit_expr(func)

    return relax.transform.function_pass(opt_level=0, name="tvm_fuse.FoldConstantTransforms")(
        transform
    )


def _folded(call):
    """The NumPy value of ``call`` when it is a layout op on a constant, else None."""
    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
        return None
    value = compat.constant_value(call.args[0]) if call.args else None
    if value is None:
        return None
    if call.op.name == "relax.permute_dims":
        axes = call.attrs.axes
        return np.transpose(value, None if axes is None else [int(a) for a in axes])
    if call.op.name == "relax.reshape":
        shape = compat.tensor_shape(call)
        return None if shape is None else value.reshape(shape)
    return None


@relax.expr_functor.mutator
class _ConstantTransforms(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        value = _folded(call)
        return call if value is None else compat.constant(value)
