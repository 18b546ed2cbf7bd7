"""The fused kernel's epilogue as TE: bias, residual add and activation on the accumulator.

Shared by every implementation of the fused op, so that the generic fallback and the fast
schedule compute exactly the same function. Each step is element-wise, so a schedule can inline
it into the store of the accumulator (it stays in registers).
"""

from tvm import te, tir, topi


def _activate(x, activation: str, alpha: float):
    if activation == "none":
        return x
    if activation == "relu":
        return te.max(x, te.const(0, x.dtype))
    if activation == "relu6":
        return te.min(te.max(x, te.const(0, x.dtype)), te.const(6, x.dtype))
    if activation == "leaky_relu":
        return tir.Select(x > te.const(0, x.dtype), x, x * te.const(alpha, x.dtype))
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
        return _activate(x, activation, alpha)

    return te.compute(acc.shape, element, name="epilogue", tag=topi.tag.ELEMWISE)
