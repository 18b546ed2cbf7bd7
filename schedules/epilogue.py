"""The fused kernel's epilogue as TE: bias, residual add and activation on the accumulator.

Shared by every implementation of the fused op, on both backends (Relay and Relax), so that the
generic fallback and the fast schedule compute exactly the same function. Each step is element-wise,
so a schedule can inline it into the store of the accumulator (it stays in registers).

Each activation is the very expression TOPI computes for the op it replaces, so NaN and ±Inf
come out as stock TVM gives them: ``relu`` is ``max(x, 0)`` (NaN -> 0), ``relu6`` is TOPI's
``clip``, ``max(min(x, 6), 0)`` (NaN -> 6), ``relu6_max_first`` the other order (NaN -> 0, as
Relax's import of ONNX ``Clip`` computes it), ``leaky_relu`` a select on
``x > 0`` (NaN stays NaN), ``sigmoid`` TE's intrinsic, ``silu`` Relay's ``x * sigmoid(x)``.
"""

from tvm import te, topi

from .te_utils import Select


def _activate(x, activation: str, alpha: float, dtype: str):
    # dtype is the accumulator's: an expression's own dtype is spelled differently in each stack
    if activation == "none":
        return x
    if activation == "relu":
        return te.max(x, te.const(0, dtype))
    if activation == "relu6":
        return te.max(te.min(x, te.const(6, dtype)), te.const(0, dtype))
    if activation == "relu6_max_first":
        return te.min(te.max(x, te.const(0, dtype)), te.const(6, dtype))
    if activation == "leaky_relu":
        return Select(x > te.const(0, dtype), x, x * te.const(alpha, dtype))
    if activation == "sigmoid":
        return te.sigmoid(x)
    if activation == "silu":
        return x * te.sigmoid(x)
    raise ValueError(f"tvm_fuse epilogue: unknown activation {activation!r}")


def apply_epilogue(acc, bias=None, residual=None, activation="none", alpha=0.0):
    """``activation(acc + bias[c] + residual)`` on an NHWC accumulator, as one compute stage.

    Returns ``acc`` itself when there is nothing to apply.
    """
    if bias is None and residual is None and activation == "none":
        return acc

    def element(n, h, w, c):
        x = acc[n, h, w, c]
        if bias is not None:
            x = x + bias[c]
        if residual is not None:
            x = x + residual[n, h, w, c]
        return _activate(x, activation, alpha, acc.dtype)

    return te.compute(acc.shape, element, name="epilogue", tag=topi.tag.ELEMWISE)
