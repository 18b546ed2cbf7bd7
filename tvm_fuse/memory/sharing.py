"""Storage sharing: the memory plan the graph executor can run.

Sits between liveness and ``apply``. The graph executor allocates one buffer per ``storage_id``,
sized by the largest tensor assigned to it, and views every tensor at the start of its buffer
(``GraphExecutor::SetupStorage``: no offsets). So a plan it runs is a partition of the tensors
into storages whose members are never live at a common step; its cost is the sum of each
storage's largest member. What an arena with offsets gains over this (two small tensors side by
side where a large dead one was) is lost; ``plan`` computes that arena for comparison.

The assignment: tensors largest first, each into the smallest existing storage free during its
whole live range, else into a new one. Largest first means a storage's first member is its
largest, so joining a storage never grows it; choosing the smallest free one keeps the large ones
for the large tensors still to come. Refuses nothing: an empty list gives an empty plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .liveness import Tensor


class SharingError(AssertionError):
    """Two tensors live at a common step share a storage: the plan is wrong."""


@dataclass(frozen=True)
class Sharing:
    """``storage_of[i]`` is the storage of ``tensors[i]``; ``sizes[k]`` the bytes of storage k."""

    tensors: tuple[Tensor, ...]
    storage_of: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    def validate(self) -> None:
        """Raise :class:`SharingError` if two tensors of one storage are live at a common step,
        or a storage is smaller than a tensor on it."""
        by_storage: dict[int, list[Tensor]] = {}
        for tensor, storage in zip(self.tensors, self.storage_of):
            if tensor.size > self.sizes[storage]:
                raise SharingError(f"tvm_fuse.memory: {tensor.name} overflows storage {storage}")
            by_storage.setdefault(storage, []).append(tensor)
        for storage, members in by_storage.items():
            members.sort(key=lambda t: t.start)
            for a, b in zip(members, members[1:]):
                if b.start <= a.end:
                    raise SharingError(
                        f"tvm_fuse.memory: {a.name} (steps {a.live_range}) and {b.name} "
                        f"(steps {b.live_range}) are live together on storage {storage}"
                    )


def _is_free(ranges: list[tuple[int, int]], tensor: Tensor) -> bool:
    return all(tensor.end < start or end < tensor.start for start, end in ranges)


def share_storage(tensors: Sequence[Tensor]) -> Sharing:
    """Tensors into storages, largest first, each into the smallest storage free for it."""
    order = sorted(range(len(tensors)), key=lambda i: (-tensors[i].size, tensors[i].start, i))
    sizes: list[int] = []
    ranges: list[list[tuple[int, int]]] = []
    storage_of = [0] * len(tensors)
    for i in order:
        tensor = tensors[i]
        free = [k for k in range(len(sizes)) if _is_free(ranges[k], tensor)]
        if free:
            k = min(free, key=lambda k: (sizes[k], k))
        else:
            k = len(sizes)
            sizes.append(tensor.size)
            ranges.append([])
        ranges[k].append(tensor.live_range)
        storage_of[i] = k
    result = Sharing(tuple(tensors), tuple(storage_of), tuple(sizes))
    result.validate()
    return result
