"""The plain, always-correct implementation of the fused op: TOPI's NHWC conv2d + the epilogue.

It is the fallback for every case the fast schedule does not cover (see ``tvm_fuse.strategy``):
any channel count, groups = 1, HWIO weights, any padding/stride/dilation. Its schedule is TOPI's
x86 NHWC one, which parallelizes the outer loops, vectorizes over channels and inlines the
element-wise epilogue into the conv's output loop.
"""

from tvm import topi

from .epilogue import apply_epilogue

NAME = "conv2d_nhwc_fused.generic"


def compute(spec, data, weight, bias, residual):
    """NHWC conv2d of ``spec`` with an HWIO ``weight``, followed by the epilogue."""
    acc = topi.nn.conv2d_nhwc(
        data, weight, spec.strides, spec.padding, spec.dilation, out_dtype=spec.out.dtype
    )
    return apply_epilogue(acc, bias, residual, spec.activation, spec.alpha)


def schedule(outs):
    return topi.x86.schedule_conv2d_nhwc(outs)
