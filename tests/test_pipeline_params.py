"""``tvm_fuse.pipeline()`` used the TVM way: params bound by the pipeline or by ``relay.build``.

Either way, at every opt_level (ResNet-18 at the default one), the built graph runs
the fused kernel with its whole epilogue (the BN's bias and the activation inside it): the kernels
on the data's path are exactly those of ``tvm_fuse.build`` (which binds first), and the output is
stock TVM's unoptimized build's.
"""

import json
import re
import warnings

import numpy as np
import pytest
import tvm
from tvm import relay

import tvm_fuse
from tvm_fuse import examples, models, strategy, testing
from tvm_fuse.errors import UserError
from tvm_fuse.ir_utils import count_ops

RTOL = 1e-5
FUSED = "tvm_fuse_conv2d_nhwc_fused"
BINDINGS = ("pipeline", "relay.build")
#: The weight layout of the fast direct kernel on this machine (the strategy compiles it for a
#: packed weight; the generic fallback reads HWIO).
LANES = strategy.simd_lanes(tvm_fuse.host_target())
PACKED = f"OHWI{LANES}o"


def data_path_kernels(lib, data="data") -> list[str]:
    """Kernel names of the built graph's nodes that depend on the input ``data``, in order."""
    nodes = json.loads(lib.get_graph_json())["nodes"]
    reached = set()
    for i, node in enumerate(nodes):
        if node["name"] == data or any(src in reached for src, *_ in node.get("inputs", [])):
            reached.add(i)
    return [nodes[i]["attrs"]["func_name"] for i in sorted(reached) if nodes[i]["op"] == "tvm_op"]


def fused_arity(lib) -> list[int]:
    """Number of inputs of each fused kernel node (data, weight, bias[, residual])."""
    nodes = json.loads(lib.get_graph_json())["nodes"]
    return [len(n["inputs"]) for n in nodes if n["op"] == "tvm_op" and FUSED in n["name"]]


def fused_weight_shapes(lib) -> list[tuple]:
    """Shape of the weight each fused kernel node of the built graph reads (a param, or a
    kernel's output where relay.build did not fold it)."""
    graph = json.loads(lib.get_graph_json())
    rows, shapes = graph["node_row_ptr"], graph["attrs"]["shape"][1]
    weights = [n["inputs"][1] for n in graph["nodes"] if n["op"] == "tvm_op" and FUSED in n["name"]]
    return [tuple(shapes[rows[nid] + index]) for nid, index, _ in weights]


def pipeline_build(mod, params, binding, opt_level):
    """``pipeline()`` then ``relay.build``, the params bound by ``binding``; returns
    (optimized module, built lib, warnings raised)."""
    with warnings.catch_warnings(record=True) as caught, tvm.transform.PassContext(opt_level):
        warnings.simplefilter("always")
        if binding == "pipeline":
            optimized = tvm_fuse.pipeline(params=params)(mod)
            lib = relay.build(optimized, target=tvm_fuse.host_target())
        else:
            optimized = tvm_fuse.pipeline()(mod)
            lib = relay.build(optimized, target=tvm_fuse.host_target(), params=params)
    return optimized, lib, [str(w.message) for w in caught if "tvm_fuse" in str(w.message)]


def unnumbered(kernels) -> list[str]:
    """Kernel names without TVM's ``_<n>`` suffix (it numbers same-named kernels in build
    order, which the weight kernels of an unfolded build shift)."""
    return [re.sub(r"_\d+$", "", name) for name in kernels]


class Reference:
    """The task descriptions of the bind-first pipeline and the stock unoptimized build's output
    of one model, computed once."""

    def __init__(self, mod, params):
        self.mod, self.params = mod, params
        self.inputs = examples.random_inputs(mod, params)
        self.stock = testing.run(testing.build_stock(mod, params, opt_level=0), self.inputs)
        self.specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
        self.arity = sorted(2 + (s.bias is not None) + (s.residual is not None) for s in self.specs)
        self.weights = sorted(s.weight.shape for s in self.specs)

    def check(self, opt_level) -> dict:
        """Build with each binding at ``opt_level``; both give the bind-first task descriptions,
        a fused kernel node per description with its bias/residual inputs and the weight it
        describes (packed for the fast kernel where it applies), the same kernels on the data's
        path (the same fused ones below opt_level 2), and stock's output. Returns binding -> (lib, tvm_fuse warnings)."""
        built = {}
        for binding in BINDINGS:
            optimized, lib, messages = pipeline_build(self.mod, self.params, binding, opt_level)
            assert tvm_fuse.describe(optimized) == self.specs
            assert sorted(fused_arity(lib)) == self.arity
            assert sorted(fused_weight_shapes(lib)) == self.weights
            testing.assert_close(testing.run(lib, self.inputs), self.stock, RTOL)
            built[binding] = lib, messages
        # The fused kernels on the data's path agree; stock ops may differ below opt_level 2,
        # where relay.build folds no constant (e.g. an unbound dense bias's expand_dims).
        paths = [
            [k for k in unnumbered(data_path_kernels(lib)) if FUSED in k or opt_level >= 2]
            for lib, _ in built.values()
        ]
        assert paths[0] == paths[1]
        return built


@pytest.fixture(scope="module")
def conv_bias_bn():
    """conv -> bias_add -> BN -> relu: the conv bias, the BN and the relu all go inside."""
    return Reference(*examples.conv_bn_act(data_shape=(1, 16, 14, 14), channels=32, conv_bias=True))


