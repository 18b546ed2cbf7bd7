"""FlattenChannelBias: a conv's per-channel addend that is not a constant, given as a [C] tensor.

Where it sits: in ``tvm_fuse.pipeline()`` after ``ConvertLayoutNHWC`` and ``FoldConstant``,
before ``FuseConvBiasAct``. With params bound, the layout pass leaves a conv bias as an
``add(%conv, <constant [1, 1, 1, C]>)``, which the fusion pass takes as the fused op's [C] bias.
With params still unbound (``relay.build(mod, params=...)`` binds them later), the addend is an
expression of function parameters, e.g. ``layout_transform(expand_dims(%bias))`` or the bias
``FoldBatchNorm`` computes from the BN statistics, that ``FoldConstant`` cannot fold yet. This
pass rewrites::

    add(%conv, %e)        /* %conv: nn.conv2d with NHWC output [N, H, W, C];
                             %e: not a constant, of shape [1, 1, 1, C] (or [1, 1, C], [1, C]) */
    =>  add(%conv, reshape(%e, newshape=[C]))

which adds the same value to the same elements (broadcasting over N, H, W either way), so that
the fusion pass sees a [C] bias and the bias enters the fused kernel's epilogue.
``relay.build``'s FoldConstant turns the reshape into a constant once it binds the params.

It leaves alone: constants (already handled by the fusion pass), addends of any other shape
(e.g. a residual), convs whose output is not NHWC.
"""

from __future__ import annotations

import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import DFPatternCallback, is_op, rewrite, wildcard


class _FlattenCallback(DFPatternCallback):
    def __init__(self):
        super().__init__(require_type=True)
        self.conv, self.addend = is_op("nn.conv2d")(wildcard(), wildcard()), wildcard()
        self.pattern = is_op("add")(self.conv, self.addend)

    def callback(self, pre, post, node_map):
        conv, addend = node_map[self.conv][0], node_map[self.addend][0]
        channels = _channel_addend(conv, addend)
        if channels is None:
            return post
        return relay.add(conv, relay.reshape(addend, [channels]))


def _channel_addend(conv, addend):
    """C if ``addend`` is a non-constant [.., 1, C] addend of the NHWC ``conv``, else None."""
    out_layout = conv.attrs.out_layout or conv.attrs.data_layout
    if out_layout != "NHWC" or isinstance(addend, relay.Constant):
        return None
    out_type, addend_type = conv.checked_type, addend.checked_type
    if not isinstance(addend_type, relay.TensorType) or addend_type.dtype != out_type.dtype:
        return None
    shape = [int(d) if isinstance(d, tvm.tir.IntImm) else -1 for d in addend_type.shape]
    channels = out_type.shape[3]
    if not isinstance(channels, tvm.tir.IntImm) or not 2 <= len(shape) <= 4:
        return None
    channels = int(channels)
    return channels if shape == [1] * (len(shape) - 1) + [channels] else None


@relay.transform.function_pass(opt_level=0, name="tvm_fuse.FlattenChannelBias")
class _FlattenChannelBias:
    def transform_function(self, func, _mod, _ctx):
        return rewrite(_FlattenCallback(), func)


def FlattenChannelBias() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass factory)
    """Give every non-constant per-channel addend of an NHWC conv as a [C] tensor."""
    return _FlattenChannelBias()
