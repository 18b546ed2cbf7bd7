"""ReadNCHWInput: a fused conv reads the graph's NCHW input itself where its kernel wants that.

Where it sits: in ``tvm_fuse.pipeline()`` after ``PackWeights`` (what the kernel
wants depends on its packed weight). ``ConvertLayoutNHWC`` leaves one ``tvm_fuse.nchw_to_nhwc``
transpose at each NCHW graph input. An image (3 channels) usually enters a stem conv that pads
its input in a pass of its own anyway; that pass can read the NCHW image and transpose it as it
copies, and the transpose's separate pass over the image goes. The meeting point decides where
(``strategy.reads_nchw_data``; the rule and its measurement: ``schedules.tiling``); the call's
spec then says NCHW data (``KernelSpec.with_nchw_data``). A transpose with other users stays
for them. A call that reads NCHW already is left as it is, so the pass is idempotent.
"""

from __future__ import annotations

import tvm
from tvm.relay.dataflow_pattern import CallPattern, DFPatternCallback, is_op

from .. import boundary_ops, strategy
from .. import op as fused_op
from ..ir_utils import rewrite_functions


def ReadNCHWInput() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass style)
    """Let each fused call that wants it read its entry transpose's NCHW input (see above)."""

    def transform(mod, _ctx):
        return rewrite_functions(mod, _Reader().rewrite)

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.ReadNCHWInput")


class _Reader(DFPatternCallback):
    """Rewrites every fused call in one C++ walk (no Python recursion on deep graphs)."""

    def __init__(self):
        super().__init__(require_type=False, rewrite_once=True)
        self.pattern = CallPattern(is_op(fused_op.OP_NAME), None)

    def callback(self, pre, post, node_map):
        spec = fused_op.spec_of_call(post)
        args = fused_op.call_arguments(post)
        image = boundary_ops.entry_input(args["data"])
        if image is None or not strategy.reads_nchw_data(spec):
            return post
        args["data"] = image
        return fused_op.fused_call(spec.with_nchw_data(), **args)
