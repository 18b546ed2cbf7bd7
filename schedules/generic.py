"""The plain, always-correct implementation of the fused op: TOPI's NHWC conv2d + the epilogue.

It is the fallback for every case the fast schedule does not cover (see ``tvm_fuse.strategy``):
any channel count, HWIO weights, any padding/stride/dilation. Its schedule is TOPI's x86 NHWC
one, which parallelizes the outer loops, vectorizes over channels and inlines the element-wise
epilogue into the conv's output loop. A depthwise conv (HWIO weight ``[Kh, Kw, 1, C]``) is TOPI's
NHWC depthwise conv on the same weight read as ``[Kh, Kw, C, 1]``, with TOPI's generic schedule,
as stock TVM builds it.
"""

from tvm import te, topi

from .epilogue import apply_epilogue
from .te_utils import tagged_stage

NAME = "conv2d_nhwc_fused.generic"


def compute(spec, data, weight, bias, residual):
    """NHWC conv2d of ``spec`` with an HWIO ``weight``, followed by the epilogue."""
    conv_args = (spec.strides, spec.padding, spec.dilation)
    if spec.depthwise:
        kh, kw, _, channels = weight.shape
        per_channel = te.compute(
            (kh, kw, channels, 1), lambda y, x, c, _: weight[y, x, 0, c], name="weight_hwoi"
        )
        acc = topi.nn.depthwise_conv2d_nhwc(
            data, per_channel, *conv_args, out_dtype=spec.out.dtype
        )
    else:
        acc = topi.nn.conv2d_nhwc(data, weight, *conv_args, out_dtype=spec.out.dtype)
    return apply_epilogue(acc, bias, residual, spec.activation, spec.alpha)


def schedule(outs):
    """TOPI's schedule of the conv under ``outs``: x86 NHWC, or generic NHWC depthwise."""
    out = outs if isinstance(outs, te.Tensor) else outs[0]
    if tagged_stage(out, "depthwise_conv2d_nhwc") is not None:
        return topi.generic.schedule_depthwise_conv2d_nhwc(outs)
    return topi.x86.schedule_conv2d_nhwc(outs)

