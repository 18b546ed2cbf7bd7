"""Offset planning: place live ranges in one arena so that no two live tensors overlap.

Works on ``(size, start, end)`` blocks (sizes in bytes, ``[start, end]`` an inclusive range of
kernel steps); it knows nothing of Relay or Relax, and both backends plan with it. The placing
itself is TVM's where TVM has it: the unified static memory planner's algorithms
(``tir.usmp.algo``: greedy by size, greedy by conflicts, hill climb), run on one workspace pool;
the smallest arena wins. apache-tvm 0.27 (the Relax stack) has no USMP: there the planner
places the blocks itself, largest first (:func:`greedy_offsets`, strategy ``greedy``). What is
ours is around them: the conflicts come from the live ranges of the kernels the executor runs,
:func:`lower_bound` says how far from optimal the arena is, and :func:`find_overlap` checks the
result independently.

The arena is what an executor that places tensors at offsets could allocate; the graph executor
cannot (one allocation per storage id), see ``sharing`` for the plan it runs. Offsets are
multiples of ``alignment`` (64 bytes by default: a cache line, and what TVM's allocator gives
each storage). Refuses negative sizes, reversed ranges and a non-positive alignment.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import tvm

DEFAULT_ALIGNMENT = 64
ALGORITHMS = ("greedy_by_size", "greedy_by_conflicts", "hill_climb")


class Block(NamedTuple):
    """One tensor to place: its size in bytes and its inclusive live range of steps."""

    size: int
    start: int
    end: int


class Placement(NamedTuple):
    """Offsets (one per block, in input order), the arena size, the algorithm that won."""

    offsets: tuple[int, ...]
    arena: int
    strategy: str


def overlaps_in_time(a: Block, b: Block) -> bool:
    return a.start <= b.end and b.start <= a.end


def align_up(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def lower_bound(blocks: Sequence[Block]) -> int:
    """The largest total size live at one step: no arena can be smaller."""
    events: dict[int, int] = {}
    for block in blocks:
        events[block.start] = events.get(block.start, 0) + block.size
        events[block.end + 1] = events.get(block.end + 1, 0) - block.size
    best = live = 0
    for step in sorted(events):
        live += events[step]
        best = max(best, live)
    return best


def _check(blocks: Sequence[Block], alignment: int) -> None:
    if alignment <= 0:
        raise ValueError(f"tvm_fuse.memory: alignment must be positive, got {alignment}")
    for i, b in enumerate(blocks):
        if b.size < 0 or b.end < b.start:
            raise ValueError(f"tvm_fuse.memory: block {i} {b} has a negative size or range")


def has_usmp() -> bool:
    """Whether this TVM has USMP's algorithms (TVM 0.19 does; apache-tvm 0.27 dropped them)."""
    try:
        import tvm.tir.usmp  # noqa: F401  pylint: disable=import-outside-toplevel
    except ImportError:
        return False
    return tvm.get_global_func("tir.usmp.algo.greedy_by_size", allow_missing=True) is not None


def default_algorithms() -> tuple[str, ...]:
    """USMP's three algorithms where TVM has them, else the planner's own ``greedy``."""
    return ALGORITHMS if has_usmp() else ("greedy",)


def _buffer_infos(blocks: Sequence[Block], alignment: int) -> list:
    """One USMP ``BufferInfo`` per block, in conflict with the blocks live at a common step."""
    # pylint: disable=import-outside-toplevel  (TVM 0.19 only)
    from tvm.ir.memory_pools import WorkspacePoolInfo
    from tvm.tir.usmp.utils import BufferInfo

    pool = WorkspacePoolInfo("tvm_fuse_arena", [tvm.target.Target("c")])
    infos = [BufferInfo(f"t{i}", b.size, [pool], alignment) for i, b in enumerate(blocks)]
    for i, a in enumerate(blocks):
        infos[i].set_conflicts(
            [infos[j] for j, b in enumerate(blocks) if j != i and overlaps_in_time(a, b)]
        )
    return infos


def usmp_offsets(blocks: Sequence[Block], algorithm: str, alignment: int) -> list[int]:
    """The offsets TVM's USMP ``algorithm`` gives ``blocks`` (memory pressure: the lower bound,
    which the hill climb aims for)."""
    infos = _buffer_infos(blocks, alignment)
    allocate = tvm.get_global_func(f"tir.usmp.algo.{algorithm}")
    allocations = allocate(infos, lower_bound(blocks))
    return [int(allocations[info].byte_offset) for info in infos]


def greedy_offsets(blocks: Sequence[Block], alignment: int) -> list[int]:
    """The placement where USMP is missing: largest block first (ties: earliest, then first
    given), each at the lowest aligned offset free of the placed blocks it meets in time."""
    order = sorted(range(len(blocks)), key=lambda i: (-blocks[i].size, blocks[i].start, i))
    offsets: list[int] = [0] * len(blocks)
    placed: list[int] = []
    for i in order:
        taken = sorted(
            (offsets[j], offsets[j] + align_up(blocks[j].size, alignment))
            for j in placed
            if blocks[j].size and overlaps_in_time(blocks[i], blocks[j])
        )
        offset = 0
        for low, high in taken:
            if offset + blocks[i].size <= low:
                break
            offset = max(offset, high)
        offsets[i] = offset
        placed.append(i)
    return offsets


def plan_offsets(
    blocks: Sequence[Block],
    alignment: int = DEFAULT_ALIGNMENT,
    algorithms: Sequence[str] | None = None,
) -> Placement:
    """The smallest arena over ``algorithms`` (USMP's by name, or ``greedy``:
    :func:`greedy_offsets`; None: :func:`default_algorithms`); each result is checked for
    overlaps."""
    blocks = [Block(*b) for b in blocks]
    _check(blocks, alignment)
    algorithms = algorithms or default_algorithms()
    usmp = has_usmp()
    if not blocks:
        return Placement((), 0, algorithms[0])
    best = None
    for name in algorithms:
        if name == "greedy":
            offsets = greedy_offsets(blocks, alignment)
        elif usmp:
            offsets = usmp_offsets(blocks, name, alignment)
        else:
            raise ValueError(f"tvm_fuse.memory: {name} needs TVM's USMP, which this TVM lacks")
        pair = find_overlap(blocks, offsets)
        if pair is not None:  # never seen; a USMP bug must not become a wrong plan
            raise AssertionError(f"tvm_fuse.memory: USMP {name} overlapped blocks {pair}")
        arena = max(off + align_up(b.size, alignment) for off, b in zip(offsets, blocks))
        if best is None or arena < best.arena:
            best = Placement(tuple(offsets), arena, name)
    return best


def find_overlap(blocks: Sequence[Block], offsets: Sequence[int]):
    """The first pair ``(i, j)`` live at a common step whose byte ranges intersect, or None."""
    for i, a in enumerate(blocks):
        for j in range(i + 1, len(blocks)):
            b = blocks[j]
            if not (a.size and b.size and overlaps_in_time(a, b)):
                continue
            if offsets[i] < offsets[j] + b.size and offsets[j] < offsets[i] + a.size:
                return i, j
    return None
