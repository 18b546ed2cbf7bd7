"""ConvertLayoutNHWC: the whole graph in NHWC, the weights re-laid at compile time.

Where it sits: second pass of ``tvm_fuse.pipeline()``, after ``FoldBatchNorm`` (BN is already a
bias then) and before ``FuseConvBiasAct`` (which matches NHWC/HWIO convs). It runs TVM's own
passes, called directly so that a caller's ``opt_level`` below 3 cannot skip them silently:

1. ``CanonicalizeOps``: ``nn.bias_add`` becomes ``expand_dims`` + ``add``. ``bias_add`` has no
   layout inference of its own and would otherwise send the conv output back to NCHW; after step 3
   the bias is ``add(%conv, <constant [1, 1, 1, Co]>)``.
2. ``ConvertLayout``: every ``nn.conv2d`` to ``data_layout="NHWC"`` with TVM's default kernel layout
   for it: ``HWIO`` (groups 1 and grouped convs), ``HWOI`` (depthwise: groups == Ci == Co). The stock
   x86 strategy builds all three correctly (``conv2d_nhwc``, ``group_conv2d_nhwc.generic``,
   ``depthwise_conv2d_nhwc.generic``), so no conv is kept NCHW. The 2-D pools with a layout
   converter (max, avg, global max, global avg) are listed too, so a pool before the first conv is
   NHWC as well; the other ops (activations, add, multiply, concatenate, pad, batch_norm, adaptive
   pools, ...) follow their input's layout by TVM's layout inference.
3. The ``layout_transform`` of each constant weight (a pure axis permutation, OIHW -> HWIO) is
   computed now in NumPy, and ``FoldConstant`` computes the rest (the biases' ``expand_dims``):
   FoldConstant would compile every weight's transpose with LLVM, seconds on ResNet-18.
4. Each ``layout_transform`` of an activation left between NCHW and NHWC (entering or leaving
   the NHWC region) becomes ``tvm_fuse.nchw_to_nhwc`` or ``tvm_fuse.nhwc_to_nchw``
   (``tvm_fuse.boundary_ops``): the same transpose with a cache-blocked kernel instead of TVM's
   injective one, which gathers every output vector from as many cache lines.

What it leaves: one layout transform per graph input and output (``count_layout_transforms``
counts both ops), the entry one just before
the first conv or pool (ops before it, e.g. a BatchNorm of the raw input, stay NCHW); one back to
NCHW before an op that leaves spatial layout (``batch_flatten``, ``reshape`` before ``dense``), as
correctness needs; the ``layout_transform`` of weights that are free variables (unbound params):
they cannot be folded, so it runs with the model unless ``relay.build(mod, params=...)`` binds
and folds them. Not converted: conv1d/conv3d/conv2d_transpose, and functions for external
codegens (TVM's function passes skip those). A function whose convs and pools are already as
this pass makes them is returned as it was, untouched (bias_add included), so the pass is
idempotent; so is a function with a conv or pool in a blocked layout (``NCHW4c``): it was laid
out already, and TVM's layout inference cannot take every op out of a blocked layout.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay
from tvm.relay import dataflow_pattern
from tvm.relay.op.strategy.generic import is_depthwise_conv2d

from .. import boundary_ops
from ..ir_utils import count_ops, relay_functions, rewrite_functions

_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d")

DESIRED_LAYOUTS = {"nn.conv2d": ["NHWC", "default"], **{pool: ["NHWC"] for pool in _POOLS}}


def ConvertLayoutNHWC() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass factory)
    """Convert every Relay function of the module to NHWC (see the module docstring).

    Returns
    -------
    pass : tvm.transform.Pass
        A module pass named ``tvm_fuse.ConvertLayoutNHWC``, enabled at every ``opt_level``.
    """
    return tvm.transform.module_pass(
        _convert_module, opt_level=0, name="tvm_fuse.ConvertLayoutNHWC"
    )


def count_layout_transforms(mod) -> int:
    """Number of layout transforms of activations and weights in all Relay functions of ``mod``
    (or in one expr): ``layout_transform`` calls plus the boundary transposes of
    ``tvm_fuse.boundary_ops``."""
    counts = count_ops(mod)
    return sum(counts[name] for name in boundary_ops.LAYOUT_TRANSFORM_OPS)


def _convert_module(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    mod = relay.transform.InferType()(mod)
    functions = relay_functions(mod)
    done = {gv: func for gv, func in functions.items() if _left_as_is(func)}
    if len(done) == len(functions):
        return mod
    for stock_pass in (
        relay.transform.CanonicalizeOps(),
        relay.transform.ConvertLayout(DESIRED_LAYOUTS),
        lambda m: rewrite_functions(m, _TransposedConstants().rewrite),
        relay.transform.FoldConstant(),
    ):
        mod = stock_pass(mod)
    mod = _BoundaryTransposes()(relay.transform.InferType()(mod))
    mod = mod.clone()
    for gv, func in done.items():
        mod[gv] = func
    return relay.transform.InferType()(mod)


class _TransposedConstants(dataflow_pattern.DFPatternCallback):
    """``layout_transform`` of a constant that only permutes axes -> the transposed constant."""

    def __init__(self):
        super().__init__(require_type=False, rewrite_once=True)
        self.pattern = dataflow_pattern.is_op("layout_transform")(dataflow_pattern.is_constant())

    def callback(self, pre, post, node_map):
        src, dst = str(post.attrs.src_layout), str(post.attrs.dst_layout)
        if not (_is_primal(src) and sorted(src) == sorted(dst)):
            return post  # a blocked layout (e.g. NCHW8c): FoldConstant computes it
        data = post.args[0].data.numpy()
        return relay.const(np.ascontiguousarray(data.transpose([src.index(a) for a in dst])))

    def rewrite(self, func):
        return dataflow_pattern.rewrite(self, func)


def _left_as_is(func: relay.Function) -> bool:
    """Whether every conv and pool of ``func`` is already as this pass would make it, or one of
    them is in a blocked layout (``NCHW4c``, ...): such a function was laid out already, and
    TVM's layout inference cannot take every op out of a blocked layout (a BatchNorm after an
    NCHW4c conv fails to type-check), so it is built as it is."""
    calls = []
    relay.analysis.post_order_visit(
        func, lambda node: calls.append(node) if isinstance(node, relay.Call) else None
    )
    return any(map(_is_blocked, calls)) or all(map(_call_is_nhwc, calls))


def _is_primal(layout: str) -> bool:
    """A layout of whole dimensions only (``NCHW``, ``OIHW``), none split (``NCHW4c``)."""
    return layout.isalpha() and layout.isupper()


def _is_blocked(call: relay.Call) -> bool:
    """A conv or pool whose data layout has a sub-dimension (``NCHW4c``)."""
    name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
    if name == "nn.conv2d":
        return not _is_primal(str(call.attrs.data_layout))
    if name in _POOLS:
        return not _is_primal(str(call.attrs.layout))
    return False


def _call_is_nhwc(call: relay.Call) -> bool:
    name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
    if name == "nn.conv2d":
        attrs = call.attrs
        return attrs.data_layout == "NHWC" and attrs.kernel_layout == _nhwc_kernel_layout(call)
    if name in _POOLS:
        return call.attrs.layout == "NHWC"
    return True


def _nhwc_kernel_layout(conv: relay.Call) -> str:
    """The kernel layout ``ConvertLayout`` gives an NHWC conv: ``HWOI`` if depthwise, else ``HWIO``."""
    data, weight = (arg.checked_type for arg in conv.args)
    attrs = conv.attrs
    depthwise = is_depthwise_conv2d(
        data.shape, attrs.data_layout, weight.shape, attrs.kernel_layout, attrs.groups
    )
    return "HWOI" if depthwise else "HWIO"


@relay.transform.function_pass(opt_level=0, name="tvm_fuse.BoundaryTransposes")
class _BoundaryTransposes:
    """Step 4: ``layout_transform`` of activations NCHW -> NHWC -> ``tvm_fuse.nchw_to_nhwc``,
    NHWC -> NCHW -> ``tvm_fuse.nhwc_to_nchw``."""

    def transform_function(self, func, _mod, _ctx):
        return dataflow_pattern.rewrite(_BoundaryTransposeCallback(), func)


class _BoundaryTransposeCallback(dataflow_pattern.DFPatternCallback):
    def __init__(self):
        super().__init__(require_type=True)
        self.data = dataflow_pattern.wildcard()
        self.pattern = dataflow_pattern.is_op("layout_transform")(self.data)

    def callback(self, pre, post, node_map):
        name = boundary_ops.boundary_op(pre)
        if name is None:
            return post
        return boundary_ops.transpose(name, node_map[self.data][0])
