"""ChooseAlgorithm: which fused convs run as Winograd F(m x m, 3x3), decided per conv.

Where it sits: after ``FuseConvBiasAct`` and before ``PackWeights`` in ``tvm_fuse.pipeline()``.
For each fused call on an HWIO weight whose spec says "direct" it asks the meeting point
``strategy.winograd_tile(spec, target, tiles)``: 3x3 convs of stride 1 or 2 and dilation 1 where the
fast path applies, and where the kernel half's cost model expects Winograd to be clearly faster
(enough channels, a map of more than a few tiles; at stride 2 the polyphase form, which saves
fewer multiplies from a weight as large, pays on larger maps than at stride 1). Those calls get
``algorithm="winograd"`` and ``winograd_tile=m`` in their spec; ``PackWeights`` then transforms
their weight at compile time.
``algorithm="direct"`` leaves every call direct. ``precision`` chooses the tiles the model may
pick: ``"default"`` F(2x2) and F(4x4), ``"high"`` F(2x2) only (its error is ~10x smaller).
A call already decided (a Winograd spec, or a weight packed already) is left as it is, so the
pass is idempotent. It refuses unknown ``algorithm`` / ``precision`` values with a UserError
(``tvm_fuse.algorithm_options``, shared with the Relax backend).
"""

from __future__ import annotations

import dataclasses

import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import CallPattern, DFPatternCallback, is_op

from .. import op as fused_op
from .. import strategy
from ..algorithm_options import PRECISIONS, check_options
from ..ir_utils import rewrite_functions
from ..target import target_or_current

def ChooseAlgorithm(  # pylint: disable=invalid-name  (pass style)
    target=None, algorithm: str = "auto", precision: str = "default"
) -> tvm.transform.Pass:
    """Set each fused conv's algorithm for ``target`` (see the module docstring)."""
    check_options(algorithm, precision)

    def transform(mod, _ctx):
        if algorithm == "direct":
            return mod
        chooser = _Chooser(target_or_current(target), PRECISIONS[precision])
        return rewrite_functions(mod, chooser.rewrite)

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.ChooseAlgorithm")


class _Chooser(DFPatternCallback):
    """Rewrites every fused call in one C++ walk (no Python recursion on deep graphs)."""

    def __init__(self, target, tiles):
        super().__init__(require_type=False, rewrite_once=True)
        self.pattern = CallPattern(is_op(fused_op.OP_NAME), None)
        self.target, self.tiles = target, tiles

    def callback(self, pre, post, node_map):
        spec = fused_op.spec_of_call(post)
        if spec.algorithm != "direct":
            return post
        m = strategy.winograd_tile(spec, self.target, self.tiles)
        if not m:
            return post
        chosen = dataclasses.replace(spec, algorithm="winograd", winograd_tile=m)
        return fused_op.fused_call(chosen, **fused_op.call_arguments(post))

