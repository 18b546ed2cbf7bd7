"""PackWeights: the pipeline packs the weights for the fast kernel itself, at every opt_level.

The way TVM users call passes: ``pipeline()(mod)`` then ``relay.build(mod, target, params=...)``
at ``opt_level`` 0 to 3, with the params bound before the pipeline or given to ``relay.build``
only. The model is ``conv2d -> bias_add -> relu`` (no BatchNorm: folding it needs its
parameters, which is another pass's job). Each build is checked on its artifact (the fused
kernel in the graph, which implementation the build compiled, the weight it stores) and on its
output against stock TVM.
"""

import json

import numpy as np
import pytest
import tvm
from tvm import autotvm, relay

import tvm_fuse
from tvm_fuse import examples, testing
from tvm_fuse.passes.pack import PackWeights
from tvm_fuse.api import pipeline
from tvm_fuse.schedules import conv2d_nhwc_fused as fast

TARGET = tvm_fuse.host_target()


def conv_bias_relu(cin=16, cout=20, size=14):
    """NCHW ``conv2d(3x3, pad 1) -> bias_add -> relu`` with seeded params (Co not a multiple
    of VL: the packed weight pads it)."""
    rng = np.random.default_rng(0)
    data = relay.var("data", shape=(1, cin, size, size))
    weight = relay.var("weight", shape=(cout, cin, 3, 3))
    bias = relay.var("bias", shape=(cout,))
    conv = relay.nn.conv2d(data, weight, padding=(1, 1), channels=cout, kernel_size=(3, 3))
    body = relay.nn.relu(relay.nn.bias_add(conv, bias))
    params = {
        "weight": rng.standard_normal((cout, cin, 3, 3)).astype("float32"),
        "bias": rng.standard_normal(cout).astype("float32"),
    }
    mod = tvm.IRModule.from_expr(relay.Function([data, weight, bias], body))
    return mod, {k: tvm.nd.array(v) for k, v in params.items()}


class Queries(autotvm.task.DispatchContext):
    """The AutoTVM workloads a build asks for (the fast kernel's template asks; the generic
    implementation has none), answering nothing."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def _query_inside(self, target, workload):
        self.names.add(workload[0])

    def update(self, target, workload, cfg):
        pass


def build_as_users_do(mod, params, opt_level, bind):
    with tvm.transform.PassContext(opt_level=opt_level):
        if bind:
            mod = tvm.IRModule.from_expr(
                relay.build_module.bind_params_by_name(mod["main"], params)
            )
        optimized = pipeline()(mod)
        with Queries() as queries:
            lib = relay.build(optimized, TARGET, params=None if bind else params)
    return lib, queries.names


@pytest.fixture(scope="module")
def stock():
    """The model's inputs and stock TVM's outputs for them."""
    mod, params = conv_bias_relu()
    inputs = examples.random_inputs(mod, params)
    return inputs, testing.run(testing.build_stock(mod, params, TARGET), inputs)


@pytest.mark.parametrize("bind", [True, False], ids=["bound", "params-to-relay.build"])
@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_pipeline_then_relay_build_runs_the_fast_kernel(opt_level, bind, stock):
    mod, params = conv_bias_relu()
    lib, queried = build_as_users_do(mod, params, opt_level, bind)
    kernels = [
        node["attrs"]["func_name"]
        for node in json.loads(lib.get_graph_json())["nodes"]
        if node["op"] == "tvm_op"
    ]
    assert any("tvm_fuse_conv2d_nhwc_fused" in name for name in kernels)
    assert fast.NAME in queried  # the fast implementation was compiled
    folded = bind or opt_level >= 2  # relay.build folds bound params from opt_level 2
    assert any(len(p.shape) == 5 for p in lib.get_params().values()) == folded
    assert "tvmgen_default_fused_tvm_fuse_nchw_to_nhwc" in kernels  # the input's transpose
    transforms = sum("layout_transform" in name for name in kernels)
    assert (transforms == 0) == folded  # the params' transforms run with the model unless folded
    inputs, want = stock
    testing.assert_close(testing.run(lib, inputs), want, rtol=1e-4)


def test_pack_weights_is_idempotent_and_keeps_the_real_channel_count():
    mod, params = conv_bias_relu()
    once = tvm_fuse.optimize(mod, params, TARGET)
    (spec,) = tvm_fuse.describe(once)
    assert spec.lanes is not None and spec.out_channels == 20
    tvm.ir.assert_structural_equal(PackWeights(TARGET)(once), once)


def test_target_in_scope_is_the_default():
    mod, params = conv_bias_relu()
    avx512 = tvm.target.Target("llvm -mcpu=skylake-avx512")
    with avx512:
        (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert spec.weight.layout == "OHWI16o"
