"""The meeting point: the TOPI op strategy of ``tvm_fuse.conv2d_nhwc_fused``.

This is the only module that imports both halves. The graph half hands down a fused call (its
attributes are the task description); the strategy picks the kernel that implements it. Every
target gets the generic implementation (``schedules.generic``), which is always correct.
"""

from tvm import relay
from tvm.target import override_native_generic_func

from .op import OP_NAME, read_attrs
from .schedules import generic


def _split_inputs(inputs, attrs):
    """(data, weight, bias or None, residual or None) from the call's tensor inputs."""
    data, weight, *extra = inputs
    extra = iter(extra)
    bias = next(extra) if attrs["has_bias"] else None
    residual = next(extra) if attrs["has_residual"] else None
    return data, weight, bias, residual


def wrap_compute(topi_compute):
    """Adapt a ``schedules`` compute to the strategy's ``(attrs, inputs, out_type)`` calling."""

    def _compute(attrs, inputs, out_type):
        params = read_attrs(attrs)
        data, weight, bias, residual = _split_inputs(inputs, params)
        out = topi_compute(
            data,
            weight,
            bias,
            residual,
            strides=params["strides"],
            padding=params["padding"],
            dilation=params["dilation"],
            out_dtype=params["out_dtype"],
            activation=params["activation"],
            alpha=params["alpha"],
        )
        return [out]

    return _compute


def wrap_schedule(topi_schedule):
    def _schedule(attrs, outs, target):
        with target:
            return topi_schedule(outs)

    return _schedule


@override_native_generic_func("tvm_fuse_conv2d_nhwc_fused_strategy")
def fused_conv2d_strategy(attrs, inputs, out_type, target):
    """Every target: the generic NHWC implementation."""
    strategy = relay.op.OpStrategy()
    strategy.add_implementation(
        wrap_compute(generic.compute), wrap_schedule(generic.schedule), name=generic.NAME
    )
    return strategy


relay.op.op.register_strategy(OP_NAME, fused_conv2d_strategy)
