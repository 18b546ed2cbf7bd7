"""The contract: ``plan(mod, params=None) -> MemoryPlan``, one arena for a graph's tensors.

Sits at the end of the graph half's memory job: liveness (``relay_kernels`` for a Relay module,
``graph_json`` for a built one) feeds the offset planner (``planner``); the result is checked
(:meth:`MemoryPlan.validate`) before it is returned. What the arena holds is what the graph
executor shares between kernels: every kernel output, graph outputs included (live to the end);
inputs, params and constants are outside it (see ``liveness``). Offsets are aligned to
``alignment`` bytes (64 by default); ``lower_bound_bytes`` uses the unaligned sizes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import planner
from .graph_json import graph_liveness
from .liveness import Liveness, Tensor
from .relay_kernels import liveness as relay_liveness


class OverlapError(AssertionError):
    """Two buffers live at the same step share bytes: the plan is wrong."""


@dataclass(frozen=True)
class Buffer(Tensor):
    """One tensor of the plan: its live range, and where it lives in the arena."""

    offset: int = 0


@dataclass(frozen=True)
class MemoryPlan:
    """Peak, naive and lower-bound bytes of a graph's tensors, and where each one goes."""

    steps: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    peak_bytes: int  # the arena size
    naive_bytes: int  # every buffer apart: no reuse
    lower_bound_bytes: int  # the most bytes live at one step
    alignment: int
    strategy: str

    @property
    def num_intermediates(self) -> int:
        return sum(not b.is_output for b in self.buffers)

    @property
    def intermediate_bytes(self) -> int:
        """Naive bytes of the tensors that are not graph outputs."""
        return sum(b.size for b in self.buffers if not b.is_output)

    def validate(self) -> None:
        """Raise :class:`OverlapError` if two buffers live at a common step share bytes, or one
        leaves the arena or is misaligned."""
        blocks = [planner.Block(b.size, b.start, b.end) for b in self.buffers]
        pair = planner.find_overlap(blocks, [b.offset for b in self.buffers])
        if pair is not None:
            a, b = (self.buffers[i] for i in pair)
            raise OverlapError(
                f"tvm_fuse.memory: {a.name} [{a.offset}, {a.offset + a.size}) steps {a.live_range}"
                f" overlaps {b.name} [{b.offset}, {b.offset + b.size}) steps {b.live_range}"
            )
        for b in self.buffers:
            if b.offset % self.alignment or b.offset + b.size > self.peak_bytes:
                raise OverlapError(f"tvm_fuse.memory: {b.name} at {b.offset} is misplaced")

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        ratio = self.peak_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0
        lines = [
            f"memory plan: {len(self.buffers)} buffers over {len(self.steps)} kernels, "
            f"{self.alignment}-byte aligned ({self.strategy})",
            f"  peak        {self.peak_bytes:>14,} B  ({ratio:.3f} x lower bound)",
            f"  lower bound {self.lower_bound_bytes:>14,} B",
            f"  naive       {self.naive_bytes:>14,} B",
            f"  {'offset':>12}  {'bytes':>12}  {'steps':>9}  {'dtype':<8} {'shape':<20} name",
        ]
        for b in sorted(self.buffers, key=lambda b: (b.start, b.name)):
            steps = f"{b.start}-{b.end}"
            shape = "x".join(map(str, b.shape)) + (" (out)" if b.is_output else "")
            lines.append(
                f"  {b.offset:>12,}  {b.size:>12,}  {steps:>9}  {b.dtype:<8} {shape:<20} {b.name}"
            )
        return "\n".join(lines)


def plan_liveness(live: Liveness, alignment: int = planner.DEFAULT_ALIGNMENT) -> MemoryPlan:
    """The smallest arena the planner finds for ``live``'s tensors, validated."""
    blocks = [planner.Block(t.size, t.start, t.end) for t in live.tensors]
    placement = planner.plan_offsets(blocks, alignment)
    buffers = tuple(
        Buffer(**asdict(t), offset=offset) for t, offset in zip(live.tensors, placement.offsets)
    )
    result = MemoryPlan(
        steps=live.steps,
        buffers=buffers,
        peak_bytes=placement.arena,
        naive_bytes=sum(b.size for b in blocks),
        lower_bound_bytes=planner.lower_bound(blocks),
        alignment=alignment,
        strategy=placement.strategy,
    )
    result.validate()
    return result


def plan(
    mod, params=None, *, fuse_opt_level: int = 2, alignment: int = planner.DEFAULT_ALIGNMENT
) -> MemoryPlan:
    """The memory plan of a Relay module's kernels (fused first if it is not yet, see
    ``relay_kernels.kernel_module``); ``params`` are bound before planning."""
    return plan_liveness(relay_liveness(mod, params, fuse_opt_level), alignment)


def plan_graph(graph_json: str, alignment: int = planner.DEFAULT_ALIGNMENT) -> MemoryPlan:
    """The memory plan of exactly the kernels a built module's graph executor runs."""
    return plan_liveness(graph_liveness(graph_json), alignment)
