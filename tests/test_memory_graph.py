"""TVM's own plan read from built graphs, and the report (small relay.build calls; ResNet slow)."""

import json
import math
import re
from dataclasses import asdict

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.relay import testing

import tvm_fuse
from tvm_fuse import examples, memory
from tvm_fuse.memory import report as memory_report
from tvm_fuse.memory.graph_json import graph_liveness


def _residual_model():
    """conv -> relu -> conv -> add(residual) -> relu -> pool -> conv -> reshape -> softmax (with the
    relu as a second output), and beside it dense -> reshape -> softmax: a reshape-only kernel."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 16, 14, 14))
    w1, w2, w3 = (relay.var(f"w{i}", shape=(16, 16, 3, 3)) for i in (1, 2, 3))
    a = relay.nn.relu(relay.nn.conv2d(x, w1, padding=1, channels=16, kernel_size=3))
    b = relay.nn.conv2d(a, w2, padding=1, channels=16, kernel_size=3)
    c = relay.nn.relu(relay.add(b, a))
    d = relay.nn.conv2d(relay.nn.max_pool2d(c, 2, 2), w3, padding=1, channels=16, kernel_size=3)
    out = relay.nn.softmax(relay.reshape(d, (1, -1)))
    z, wd = relay.var("z", shape=(1, 32)), relay.var("wd", shape=(64, 32))
    side = relay.nn.softmax(relay.reshape(relay.nn.dense(z, wd), (2, 32)))
    func = relay.Function([x, z, w1, w2, w3, wd], relay.Tuple([out, c, side]))
    params = {f"w{i}": rng.standard_normal((16, 16, 3, 3)).astype("float32") for i in (1, 2, 3)}
    params["wd"] = rng.standard_normal((64, 32)).astype("float32")
    mod = tvm.IRModule.from_expr(func)
    return mod, params


@pytest.fixture(scope="module")
def built():
    mod, params = _residual_model()
    target = tvm_fuse.host_target()
    with tvm.transform.PassContext(opt_level=3):
        optimized, _ = relay.optimize(mod, target, params)
        lib = relay.build(optimized, target)
    return optimized, lib


def _by_hand(graph_json, param_names):
    """Storage bytes per kind, straight from the JSON attributes (an independent reading)."""
    g = json.loads(graph_json)
    sids, shapes = g["attrs"]["storage_id"][1], g["attrs"]["shape"][1]
    assert set(g["attrs"]["dltype"][1]) == {"float32"}
    size = {}
    for eid, sid in enumerate(sids):
        size[sid] = max(size.get(sid, 0), math.prod(shapes[eid]) * 4)
    rows = g["node_row_ptr"]
    heads = {rows[nid] + i for nid, i, _ in g["heads"]}
    params = {rows[n] for n in g["arg_nodes"] if g["nodes"][n]["name"] in param_names}
    inputs = {rows[n] for n in g["arg_nodes"]} - params
    kind = {}
    for group, label in ((inputs, "input"), (params, "param"), (heads, "output")):
        for eid in group:
            kind.setdefault(sids[eid], label)
    totals = {"input": 0, "param": 0, "output": 0, "intermediate": 0}
    for sid, nbytes in size.items():
        totals[kind.get(sid, "intermediate")] += nbytes
    return totals, sum(1 for sid in size if sid not in kind)


def test_graph_storage_matches_the_json_read_by_hand(built):
    _, lib = built
    graph_json, param_names = lib.get_graph_json(), set(lib.get_params())
    storage = memory.graph_storage(graph_json, param_names)
    totals, n_intermediate = _by_hand(graph_json, param_names)
    assert totals["param"] > 0 and totals["input"] == (16 * 14 * 14 + 32) * 4
    assert storage.bytes_of("input") == totals["input"]
    assert storage.bytes_of("param") == totals["param"]
    assert storage.output_bytes == totals["output"]
    assert storage.intermediate_bytes == totals["intermediate"]
    assert storage.num_intermediate_storages == n_intermediate
    assert storage.total_bytes == sum(totals.values())
    assert storage.activation_bytes == totals["output"] + totals["intermediate"]
    # the flatten reshape is a __nop: an alias, not an intermediate of its own
    assert any(e.kind == "alias" for e in storage.entries)
    assert all("reshape_nop" != e.name for e in storage.intermediates())


def test_relay_liveness_is_the_executors_order(built):
    optimized, lib = built
    from_relay = memory.liveness(optimized)
    from_graph = graph_liveness(lib.get_graph_json())

    def summary(live):
        return [(t.shape, t.start, t.end, t.is_output) for t in live.tensors]

    # TVM names the lowered functions like these, adding _1, _2 to repeated names
    unique = [re.sub(r"_\d+$", "", s) for s in from_graph.steps]
    assert ["tvmgen_default_" + s for s in from_relay.steps] == unique
    assert summary(from_relay) == summary(from_graph)


def test_plan_of_built_graph_is_no_bigger_than_tvms(built):
    _, lib = built
    result = memory.plan_graph(lib.get_graph_json())
    storage = memory.graph_storage(lib.get_graph_json())
    result.validate()
    assert result.lower_bound_bytes <= result.peak_bytes <= storage.activation_bytes


@pytest.fixture(scope="module")
def seed_report():
    mod, params = examples.seed_example()
    return memory_report.report(mod, params, model="seed")


def test_report_of_the_seed_example(seed_report):
    rep = seed_report
    conv_out = 128 * 28 * 28 * 4
    for column in rep.columns():
        assert column.lower_bound_bytes <= column.plan_bytes <= column.tvm_bytes
        assert column.meets_targets()
        assert (column.fused_away, column.fused_away_bytes) == (2, 2 * conv_out)  # conv_out, bn_out
        assert column.unfused_naive_bytes == column.naive_bytes + 2 * conv_out
    data = rep.to_dict()
    assert set(data["columns"]) == {"stock", "tvm_fuse"}
    assert data["meets_targets"] == {"stock": True, "tvm_fuse": True}
    text = str(rep)
    assert "TVM graph plan MiB" in text and "tvm_fuse plan MiB" in text and "targets met" in text


def test_report_column_is_what_tvm_fuse_build_builds(seed_report):
    mod, params = examples.seed_example()
    graph_json = tvm_fuse.build(mod, params).get_graph_json()
    assert memory.plan_graph(graph_json).peak_bytes == seed_report.tvm_fuse.plan_bytes
    assert memory.graph_storage(graph_json).activation_bytes == seed_report.tvm_fuse.tvm_bytes
    assert len(memory.plan_graph(graph_json).steps) == seed_report.tvm_fuse.kernels


def test_report_takes_another_optimize(seed_report):
    # Stock folding as the "after" pipeline: the second column is the stock one again.
    mod, params = examples.seed_example()
    rep = memory_report.report(mod, params, optimize=memory.relay_kernels.folded_module)
    stock, after = (asdict(c) for c in rep.columns())
    assert {**after, "label": "stock"} == stock == asdict(seed_report.stock)


@pytest.mark.slow
def test_resnet18_report_meets_the_targets():
    mod, params = testing.resnet.get_workload(num_layers=18, batch_size=1)
    rep = memory_report.report(mod, params, model="resnet-18")
    print(rep)
    for column in rep.columns():
        assert column.plan_bytes <= column.tvm_bytes
        assert column.plan_bytes <= 1.10 * column.lower_bound_bytes
        assert column.fused_away > 0
