"""RaiseMinMax (Relax): ONNX ``Clip`` as Relax's importer emits it, turned back into Relax ops.

``relax.frontend.onnx`` imports ``Clip`` already legalized: ``call_tir`` of a PrimFunc computing
``max(x, lo)``, then one computing ``min(., hi)`` (opset 11+: each bound a 0-d constant argument
once ``FoldConstant`` ran; opset 6: the bound inlined in the PrimFunc). ``ConvertLayout`` cannot
see through a ``call_tir`` (it transposes back to NCHW before it) and ``FuseConvBiasAct`` cannot
match it, so such a call becomes ``R.maximum(x, lo)`` / ``R.minimum(x, hi)`` again. A call is
raised only when its PrimFunc is, structurally, what TOPI's ``maximum``/``minimum`` gives for it
(same operand order, same dtype, no broadcast of ``x``): the raised op legalizes to the same
expression, so NaN and +-Inf come out as before (``min(max(NaN, 0), 6)`` is 0, not clip's 6).
Every other ``call_tir`` is left as it is.

ClipAsMinMax (Relax): ``R.clip(x, lo, hi)`` of a float tensor (``R.nn.relu6`` included) becomes
``R.maximum(R.minimum(x, hi), lo)``, the expression ``clip`` legalizes to (TOPI's ``clip``:
``max(min(x, hi), lo)``, NaN -> hi), so every value, NaN and +-Inf included, stays the same.
``ConvertLayout`` has no layout rule for ``clip``: left as it is, each clip after an NHWC conv
got a transpose back to NCHW before it (and the ops after it stayed NCHW), and
``FuseConvBiasAct`` never saw a relu6 after the conv; ``minimum``/``maximum`` carry NHWC through,
and the fusion takes that pair as ``relu6``.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te, topi

from . import compat

_OPS = {"maximum": (topi.maximum, relax.op.maximum), "minimum": (topi.minimum, relax.op.minimum)}


def RaiseMinMax() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    """The pass: every ``call_tir`` of an element-wise max/min with a scalar, as the Relax op."""

    def transform(func, mod, _ctx):
        if not isinstance(func, relax.Function):
            return func
        return _Raiser(mod).visit_expr(func)

    return relax.transform.function_pass(opt_level=0, name="tvm_fuse.RaiseMinMax")(transform)


def ClipAsMinMax() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    """The pass: every ``R.clip`` of a float tensor as ``R.maximum(R.minimum(x, hi), lo)``."""

    def transform(func, _mod, _ctx):
        if not isinstance(func, relax.Function):
            return func
        return _ClipSplitter().visit_expr(func)

    return relax.transform.function_pass(opt_level=0, name="tvm_fuse.ClipAsMinMax")(transform)


def as_min_max(call):
    """``R.maximum(R.minimum(x, hi), lo)`` for ``call`` = ``R.clip(x, lo, hi)`` of a float
    tensor, else None."""
    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
        return None
    dtype = _dtype(call.args[0]) if call.op.name == "relax.clip" else None
    if dtype is None or not dtype.startswith("float"):
        return None
    low, high = (relax.const(compat.prim_value(bound), dtype) for bound in call.args[1:])
    return relax.op.maximum(relax.op.minimum(call.args[0], high), low)


def raised(mod, call):
    """``R.maximum(x, bound)`` or ``R.minimum(x, bound)`` computing what ``call`` computes, or
    None when ``call`` is not a ``call_tir`` of such an element-wise PrimFunc."""
    if not _is_call_tir(call) or len(call.args) != 2:
        return None
    args = list(call.args[1].fields) if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
    func = mod[call.args[0]] if isinstance(call.args[0], tvm.ir.GlobalVar) else None
    if not isinstance(func, compat.PrimFunc) or not args or len(args) > 2:
        return None
    shape, dtype = compat.tensor_shape(args[0]), _dtype(args[0])
    if shape is None or shape != compat.tensor_shape(call) or dtype != _dtype(call):
        return None
    bound = _bound(func, args)
    if bound is None:
        return None
    for te_op, relax_op in _OPS.values():
        if _same_computation(func, te_op, shape, dtype, bound, len(args)):
            return relax_op(args[0], relax.const(float(bound), dtype))
    return None


def _dtype(expr):
    try:
        return compat.tensor_dtype(expr)
    except AttributeError:  # not a tensor
        return None


def _bound(func, args):
    """The scalar bound: the 0-d constant argument, or the float inlined in the PrimFunc."""
    if len(args) == 2:
        value = compat.constant_value(args[1])
        return value if value is not None and value.shape == () else None
    store = _single_store(func)
    inlined = getattr(store, "value", None)
    inlined = getattr(inlined, "b", None)
    if not isinstance(inlined, tvm.tirx.FloatImm):
        return None
    return np.asarray(inlined.value)


def _single_store(func):
    """The BufferStore of a PrimFunc that is one loop nest around one block, or None."""
    stmt = func.body
    while stmt is not None and not isinstance(stmt, tvm.tirx.BufferStore):
        stmt = getattr(stmt, "block", None) or getattr(stmt, "body", None)
    return stmt


def _same_computation(func, te_op, shape, dtype, bound, arity) -> bool:
    """Whether ``func`` is TOPI's ``te_op(x, bound)`` on ``shape``/``dtype`` (names aside)."""
    dims = [tvm.tirx.IntImm("int64", d) for d in shape]
    x = te.placeholder(dims, dtype, name="x")
    if arity == 2:
        b = te.placeholder((), dtype, name="b")
        ref = te.create_prim_func([x, b, te_op(x, b)])
    else:
        ref = te.create_prim_func([x, te_op(x, tvm.tirx.const(float(bound), dtype))])
    return len(ref.params) == len(func.params) and tvm_ffi.structural_equal(
        ref.body, func.body, map_free_vars=True
    )


def _is_call_tir(call) -> bool:
    return (
        isinstance(call, relax.Call)
        and isinstance(call.op, tvm.ir.Op)
        and call.op.name == "relax.call_tir"
    )


@relax.expr_functor.mutator
class _Raiser(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.mod_ = mod

    def visit_call_(self, call):
        call = super().visit_call_(call)
        op = raised(self.mod_, call)
        return call if op is None else op


@relax.expr_functor.mutator
class _ClipSplitter(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        split = as_min_max(call)
        return call if split is None else split
