"""PackWeights: every fused call's weight in the layout its kernel wants, computed in the graph.

Where it sits: after ``FuseConvBiasAct`` in ``tvm_fuse.pipeline()``. For each fused call it asks
the meeting point ``strategy.preferred_spec(spec, target)`` which weight the kernel half wants
(``OHWI{VL}o`` for the direct fast kernel on x86, ``OHW{VL}o`` for the depthwise one; the spec
unchanged for the generic fallback)
and replaces the HWIO weight argument by that weight. A constant weight is packed in NumPy
(``packing.pack_hwio``, ``winograd_weights.transform_hwio``; FoldConstant would compile every
transform with LLVM, about half a second a weight). A weight that is still a free variable
(params given to ``relay.build`` only) becomes Relay ops computing the packed weight from it (a
zero pad of Co up to whole vectors and a ``layout_transform``, a depthwise weight's reshape and
transpose, or Winograd's ``G g G^T``), which
stay in the graph until ``relay.build`` binds the params and folds them (at its opt_level 2 and
up; below that they run with the model). Either way no ``opt_level`` can skip the packing.

A depthwise call's constant weight is also checked for NaN and Inf: the spec records a finite one
(``KernelSpec.finite_weight``), which lets the depthwise kernel read its padded input in place at
stride 1 too (``schedules.depthwise``). Only the depthwise kernel reads the fact, so only its specs
carry it; a weight that is still a variable is not known finite.

The target is the one given, else ``tvm.target.Target.current()`` when the pass runs, else the
host (``tvm_fuse.host_target()``). A call whose weight is already in the wanted layout is left
as it is, so the pass is idempotent. It refuses nothing: calls the kernel half does not want
packed keep their HWIO weight.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import CallPattern, DFPatternCallback, is_op

from .. import op as fused_op
from .. import strategy
from ..ir_utils import rewrite_functions
from ..schedules import packing, winograd_weights
from ..spec import KernelSpec
from ..target import target_or_current


def PackWeights(target=None) -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass style)
    """Pack every fused call's weight for ``target`` (see the module docstring)."""

    def transform(mod, _ctx):
        packer = _Packer(target_or_current(target))
        return relay.transform.FoldConstant()(rewrite_functions(mod, packer.rewrite))

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.PackWeights")


def packed_weight_expr(weight: relay.Expr, spec: KernelSpec, wanted: KernelSpec) -> relay.Expr:
    """``wanted.weight`` from the HWIO ``weight`` of ``spec``: a constant computed in NumPy for a
    constant weight, else Relay ops computing it."""
    if isinstance(weight, relay.Constant):
        return relay.const(_packed_array(weight.data.numpy(), wanted))
    if wanted.algorithm == "winograd":
        return strategy.winograd_weight_expr(weight, spec, wanted)
    if wanted.depthwise:
        kh, kw = spec.kernel_size
        blocked = relay.reshape(weight, (kh, kw, wanted.weight.shape[0], wanted.lanes))
        return relay.transpose(blocked, (2, 0, 1, 3))
    padded = wanted.lanes * wanted.weight.shape[wanted.weight.layout.index("O")]
    extra = padded - spec.out_channels
    if extra:
        weight = relay.nn.pad(weight, ((0, 0), (0, 0), (0, 0), (0, extra)))
    return relay.layout_transform(weight, "HWIO", wanted.weight.layout)


def _packed_array(weight: np.ndarray, wanted: KernelSpec) -> np.ndarray:
    """The NumPy forms of the same transforms (the tests check them against the Relay ops)."""
    if wanted.algorithm == "winograd":
        return winograd_weights.transform_hwio(
            weight, wanted.winograd_tile, wanted.lanes, wanted.strides[0]
        )
    if wanted.depthwise:
        return packing.pack_depthwise_hwio(weight, wanted.lanes)
    return packing.pack_hwio(weight, wanted.lanes)


class _Packer(DFPatternCallback):
    """Rewrites every fused call in one C++ walk (no Python recursion on deep graphs)."""

    def __init__(self, target):
        super().__init__(require_type=False, rewrite_once=True)
        self.pattern = CallPattern(is_op(fused_op.OP_NAME), None)
        self.target = target

    def callback(self, pre, post, node_map):
        rebuilt = post
        spec = fused_op.spec_of_call(rebuilt)
        wanted = strategy.preferred_spec(spec, self.target)
        if wanted.weight == spec.weight:
            return rebuilt
        args = fused_op.call_arguments(rebuilt)
        if isinstance(args["weight"], relay.Constant):
            wanted = packing.with_finite_weight(wanted, args["weight"].data.numpy())
        args["weight"] = packed_weight_expr(args["weight"], spec, wanted)
        return fused_op.fused_call(wanted, **args)

