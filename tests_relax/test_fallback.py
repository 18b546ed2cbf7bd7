"""ScheduleFallback: the stock ops left after fusion get a parallel schedule, and stay right."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fuse.relax as tfr
from helpers import conv_nchw, module, run, tensor_var
from reference import assert_close, conv2d_nchw
from tvm_fuse.relax import compat, kernel
from tvm_fuse.relax.fallback import ScheduleFallback


def _grouped_reference(x, w, groups):
    cin_g, cout_g = x.shape[1] // groups, w.shape[0] // groups
    parts = [
        conv2d_nchw(
            x[:, g * cin_g : (g + 1) * cin_g], w[g * cout_g : (g + 1) * cout_g], padding=(1,) * 4
        )
        for g in range(groups)
    ]
    return np.concatenate(parts, axis=1)


@pytest.mark.parametrize("groups", [1, 4, 16], ids=["dense_nchw_fused", "grouped", "depthwise"])
def test_refused_and_fused_convs_build_right(groups, rng, target):
    x = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    w = rng.uniform(-0.5, 0.5, (16, 16 // groups, 3, 3)).astype("float32")

    def body(bb, data):
        y = bb.emit(conv_nchw(data, w, groups=groups))
        return relax.op.nn.max_pool2d(bb.emit(relax.op.nn.relu(y)), 2, 2)

    mod = module([tensor_var("data", x.shape)], body)
    # a depthwise conv (groups == C) is fused for the depthwise kernel; other groups are not
    assert len(tfr.describe(tfr.optimize(mod, target=target))) == (0 if groups == 4 else 1)
    ref = (
        np.maximum(_grouped_reference(x, w, groups), 0).reshape(1, 16, 6, 2, 6, 2).max(axis=(3, 5))
    )
    assert_close(run(tfr.build(mod, target=target), x), ref, rel=1e-5)


def test_stock_conv_gets_a_parallel_vectorized_schedule_and_the_input_stays(rng, target):
    w = rng.standard_normal((16, 4, 3, 3)).astype("float32")
    mod = module([tensor_var("data", (1, 16, 12, 12))], lambda bb, d: conv_nchw(d, w, groups=4))
    legalized = relax.transform.LegalizeOps()(mod)
    before = legalized.script()
    with target:
        scheduled = ScheduleFallback()(legalized)
    assert legalized.script() == before
    (conv,) = [f for _, f in scheduled.functions_items() if isinstance(f, compat.PrimFunc)]
    text = conv.script()
    assert "T.parallel" in text and "T.vectorized" in text


def test_tvm_fuse_kernels_are_left_as_they_are(target):
    x = tensor_var("data", (1, 10, 10, 8))
    w = np.ones((3, 3, 8, 16), "float32")

    def body(bb, data):
        conv = relax.op.nn.conv2d(
            data, relax.const(w), padding=1, data_layout="NHWC", kernel_layout="HWIO"
        )
        return relax.op.nn.relu(bb.emit(conv))

    optimized = relax.transform.LegalizeOps()(tfr.optimize(module([x], body), target=target))
    scheduled = ScheduleFallback()(optimized)
    for gv, func in optimized.functions_items():
        if kernel.spec_of(func) is not None:
            tvm.ir.assert_structural_equal(scheduled[gv], func)
