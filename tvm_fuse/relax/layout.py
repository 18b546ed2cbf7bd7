"""ConvertLayoutNHWC (Relax): the whole graph in NHWC, transposes only at its boundaries.

Runs after ``FoldBatchNorm``. Relax's ``ConvertLayout`` makes every ``conv2d`` take NHWC data and
an HWIO weight and carries NHWC through the layout-agnostic ops after it (element-wise ops,
pooling, reductions); ``FoldConstant`` then computes the transposed constant weights at compile
time and ``EliminateCommonSubexpr`` merges the entry transposes of an input that feeds several
convs. What is left are ``permute_dims`` at the graph's entry and exit (and around an op that has
no NHWC form). It refuses nothing itself: what ``ConvertLayout`` cannot convert stays NCHW.
"""

from __future__ import annotations

import tvm
from tvm import relax

DESIRED_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "HWIO"]}


def ConvertLayoutNHWC() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    return tvm.transform.Sequential(
        [
            relax.transform.ConvertLayout(DESIRED_LAYOUTS),
            relax.transform.FoldConstant(),
            relax.transform.EliminateCommonSubexpr(),
            relax.transform.DeadCodeElimination(),
        ],
        name="tvm_fuse.ConvertLayoutNHWC",
    )
