"""The memory report: a model's plan before and after the tvm_fuse pipeline, beside TVM's own.

Sits on top of the rest of ``tvm_fuse.memory`` and of the pipeline. Two columns, each a module
built for the graph executor: ``stock`` (the model through stock ``relay.build``) and
``tvm_fuse`` (the model after ``tvm_fuse.optimize``, then ``relay.build``: what
``tvm_fuse.build`` does). Each is built as ``relay.optimize`` then ``relay.build`` of its result,
which gives the same graph as one ``relay.build`` (checked on ResNet-18) and keeps the fused
Relay module the executor's kernels come from.

Every memory number comes from the built graph JSON, so TVM's storage and the tvm_fuse plan
cover the same tensors: ``tvm`` is TVM's activation storage (intermediates + outputs,
``GraphStorage.activation_bytes``), ``plan`` the tvm_fuse arena. "Fusion removed" counts the
tensors the kernels keep inside (``fusion.fused_away`` on the fused Relay module), which an
unfused graph would have allocated. Builds take time: ResNet-18 about a minute per column here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional

import tvm
from tvm import relay

from ..dispatch import build_context
from .fusion import fused_away
from .graph_storage import graph_storage
from .plan import plan_graph
from .relay_kernels import FUSION_OPT_LEVEL

LOWER_BOUND_SLACK = 1.10  # the target: plan within 10 % of the lower bound


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
    tvm_intermediate_bytes: int
    tvm_intermediate_storages: int
    plan_bytes: int
    lower_bound_bytes: int

    @property
    def unfused_naive_bytes(self) -> int:
        return self.naive_bytes + self.fused_away_bytes

    def meets_targets(self) -> bool:
        """plan <= TVM's storage, and plan <= 1.1 x lower bound."""
        within = self.plan_bytes <= LOWER_BOUND_SLACK * self.lower_bound_bytes
        return within and self.plan_bytes <= self.tvm_bytes


def column(label: str, fused_mod: tvm.IRModule, graph_json: str) -> Column:
    """The numbers of a fused module (``relay.optimize``'s result) and of its built graph."""
    memory_plan, storage = plan_graph(graph_json), graph_storage(graph_json)
    kept = fused_away(fused_mod)
    return Column(
        label,
        kernels=len(memory_plan.steps),
        intermediates=memory_plan.num_intermediates,
        fused_away=len(kept),
        fused_away_bytes=sum(t.size for t in kept),
        naive_bytes=memory_plan.naive_bytes,
        tvm_bytes=storage.activation_bytes,
        tvm_intermediate_bytes=storage.intermediate_bytes,
        tvm_intermediate_storages=storage.num_intermediate_storages,
        plan_bytes=memory_plan.peak_bytes,
        lower_bound_bytes=memory_plan.lower_bound_bytes,
    )


@dataclass(frozen=True)
class MemoryReport:
    """The memory of one model, through stock TVM and through tvm_fuse."""

    model: str
    stock: Column
    tvm_fuse: Column

    def columns(self) -> tuple[Column, Column]:
        return self.stock, self.tvm_fuse

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "columns": {c.label: asdict(c) for c in self.columns()},
            "meets_targets": {c.label: c.meets_targets() for c in self.columns()},
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
    ("TVM graph plan MiB", "tvm_bytes", _mib),
    ("  of it intermediates MiB", "tvm_intermediate_bytes", _mib),
    ("  intermediate storages", "tvm_intermediate_storages", _count),
    ("tvm_fuse plan MiB", "plan_bytes", _mib),
    ("lower bound MiB", "lower_bound_bytes", _mib),
)


def format_report(rep: MemoryReport) -> str:
    width = 14
    lines = [
        f"memory report: {rep.model} (activations = kernel outputs, graph outputs included; "
        f"inputs and params excluded)",
        f"{'':<27}" + "".join(f"{c.label:>{width}}" for c in rep.columns()),
    ]
    for title, field, fmt in ROWS:
        cells = "".join(f"{fmt(getattr(c, field)):>{width}}" for c in rep.columns())
        lines.append(f"{title:<27}{cells}")
    for c in rep.columns():
        lines.append(
            f"{c.label}: plan/TVM = {c.plan_bytes / c.tvm_bytes:.3f}, plan/lower bound = "
            f"{c.plan_bytes / c.lower_bound_bytes:.3f} -> targets "
            f"{'met' if c.meets_targets() else 'MISSED'}"
        )
    return "\n".join(lines)


def build_column(label: str, mod, params, target) -> Column:
    """``relay.optimize`` then ``relay.build`` of ``mod`` under ``opt_level=3``; its column."""
    mod = tvm.IRModule(dict(mod.functions), mod.type_definitions)  # optimize binds in place
    with tvm.transform.PassContext(opt_level=FUSION_OPT_LEVEL), build_context():
        fused_mod, fused_params = relay.optimize(mod, target, params)
        lib = relay.build(fused_mod, target=target, params=fused_params)
    return column(label, fused_mod, lib.get_graph_json())


def _tvm_fuse_optimize(mod, params):
    from ..pipeline import optimize  # pylint: disable=import-outside-toplevel

    return optimize(mod, params)


def report(
    mod,
    params=None,
    target=None,
    *,
    model: str = "model",
    optimize: Optional[Callable] = None,
) -> MemoryReport:
    """The memory report of ``mod`` (see the module docstring). ``optimize(mod, params) ->
    IRModule`` replaces ``tvm_fuse.optimize`` for the second column; ``target`` defaults to
    ``tvm_fuse.host_target()``."""
    if target is None:
        from tvm_fuse.target import host_target  # pylint: disable=import-outside-toplevel

        target = host_target()
    stock = build_column("stock", mod, params, target)
    after = (optimize or _tvm_fuse_optimize)(mod, params)
    return MemoryReport(model, stock, build_column("tvm_fuse", after, None, target))
