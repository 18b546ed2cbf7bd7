"""The applied memory plan: built graph JSONs with tvm_fuse's storage ids, run as TVM runs them.

One small bottleneck ResNet (the block shape where TVM's in-order plan loses most) is built once
with TVM's plan; the planned module shares its kernels, so its outputs must be bit-identical.
Storage and live ranges are read from the JSON by the tests' own ``graph_json_facts``,
independently of ``tvm_fuse.memory``; ResNet-18's applied plan is checked in ``test_models``,
beside the model's other checks against stock TVM, which share its builds.
"""

import json

import numpy as np
import pytest
import tvm
from tvm.contrib import graph_executor
from tvm.driver.tvmc import runner
from tvm.driver.tvmc.model import TVMCModel, TVMCPackage
from tvm.relay import testing as relay_testing
from tvm.relay.testing import resnet

import tvm_fuse
from tvm_fuse import examples, testing
from tvm_fuse.memory import apply

from graph_json_facts import live_ranges, storage_bytes


def _small_bottleneck_resnet():
    net = resnet.resnet(
        units=[2, 1],
        num_stages=2,
        filter_list=[8, 32, 64],
        num_classes=10,
        data_shape=(1, 3, 28, 28),
        bottle_neck=True,
    )
    return relay_testing.create_workload(net)


@pytest.fixture(scope="module")
def small():
    mod, params = _small_bottleneck_resnet()
    stock_plan = tvm_fuse.build(mod, params, memory="tvm")
    return mod, params, stock_plan, apply.apply_to_factory(stock_plan)


def test_applied_plan_reduces_the_storage_in_the_built_json(small):
    _, _, stock_plan, planned = small
    before, after = storage_bytes(stock_plan.get_graph_json()), storage_bytes(
        planned.get_graph_json()
    )
    result = apply.plan_storage(stock_plan.get_graph_json())
    assert result.applied and (result.tvm_bytes, result.plan_bytes) == (before, after)
    assert after < 0.9 * before  # ~17 % on this block shape
    # only storage ids changed; each input and param keeps a storage of its own
    old, new = json.loads(stock_plan.get_graph_json()), json.loads(planned.get_graph_json())
    assert {k: v for k, v in old["attrs"].items() if k != "storage_id"} == {
        k: v for k, v in new["attrs"].items() if k != "storage_id"
    }
    assert old["nodes"] == new["nodes"]
    for graph in (old, new):
        sids = graph["attrs"]["storage_id"][1]
        for nid in graph["arg_nodes"]:
            assert sids.count(sids[graph["node_row_ptr"][nid]]) == 1
    sids = set(new["attrs"]["storage_id"][1])
    assert sids == set(range(len(sids)))  # the executor allocates every id up to the largest


def test_no_two_live_tensors_share_a_storage(small):
    for lib in small[2:]:
        for sid, spans in live_ranges(lib.get_graph_json()).items():
            spans.sort()
            assert all(b[0] > a[1] for a, b in zip(spans, spans[1:])), (sid, spans)


def test_outputs_are_those_of_tvms_plan_bit_for_bit(small):
    mod, params, stock_plan, planned = small
    inputs = examples.random_inputs(mod, params)
    for got, ref in zip(testing.run(planned, inputs), testing.run(stock_plan, inputs)):
        np.testing.assert_array_equal(got, ref)


def test_exported_library_and_tvmc_package_run_the_plan(small, tmp_path):
    mod, params, stock_plan, planned = small
    inputs = examples.random_inputs(mod, params)
    (ref,) = testing.run(stock_plan, inputs)
    planned.export_library(str(tmp_path / "model.so"))
    loaded = graph_executor.GraphModule(
        tvm.runtime.load_module(str(tmp_path / "model.so"))["default"](tvm.cpu())
    )
    loaded.set_input(**inputs)
    loaded.run()
    np.testing.assert_array_equal(loaded.get_output(0).numpy(), ref)

    package = TVMCModel(mod, params).export_package(stock_plan, str(tmp_path / "model.tar"))
    result = apply.apply_to_package(package)
    assert result.applied and result.saved_bytes > 0
    assert storage_bytes(TVMCPackage(package).graph) == result.plan_bytes
    outputs = runner.run_module(TVMCPackage(package), "cpu", inputs=inputs).outputs
    np.testing.assert_array_equal(outputs["output_0"], ref)


def test_the_plan_is_the_default_and_tvms_stays_available():
    mod, params = examples.seed_example()
    with pytest.raises(ValueError, match=r"memory='arena' is not one of 'plan', 'tvm'"):
        tvm_fuse.build(mod, params, memory="arena")
    planned = tvm_fuse.build(mod, params)
    assert (
        planned.get_graph_json()
        == apply.plan_storage(tvm_fuse.build(mod, params, memory="tvm").get_graph_json()).graph_json
    )
