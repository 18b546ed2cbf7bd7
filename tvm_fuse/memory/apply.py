"""Applying the memory plan: a built module's graph JSON with tvm_fuse's storage assignment.

Sits after ``relay.build`` (``tvm_fuse.build(..., memory="plan")``, the default) and after
``tvm-fuse compile`` (the tvmc package's ``mod.json``). It rewrites only the ``storage_id``
attribute of the kernel outputs: liveness from the graph itself (``graph_json``), storages from
``sharing``; inputs and params keep their storages (renumbered first, in TVM's order, as the
executor needs ids without gaps; a module built with linked params, which the library finds by
storage id, keeps TVM's plan), and the executor sizes each storage from the tensors on it, as it
always does. The kernels are the same, so the outputs are bit for bit those of TVM's plan.

TVM's own assignment is kept (and said so in :class:`Applied`) when the plan is not smaller, or
the graph has what the plan does not model: several devices or non-global storage scopes, an
alias that TVM did not put on its input's storage, an activation sharing a storage with an input.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass

from tvm.relay.backend.executor_factory import GraphExecutorFactoryModule

from .graph_json import NOP, Graph, parse_graph, tensor_of_entries
from .graph_storage import graph_storage
from .sharing import Sharing, share_storage

MODES = ("plan", "tvm")
PACKAGE_GRAPH = "mod.json"  # where a tvmc package keeps its graph


@dataclass(frozen=True)
class Applied:
    """A graph JSON after planning, and the activation storage before and after (bytes)."""

    graph_json: str
    tvm_bytes: int
    plan_bytes: int
    applied: bool
    reason: str = ""  # why TVM's assignment was kept

    @property
    def saved_bytes(self) -> int:
        return self.tvm_bytes - self.plan_bytes if self.applied else 0


def check_mode(memory: str) -> str:
    if memory not in MODES:
        raise ValueError(
            f"tvm_fuse.build: memory={memory!r} is not one of {', '.join(map(repr, MODES))} "
            f"('plan': tvm_fuse's storage plan, 'tvm': TVM's own)"
        )
    return memory


def _unsupported(graph: dict, parsed: Graph, values: list) -> str:
    """Why the plan cannot be applied to ``graph``, or ""."""
    attrs = graph["attrs"]
    if len(set(attrs.get("device_index", ["", [0]])[1])) > 1:
        return "the graph runs on several devices"
    if any(scope not in ("", "global") for scope in attrs.get("storage_scope", ["", []])[1]):
        return "the graph uses non-global storage scopes"
    external = {e.storage_id for e, v in zip(parsed.entries, values) if v is None}
    if any(v is not None and e.storage_id in external for e, v in zip(parsed.entries, values)):
        return "a kernel output shares a storage with an input or param"
    for node in parsed.nodes:
        sids = {parsed.entries[eid].storage_id for eid in (*node.inputs[:1], *node.outputs)}
        if node.func_name == NOP and len(sids) > 1:
            return f"the reshape {node.name} is not on its input's storage"
    return ""


def _storage_ids(parsed: Graph, values: list, sharing: Sharing) -> list[int]:
    """Inputs and params first, in TVM's order, then the plan's storages. The executor
    allocates every id up to the largest, so the ids leave no gap."""
    kept = sorted({e.storage_id for e, v in zip(parsed.entries, values) if v is None})
    rank = {sid: i for i, sid in enumerate(kept)}
    return [
        rank[e.storage_id] if v is None else len(kept) + sharing.storage_of[v]
        for e, v in zip(parsed.entries, values)
    ]


def plan_storage(graph_json: str) -> Applied:
    """``graph_json`` with tvm_fuse's storage assignment when it is smaller than TVM's."""
    tvm_bytes = graph_storage(graph_json).activation_bytes
    graph, parsed = json.loads(graph_json), parse_graph(graph_json)
    live, values = tensor_of_entries(parsed)
    reason = _unsupported(graph, parsed, values)
    if reason:
        return Applied(graph_json, tvm_bytes, tvm_bytes, False, reason)
    sharing = share_storage(live.tensors)
    if sharing.total_bytes >= tvm_bytes:
        return Applied(graph_json, tvm_bytes, sharing.total_bytes, False, "TVM's is as small")
    graph["attrs"]["storage_id"][1] = _storage_ids(parsed, values, sharing)
    planned = json.dumps(graph, indent=2)
    # read back as the executor will: the storage it allocates is what the plan says
    assert graph_storage(planned).activation_bytes == sharing.total_bytes
    return Applied(planned, tvm_bytes, sharing.total_bytes, True)


def apply_to_factory(factory, memory: str = "plan"):
    """``relay.build``'s result with its graph JSON planned (``memory="tvm"``: unchanged)."""
    if check_mode(memory) == "tvm" or not isinstance(factory, GraphExecutorFactoryModule):
        return factory
    if factory.executor["link-params"]:  # the library looks params up by their storage ids
        return factory
    result = plan_storage(factory.get_graph_json())
    if not result.applied:
        return factory
    return GraphExecutorFactoryModule(
        factory.ir_mod,
        factory.target,
        factory.executor,
        result.graph_json,
        factory.lib,
        factory.libmod_name,
        factory.params,
        factory.function_metadata,
    )


def apply_to_package(path) -> Applied:
    """Plan the ``mod.json`` of the tvmc package at ``path`` in place (a new file moved over
    the old one, so a failure leaves the package as it was)."""
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    graph = {m.name: data for m, data in members}.get(PACKAGE_GRAPH)
    if graph is None:  # a VM package: no graph executor, nothing to plan
        return Applied("", 0, 0, False, "the package has no graph executor")
    result = plan_storage(graph.decode())
    if not result.applied:
        return result
    fd, scratch = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tar")
    try:
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w") as tar:
            for member, data in members:
                if member.name == PACKAGE_GRAPH:
                    data = result.graph_json.encode()
                    member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        os.replace(scratch, path)
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
    return result
