"""Facts read from a built graph JSON by the tests themselves, independently of
``tvm_fuse.memory``: the storage its kernel outputs take and when each of them is live."""

import json
import math


def storage_bytes(graph_json):
    """Bytes of the storages that hold kernel outputs: per storage id, its largest tensor."""
    graph = json.loads(graph_json)
    sids, shapes = graph["attrs"]["storage_id"][1], graph["attrs"]["shape"][1]
    rows = graph["node_row_ptr"]
    external = {sids[rows[nid]] for nid in graph["arg_nodes"]}
    size = {}
    for eid, sid in enumerate(sids):
        if sid not in external:
            size[sid] = max(size.get(sid, 0), math.prod(shapes[eid]) * 4)
    return sum(size.values())


def live_ranges(graph_json):
    """storage id -> [(first step, last step)] of each kernel output on it (aliases resolved)."""
    graph = json.loads(graph_json)
    sids, rows = graph["attrs"]["storage_id"][1], graph["node_row_ptr"]
    source, span, step = {}, {}, -1
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] == "null":
            continue
        inputs = [source.get(rows[n] + i, rows[n] + i) for n, i, *_ in node["inputs"]]
        outputs = list(range(rows[nid], rows[nid + 1]))
        if node["attrs"]["func_name"] == "__nop":
            source[outputs[0]] = inputs[0]
            continue
        step += 1
        for eid in inputs:
            if eid in span:
                span[eid] = (span[eid][0], step)
        span.update({eid: (step, step) for eid in outputs})
    for nid, index, *_ in graph["heads"]:
        eid = source.get(rows[nid] + index, rows[nid] + index)
        if eid in span:
            span[eid] = (span[eid][0], step)
    ranges = {}
    for eid, live in span.items():
        ranges.setdefault(sids[eid], []).append(live)
    return ranges
