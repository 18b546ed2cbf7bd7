"""UnpackBatchNorm: a BatchNorm left unfolded, with constant statistics, as ``x * scale + shift``.

Pipeline position: the last pass. ``FoldBatchNorm`` folds a BN into the conv before it; one
that follows something else (a pre-activation ResNet's BN after the residual add, a BN on the
input image) is left to ``relay.build``, whose ``SimplifyInference`` unpacks it into Relay ops on
the statistics and whose ``FoldConstant`` then compiles and runs each of those small constant
expressions with LLVM: about 0.6 s per BN, a quarter of a ResNet-18 (v2) build. Here ``scale``
and ``shift`` are computed in NumPy instead, in the BN's float32 and in the order
``SimplifyInference`` writes them (``scale = 1 / sqrt(var + eps) * gamma``, ``shift = -mean *
scale + beta``), so the graph computes what stock's unpacked BN computes, NaN and Inf included
(``var + eps <= 0`` gives the same NaN or Inf scale).

Only ``TupleGetItem(batch_norm(x, ...), 0)`` of a float32 BN whose four statistics are constants
and whose other outputs nobody reads; anything else stays for ``relay.build``.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import DFPatternCallback, is_constant, is_op, is_tuple_get_item
from tvm.relay.dataflow_pattern import wildcard

from ..ir_utils import rewrite_functions, use_counts


def scale_and_shift(gamma, beta, mean, var, eps, scale=True, center=True):
    """The unpacked BN's per-channel ``scale`` and ``shift`` in float32, in stock's order."""
    one, eps = np.float32(1.0), np.float32(eps)
    with np.errstate(all="ignore"):  # NaN and Inf come out as stock computes them
        factor = one / np.sqrt(var + eps)
        if scale:
            factor = factor * gamma
        shift = -mean * factor
        if center:
            shift = shift + beta
    return factor, shift


class _UnpackCallback(DFPatternCallback):
    def __init__(self, counts):
        super().__init__(require_type=False, rewrite_once=True)
        self.counts = counts
        self.data = wildcard()
        self.stats = tuple(is_constant() for _ in range(4))
        self.pattern = is_tuple_get_item(is_op("nn.batch_norm")(self.data, *self.stats), 0)

    def callback(self, pre, post, node_map):
        bn = pre.tuple_value
        if self.counts[bn] != 1 or bn.args[0].checked_type.dtype != "float32":
            return post
        stats = [node_map[s][0].data.numpy() for s in self.stats]
        if any(s.dtype != np.float32 or s.ndim != 1 for s in stats):
            return post
        attrs = bn.attrs
        factor, shift = scale_and_shift(
            *stats, attrs.epsilon, scale=bool(attrs.scale), center=bool(attrs.center)
        )
        ndim = len(bn.args[0].checked_type.shape)
        axis = int(attrs.axis) % ndim
        shape = (factor.shape[0],) + (1,) * (ndim - 1 - axis)
        data = node_map[self.data][0]
        scaled = relay.multiply(data, relay.const(factor.reshape(shape)))
        return relay.add(scaled, relay.const(shift.reshape(shape)))


def UnpackBatchNorm() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM pass factory)
    """Unpack each unfolded BatchNorm with constant statistics in every Relay function."""

    def transform(mod, _ctx):
        return rewrite_functions(mod, lambda func: _UnpackCallback(use_counts(func)).rewrite(func))

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.UnpackBatchNorm")
