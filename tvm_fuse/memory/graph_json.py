"""Reading a built module's graph JSON (``lib.get_graph_json()``): its entries and its kernels.

Sits after ``relay.build``: the graph JSON is what the graph executor runs, so it is the ground
truth for both TVM's own storage plan (``graph_storage``) and, through :func:`graph_liveness`,
for planning exactly the kernels the executor runs. Entries are the executor's tensors
(``node_row_ptr[node] + output index``) with the ``shape``, ``dltype`` and ``storage_id``
attributes. ``null`` nodes are graph inputs or params (told apart only by ``param_names``, as
the JSON does not say); ``tvm_op`` nodes are kernels in execution order, except ``__nop`` ones
(reshapes the executor turns into aliases of their input's storage).

Refuses JSON without those attributes (e.g. an AOT-executor module).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .liveness import Liveness, Schedule, tensor_bytes

NOP = "__nop"


@dataclass(frozen=True)
class Entry:
    """One tensor of the executor: ``kind`` is input, param, intermediate, output or alias (the
    output of a ``__nop`` reshape, on its input's storage)."""

    eid: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    storage_id: int
    kind: str

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.shape, self.dtype)


@dataclass(frozen=True)
class Node:
    nid: int
    name: str
    func_name: str  # "" for inputs and params
    inputs: tuple[int, ...]  # entry ids
    outputs: tuple[int, ...]  # entry ids


def _attr(graph: dict, key: str) -> list:
    try:
        return graph["attrs"][key][1]
    except (KeyError, IndexError, TypeError):
        raise ValueError(
            f"tvm_fuse.memory: graph JSON has no '{key}' attribute; expected the graph of a "
            f"module built by relay.build for the graph executor"
        ) from None


def _nodes(graph: dict) -> list[Node]:
    rows = graph["node_row_ptr"]
    nodes = []
    for nid, node in enumerate(graph["nodes"]):
        inputs = tuple(rows[src] + index for src, index, *_ in node["inputs"])
        outputs = tuple(range(rows[nid], rows[nid + 1]))
        func = node.get("attrs", {}).get("func_name", "") if node["op"] == "tvm_op" else ""
        nodes.append(Node(nid, node["name"], func, inputs, outputs))
    return nodes


def _heads(graph: dict) -> tuple[int, ...]:
    return tuple(graph["node_row_ptr"][nid] + index for nid, index, *_ in graph["heads"])


def _kinds(graph: dict, nodes: list[Node], param_names) -> dict[int, str]:
    heads = set(_heads(graph))
    kinds = {}
    for node in nodes:
        for eid in node.outputs:
            if not node.func_name:
                kinds[eid] = "param" if node.name in param_names else "input"
            elif eid in heads:
                kinds[eid] = "output"
            else:
                kinds[eid] = "alias" if node.func_name == NOP else "intermediate"
    return kinds


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]  # in execution order
    entries: tuple[Entry, ...]  # by entry id
    heads: tuple[int, ...]  # entry ids of the graph's outputs


def parse_graph(graph_json: str, param_names=()) -> Graph:
    """The nodes, entries and outputs of a graph JSON string."""
    graph = json.loads(graph_json)
    shapes, dtypes = _attr(graph, "shape"), _attr(graph, "dltype")
    storage_ids = _attr(graph, "storage_id")
    nodes = _nodes(graph)
    kinds = _kinds(graph, nodes, set(param_names))
    names = {eid: node.name for node in nodes for eid in node.outputs}
    entries = tuple(
        Entry(eid, names[eid], tuple(shapes[eid]), dtypes[eid], storage_ids[eid], kinds[eid])
        for eid in range(len(shapes))
    )
    return Graph(tuple(nodes), entries, _heads(graph))


def tensor_of_entries(graph: Graph) -> tuple[Liveness, list]:
    """The executor's kernels and the live ranges of the tensors they write, and for each entry
    the index of its tensor in that liveness (None for inputs and params). ``__nop`` reshapes
    alias their input, as the executor runs them."""
    values: list = [None] * len(graph.entries)
    schedule = Schedule()
    for node in graph.nodes:
        if node.func_name == NOP:
            values[node.outputs[0]] = values[node.inputs[0]]
        elif node.func_name:
            outs = [(graph.entries[e].shape, graph.entries[e].dtype) for e in node.outputs]
            ids = schedule.kernel(node.name, [values[e] for e in node.inputs], outs)
            for eid, value in zip(node.outputs, ids):
                values[eid] = value
    return schedule.finish(values[eid] for eid in graph.heads), values


def graph_liveness(graph_json: str) -> Liveness:
    """The liveness of exactly the kernels a built module's graph executor runs."""
    return tensor_of_entries(parse_graph(graph_json))[0]
