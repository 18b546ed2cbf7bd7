"""The offset planner on hand-made and random live ranges (pure Python: no TVM, no build)."""

import numpy as np
import pytest

from tvm_fuse.memory import planner
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


def test_ping_pong_chain_needs_exactly_two_buffers():
    # t_i is written by kernel i and read by kernel i + 1: two buffers, reused in turn.
    size = 1000  # not a multiple of 64: each slot is 1024 bytes once aligned
    blocks = [Block(size, i, i + 1) for i in range(7)] + [Block(size, 7, 7)]
    result = planner.plan_offsets(blocks)
    assert result.arena == 2 * 1024
    assert len(set(result.offsets)) == 2
    assert planner.lower_bound(blocks) == 2 * size


def test_portfolio_beats_tflite_greedy_by_size_where_it_is_suboptimal():
    # Found by random search; 320 bytes is optimal because it is the lower bound.
    blocks = [
        Block(64, 0, 2),
        Block(192, 3, 4),
        Block(128, 4, 6),
        Block(128, 2, 3),
        Block(192, 0, 0),
    ]
    baseline = planner.plan_offsets(blocks, strategies=[planner.TFLITE_BASELINE])
    best = planner.plan_offsets(blocks, strategies=planner.GREEDY)
    assert planner.lower_bound(blocks) == 320
    assert baseline.arena == 384
    assert best.arena == 320
    assert _disjoint_when_live(blocks, best.offsets)


def test_hill_climb_reaches_the_optimum_where_every_greedy_order_misses():
    # Found by random search; 448 bytes is optimal because it is the lower bound.
    blocks = [
        *(Block(128, 2, 3), Block(128, 3, 3), Block(256, 2, 2)),
        *(Block(64, 4, 6), Block(128, 4, 6), Block(192, 3, 4)),
    ]
    greedy = planner.plan_offsets(blocks, strategies=planner.GREEDY)
    best = planner.plan_offsets(blocks)
    assert (planner.lower_bound(blocks), greedy.arena, best.arena) == (448, 512, 448)
    assert best.strategy.startswith("hill-climb")
    assert _disjoint_when_live(blocks, best.offsets)


def test_lower_bound_is_the_widest_step():
    blocks = [Block(10, 0, 1), Block(20, 1, 2), Block(40, 3, 3), Block(5, 0, 3)]
    # step 1: 10 + 20 + 5 = 35; step 3: 40 + 5 = 45
    assert planner.lower_bound(blocks) == 45


@pytest.mark.parametrize("seed", range(20))
def test_random_live_ranges_never_overlap(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    starts = rng.integers(0, 40, n)
    blocks = [
        Block(int(rng.integers(0, 1 << 16)), int(s), int(s + rng.integers(0, 12))) for s in starts
    ]
    best = planner.plan_offsets(blocks, alignment=64)
    baseline = planner.plan_offsets(blocks, alignment=64, strategies=[planner.TFLITE_BASELINE])
    assert _disjoint_when_live(blocks, best.offsets)
    assert planner.find_overlap(blocks, best.offsets) is None
    assert all(off % 64 == 0 for off in best.offsets)
    assert planner.lower_bound(blocks) <= best.arena <= baseline.arena
    assert best.arena <= sum(planner.align_up(b.size, 64) for b in blocks)


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