@pytest.fixture(scope="module")
def seed():
    return Reference(*examples.seed_example())


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_conv_bias_bn_relu_fused_with_its_epilogue(conv_bias_bn, opt_level):
    (spec,) = conv_bias_bn.specs
    assert spec.bias is not None and spec.activation == "relu"
    # 3x3 stride 1, 16 -> 32 channels at 14x14: direct or Winograd, as the target's cost model says
    assert spec.weight.layout in (PACKED, f"WINO{spec.winograd_tile}_{LANES}o")
    for binding, (lib, messages) in conv_bias_bn.check(opt_level).items():
        assert fused_arity(lib) == [3]  # data, weight, bias
        assert not [k for k in data_path_kernels(lib) if "relu" in k or "add" in k]
        late_fold = binding == "relay.build" and opt_level < 2
        assert len(messages) == late_fold
        if late_fold:
            assert "opt_level >= 2" in messages[0] and "'conv_gamma'" in messages[0]


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_seed_example(seed, opt_level):
    (spec,) = seed.specs
    assert (spec.bias is not None, spec.activation) == (True, "relu")
    # 3x3 stride 2: direct or the polyphase Winograd, as the target's cost model says
    assert spec.weight.layout in (PACKED, f"WINO{spec.winograd_tile}S2_{LANES}o")
    for lib, _ in seed.check(opt_level).values():
        assert data_path_kernels(lib) == [
            "tvmgen_default_fused_tvm_fuse_nchw_to_nhwc",
            f"tvmgen_default_fused_{FUSED}",
            "tvmgen_default_fused_tvm_fuse_nhwc_to_nchw",
        ]


def test_unbound_params_give_the_bound_graph_once_relay_build_folds(conv_bias_bn):
    """relay.build's FoldConstant (opt_level >= 2) leaves no weight computation: the built
    graph is tvm_fuse.build's (which binds first), kernel for kernel."""
    _, lib, _ = pipeline_build(conv_bias_bn.mod, conv_bias_bn.params, "relay.build", 2)
    bound_first = tvm_fuse.build(conv_bias_bn.mod, conv_bias_bn.params)
    assert _kernels(lib) == _kernels(bound_first)


def _kernels(lib):
    nodes = json.loads(lib.get_graph_json())["nodes"]
    return [n["attrs"]["func_name"] for n in nodes if n["op"] == "tvm_op"]


def test_params_left_out_of_build_are_named_in_one_warning():
    mod, params = examples.conv_bn_act(data_shape=(1, 16, 14, 14), channels=32)
    gamma = params.pop("conv_gamma")
    inputs = {**examples.random_inputs(mod, params), "conv_gamma": gamma}
    with pytest.warns(UserWarning, match=r"from the inputs \['conv_gamma'\], which are not in"):
        lib = tvm_fuse.build(mod, params)
    ref = testing.run(testing.build_stock(mod, params), inputs)
    testing.assert_close(testing.run(lib, inputs), ref, RTOL)


def test_unknown_params_are_ignored_with_a_warning_like_stock():
    mod, params = examples.conv_bn_act(data_shape=(1, 16, 14, 14), channels=32)
    extra = {"fc_weight": np.zeros((10, 4), "float32"), "unused": np.zeros(3, "float32")}
    with pytest.warns(UserWarning, match=r"params \['fc_weight', 'unused'\] name no input"):
        optimized = tvm_fuse.optimize(mod, {**params, **extra})
    assert len(tvm_fuse.describe(optimized)) == 1
    inputs = examples.random_inputs(mod, params)
    ref = testing.run(testing.build_stock(mod, params), inputs)
    with pytest.warns(UserWarning, match="name no input"):
        testing.assert_close(testing.run(tvm_fuse.build(mod, {**params, **extra}), inputs), ref)


@pytest.mark.parametrize(
    "value,said",
    [
        (np.zeros((32, 16, 3), "float32"), r"shape \(32, 16, 3\) and dtype float32"),
        (np.zeros((32, 16, 3, 3), "float64"), r"shape \(32, 16, 3, 3\) and dtype float64"),
        (tvm.nd.array(np.zeros((16, 32, 3, 3), "float32")), r"shape \(16, 32, 3, 3\)"),
    ],
)
@pytest.mark.parametrize("entry", ["build", "pipeline"])
def test_param_of_the_wrong_shape_or_dtype_is_one_clear_error(value, said, entry):
    mod, params = examples.conv_bn_act(data_shape=(1, 16, 14, 14), channels=32)
    params["conv_weight"] = value
    expected = r"but input 'conv_weight' of 'main' is \(32, 16, 3, 3\) float32"
    with pytest.raises(UserError, match=rf"param 'conv_weight' has {said}.*{expected}"):
        if entry == "build":
            tvm_fuse.build(mod, params)
        else:
            tvm_fuse.pipeline(params=params)(mod)


# ---------------------------------------------------------------------------- ResNet-18


@pytest.fixture(scope="module")
def resnet18():
    return Reference(*models.zoo_workload("resnet-18"))


def test_resnet18_graph_half_is_the_same_bound_or_not(resnet18):
    """Every conv of ResNet-18 is fused with the same epilogue (bias, residual, relu) whether
    the params are bound before the pipeline or not."""
    with tvm.transform.PassContext(opt_level=3):
        unbound = tvm_fuse.pipeline()(resnet18.mod)
    assert tvm_fuse.describe(unbound) == resnet18.specs
    ops = count_ops(resnet18.mod)  # every conv, and the classifier (passes/dense.py)
    assert len(resnet18.specs) == ops["nn.conv2d"] + ops["nn.dense"]
    assert sum(spec.bias is not None for spec in resnet18.specs) > 0


@pytest.mark.slow
def test_resnet18_through_pipeline_and_relay_build(resnet18):
    """A whole model, bound and unbound, at relay.build's default level (3). The small graphs
    above take every level, 0 (neither fusion nor folding) included; a ResNet-18 build per level
    and binding would add several of CI's minutes."""
    resnet18.check(3)
