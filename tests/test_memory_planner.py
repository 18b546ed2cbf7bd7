"""The arena (TVM's USMP algorithms) and the storage sharing on live ranges (no build)."""

import numpy as np
import pytest

from tvm_fuse.memory import planner, sharing
from tvm_fuse.memory.liveness import Tensor
from tvm_fuse.memory.planner import Block


def _disjoint_when_live(blocks, offsets):
    """Independent of the planner: at each step, the live byte ranges do not intersect."""
    steps = {s for b in blocks for s in range(b.start, b.end + 1)}
    for step in steps:
        spans = sorted(
            (off, off + b.size) for b, off in zip(blocks, offsets) if b.start <= step <= b.end
        )
        if any(hi > lo for (_, hi), (lo, _) in zip(spans, spans[1:])):
            return False
    return True


def _random_blocks(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    starts = rng.integers(0, 40, n)
    return [
        Block(int(rng.integers(0, 1 << 16)), int(s), int(s + rng.integers(0, 12))) for s in starts
    ]


def _tensors(blocks):
    return [
        Tensor(f"t{i}", (b.size,), "int8", b.size, b.start, b.end) for i, b in enumerate(blocks)
    ]


def test_ping_pong_chain_needs_exactly_two_buffers():
    # t_i is written by kernel i and read by kernel i + 1: two buffers, reused in turn.
    size = 1000  # not a multiple of 64: each slot is 1024 bytes once aligned
    blocks = [Block(size, i, i + 1) for i in range(7)] + [Block(size, 7, 7)]
    arena = planner.plan_offsets(blocks)
    assert arena.arena == 2 * 1024
    assert len(set(arena.offsets)) == 2
    assert planner.lower_bound(blocks) == 2 * size
    shared = sharing.share_storage(_tensors(blocks))
    assert shared.sizes == (size, size)
    assert shared.storage_of == (0, 1) * 4


def test_usmp_hill_climb_reaches_the_optimum_where_greedy_by_size_misses():
    # 448 bytes is optimal because it is the lower bound.
    blocks = [
        *(Block(128, 2, 3), Block(128, 3, 3), Block(256, 2, 2)),
        *(Block(64, 4, 6), Block(128, 4, 6), Block(192, 3, 4)),
    ]
    greedy = planner.plan_offsets(blocks, algorithms=["greedy_by_size"])
    best = planner.plan_offsets(blocks)
    assert (planner.lower_bound(blocks), greedy.arena, best.arena) == (448, 512, 448)
    assert best.strategy == "hill_climb"
    assert _disjoint_when_live(blocks, best.offsets)


def test_sharing_largest_first_reuses_a_dead_large_storage():
    # A big tensor dies, then two small ones live together: one reuses the big storage, the
    # other needs a storage of its own (an arena could put both where the big one was).
    blocks = [Block(4096, 0, 1), Block(1024, 1, 3), Block(1024, 2, 3), Block(1024, 3, 3)]
    shared = sharing.share_storage(_tensors(blocks))
    assert shared.total_bytes == 4096 + 2 * 1024
    assert planner.plan_offsets(blocks).arena == 4096 + 1024 == planner.lower_bound(blocks)


def test_lower_bound_is_the_widest_step():
    blocks = [Block(10, 0, 1), Block(20, 1, 2), Block(40, 3, 3), Block(5, 0, 3)]
    # step 1: 10 + 20 + 5 = 35; step 3: 40 + 5 = 45
    assert planner.lower_bound(blocks) == 45


@pytest.mark.parametrize("seed", range(12))
def test_random_live_ranges_never_overlap(seed):
    blocks = _random_blocks(seed)
    best = planner.plan_offsets(blocks, alignment=64)
    assert _disjoint_when_live(blocks, best.offsets)
    assert all(off % 64 == 0 for off in best.offsets)
    assert (
        planner.lower_bound(blocks)
        <= best.arena
        <= sum(planner.align_up(b.size, 64) for b in blocks)
    )


@pytest.mark.parametrize("seed", range(12))
def test_random_sharing_never_puts_live_tensors_together(seed):
    blocks = _random_blocks(seed)
    shared = sharing.share_storage(_tensors(blocks))
    for i, a in enumerate(blocks):  # independent of Sharing.validate
        for j in range(i + 1, len(blocks)):
            if shared.storage_of[i] == shared.storage_of[j]:
                assert not planner.overlaps_in_time(a, blocks[j])
    for k, size in enumerate(shared.sizes):
        assert size == max(b.size for b, s in zip(blocks, shared.storage_of) if s == k)
    assert planner.lower_bound(blocks) <= shared.total_bytes <= sum(b.size for b in blocks)


def test_sharing_validate_catches_live_tensors_on_one_storage():
    tensors = _tensors([Block(64, 0, 1), Block(64, 1, 2)])
    broken = sharing.Sharing(tuple(tensors), (0, 0), (64,))
    with pytest.raises(sharing.SharingError, match="live together"):
        broken.validate()
    with pytest.raises(sharing.SharingError, match="overflows"):
        sharing.Sharing(tuple(tensors[:1]), (0,), (32,)).validate()


def test_find_overlap_reports_the_clashing_pair():
    blocks = [Block(64, 0, 1), Block(64, 1, 2), Block(64, 2, 3)]
    assert planner.find_overlap(blocks, [0, 64, 0]) is None  # blocks 0 and 2 never meet
    assert planner.find_overlap(blocks, [0, 32, 64]) == (0, 1)
    assert planner.find_overlap(blocks, [0, 64, 32]) == (1, 2)


@pytest.mark.parametrize(
    "blocks, alignment",
    [([Block(-1, 0, 0)], 64), ([Block(8, 3, 2)], 64), ([Block(8, 0, 0)], 0)],
)
def test_bad_blocks_are_refused(blocks, alignment):
    with pytest.raises(ValueError, match="tvm_fuse.memory"):
        planner.plan_offsets(blocks, alignment)
