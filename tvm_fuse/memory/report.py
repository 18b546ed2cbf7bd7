"""The memory report: what a model's activations cost with stock TVM and with tvm_fuse.

Sits on top of the rest of ``tvm_fuse.memory`` and of the pipeline. Two columns, each a module
built for the graph executor with TVM's own storage plan: ``stock`` (stock ``relay.build``) and
``tvm_fuse`` (``tvm_fuse.optimize``, then ``relay.build``). Each is built as ``relay.optimize``
then ``relay.build`` of its result, which gives the same graph as one ``relay.build`` and keeps
the fused Relay module the executor's kernels come from.

Every memory number comes from the built graph JSON, so all of them cover the same tensors (the
activations: kernel outputs, graph outputs included; inputs and params excluded): ``tvm_bytes``
is TVM's storage, ``applied_bytes`` the storage with tvm_fuse's plan applied (what
``tvm_fuse.build`` gives the executor), ``arena_bytes`` what an executor placing tensors at
offsets could use (USMP, see ``planner``), ``lower_bound_bytes`` the most bytes live at once.
"Fusion removed" counts the tensors the kernels keep inside (``fusion.fused_away``), which an
unfused graph would have allocated. The headline compares what a user gets: stock TVM's storage
against ``tvm_fuse.build``'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional

import tvm
from tvm import relay

from ..dispatch import build_context
from ..progress import Progress
from .apply import plan_storage
from .fusion import fused_away
from .graph_storage import graph_storage
from .plan import plan_graph
from .relay_kernels import FUSION_OPT_LEVEL


@dataclass(frozen=True)
class Column:
    """One built module's numbers (bytes)."""

    label: str
    kernels: int
    intermediates: int  # kernel outputs that are not graph outputs
    fused_away: int  # tensors kept inside kernels: what fusion removed
    fused_away_bytes: int
    naive_bytes: int
    tvm_bytes: int
    tvm_storages: int
    applied_bytes: int
    arena_bytes: int
    lower_bound_bytes: int

    @property
    def unfused_naive_bytes(self) -> int:
        return self.naive_bytes + self.fused_away_bytes


def column(label: str, fused_mod: tvm.IRModule, graph_json: str) -> Column:
    """The numbers of a fused module (``relay.optimize``'s result) and of its built graph."""
    arena, storage = plan_graph(graph_json), graph_storage(graph_json)
    kept = fused_away(fused_mod)
    return Column(
        label,
        kernels=len(arena.steps),
        intermediates=arena.num_intermediates,
        fused_away=len(kept),
        fused_away_bytes=sum(t.size for t in kept),
        naive_bytes=arena.naive_bytes,
        tvm_bytes=storage.activation_bytes,
        tvm_storages=len(storage.of_kind("intermediate") + storage.of_kind("output")),
        applied_bytes=plan_storage(graph_json).allocated_bytes,
        arena_bytes=arena.peak_bytes,
        lower_bound_bytes=arena.lower_bound_bytes,
    )


def _less(new: int, old: int) -> str:
    """'18.5 % less', '3.0 % more' or 'no less'."""
    change = 1 - new / old if old else 0.0
    if round(change * 100, 1) == 0:
        return "no less"
    return f"{abs(change) * 100:.1f} % {'less' if change > 0 else 'more'}"


@dataclass(frozen=True)
class MemoryReport:
    """The activation memory of one model, through stock TVM and through tvm_fuse."""

    model: str
    stock: Column
    tvm_fuse: Column

    def columns(self) -> tuple[Column, Column]:
        return self.stock, self.tvm_fuse

    def conclusion(self) -> str:
        """What a user learns, in words."""
        stock, ours = self.stock.tvm_bytes, self.tvm_fuse.applied_bytes
        arena = self.tvm_fuse.arena_bytes
        return (
            f"{self.model}: tvm_fuse.build gives the graph executor {_mib(ours)} MiB of "
            f"activation storage where stock TVM allocates {_mib(stock)} MiB "
            f"({_less(ours, stock)}).\n"
            f"An executor that placed tensors at offsets in one arena could use {_mib(arena)} "
            f"MiB ({_less(arena, stock)} than stock; the most live at once is "
            f"{_mib(self.tvm_fuse.lower_bound_bytes)} MiB); TVM's graph executor allocates "
            f"one buffer per storage id, so tvm_fuse's plan shares whole buffers instead."
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "columns": {c.label: asdict(c) for c in self.columns()},
            "conclusion": self.conclusion(),
        }

    def __str__(self) -> str:
        return format_report(self)


def _count(value) -> str:
    return f"{value:,}"


def _mib(value) -> str:
    return f"{value / 2**20:.2f}"


ROWS = (
    ("kernels", "kernels", _count),
    ("intermediate tensors", "intermediates", _count),
    ("fusion removed (tensors)", "fused_away", _count),
    ("fusion removed MiB", "fused_away_bytes", _mib),
    ("naive MiB, unfused", "unfused_naive_bytes", _mib),
    ("naive MiB (no reuse)", "naive_bytes", _mib),
    ("TVM's plan MiB", "tvm_bytes", _mib),
    ("  storages", "tvm_storages", _count),
    ("tvm_fuse plan, applied MiB", "applied_bytes", _mib),
    ("arena with offsets MiB", "arena_bytes", _mib),
    ("lower bound MiB", "lower_bound_bytes", _mib),
)


def format_report(rep: MemoryReport) -> str:
    width = 14
    lines = [
        f"activation memory of {rep.model} (kernel outputs, graph outputs included; inputs and "
        f"params excluded), built with TVM's graph executor",
        f"{'':<29}" + "".join(f"{c.label:>{width}}" for c in rep.columns()),
    ]
    for title, field, fmt in ROWS:
        cells = "".join(f"{fmt(getattr(c, field)):>{width}}" for c in rep.columns())
        lines.append(f"{title:<29}{cells}")
    return "\n".join(lines + ["", rep.conclusion()])


def build_column(label: str, mod, params, target) -> Column:
    """``relay.optimize`` then ``relay.build`` of ``mod`` under ``opt_level=3``; its column."""
    mod = tvm.IRModule(dict(mod.functions), mod.type_definitions)  # optimize binds in place
    with tvm.transform.PassContext(opt_level=FUSION_OPT_LEVEL), build_context():
        fused_mod, fused_params = relay.optimize(mod, target, params)
        lib = relay.build(fused_mod, target=target, params=fused_params)
    return column(label, fused_mod, lib.get_graph_json())


def _tvm_fuse_optimize(mod, params):
    from ..api import optimize  # pylint: disable=import-outside-toplevel

    return optimize(mod, params)


def report(
    mod,
    params=None,
    target=None,
    *,
    model: str = "model",
    optimize: Optional[Callable] = None,
    progress: Optional[Progress] = None,
) -> MemoryReport:
    """The memory report of ``mod`` (see the module docstring). ``optimize(mod, params) ->
    IRModule`` replaces ``tvm_fuse.optimize`` for the second column; ``target`` defaults to
    ``tvm_fuse.host_target()``; ``progress`` prints a line per build (default: silent)."""
    if target is None:
        from tvm_fuse.target import host_target  # pylint: disable=import-outside-toplevel

        target = host_target()
    progress = progress or Progress(quiet=True)
    with progress.stage(f"building {model} with stock TVM and planning"):
        stock = build_column("stock", mod, params, target)
    with progress.stage(f"building {model} with tvm_fuse and planning"):
        after = (optimize or _tvm_fuse_optimize)(mod, params)
        fused = build_column("tvm_fuse", after, None, target)
    return MemoryReport(model, stock, fused)
