"""TVM's own memory plan, as the graph executor allocates it from a built module's graph JSON.

Sits beside the tvm_fuse plan, for comparison: ``graph_storage(lib.get_graph_json())``. The
executor allocates one buffer per ``storage_id``, sized by the largest tensor assigned to it
(``GraphExecutor::SetupStorage``: whole bytes per element times the element count). Each
storage gets the kind of the most external tensor on it, in the order input > param > output >
intermediate: inputs and params never share (TVM's plan allocates them apart), and an output may
land in a storage an intermediate used before, which then counts as output storage.

``intermediate_bytes`` and ``num_intermediate_storages`` are what fusion shrinks;
``activation_bytes`` (intermediate + output storage) is what the tvm_fuse arena is compared to.
Without ``param_names`` params count as inputs (the JSON does not tell them apart).
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph_json import Entry, parse_graph

KIND_ORDER = ("input", "param", "output", "intermediate", "alias")


@dataclass(frozen=True)
class Storage:
    storage_id: int
    nbytes: int
    kind: str
    tensors: tuple[str, ...]  # names of the nodes whose outputs it holds


@dataclass(frozen=True)
class GraphStorage:
    """The storage the graph executor allocates, and the tensors (entries) assigned to it."""

    storages: tuple[Storage, ...]
    entries: tuple[Entry, ...]

    def bytes_of(self, *kinds: str) -> int:
        return sum(s.nbytes for s in self.storages if s.kind in kinds)

    def of_kind(self, kind: str) -> list[Storage]:
        return [s for s in self.storages if s.kind == kind]

    @property
    def total_bytes(self) -> int:
        return self.bytes_of(*KIND_ORDER)

    @property
    def intermediate_bytes(self) -> int:
        return self.bytes_of("intermediate")

    @property
    def num_intermediate_storages(self) -> int:
        return len(self.of_kind("intermediate"))

    @property
    def output_bytes(self) -> int:
        return self.bytes_of("output")

    @property
    def activation_bytes(self) -> int:
        """Intermediates and outputs: the storage TVM's plan shares between kernel outputs."""
        return self.bytes_of("intermediate", "output")

    def intermediates(self) -> list[Entry]:
        """The tensors kernels write that are not graph outputs (nor ``__nop`` aliases), in
        execution order: unlike storage kinds, this does not depend on what shares storage."""
        return [e for e in self.entries if e.kind == "intermediate"]

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {self.bytes_of(k):,} B" for k in KIND_ORDER)
        return (
            f"TVM graph storage: {self.total_bytes:,} B in {len(self.storages)} storages "
            f"({parts}); {self.num_intermediate_storages} intermediate storages"
        )


def _storage(sid: int, entries: list[Entry]) -> Storage:
    kind = min((e.kind for e in entries), key=KIND_ORDER.index)
    names = tuple(dict.fromkeys(e.name for e in entries))
    return Storage(sid, max(e.nbytes for e in entries), kind, names)


def graph_storage(graph_json: str, param_names=()) -> GraphStorage:
    """The storage of a built module's graph JSON; ``param_names`` (e.g. ``lib.get_params()``)
    tells params apart from inputs."""
    graph = parse_graph(graph_json, param_names)
    by_sid: dict[int, list[Entry]] = {}
    for entry in graph.entries:
        by_sid.setdefault(entry.storage_id, []).append(entry)
    storages = tuple(_storage(sid, by_sid[sid]) for sid in sorted(by_sid))
    return GraphStorage(storages, graph.entries)
