"""Memory reuse planning of a Relay graph's intermediate tensors (the graph half's third job).

``plan(mod, params)`` computes the live ranges of the tensors the graph executor's kernels write
and places them in one arena; ``graph_storage(lib.get_graph_json())`` reads what TVM's own plan
allocates; ``report(mod, params)`` puts both side by side, before and after the tvm_fuse
pipeline. ``python -m tvm_fuse.memory resnet-18`` prints that report. The report is a tool above
the build (which applies the plan through ``memory.apply``), so it is not imported here: use
``tvm_fuse.memory.report.report``.
"""

from .fusion import fused_away
from .graph_storage import GraphStorage, Storage, graph_storage
from .liveness import Liveness, Tensor
from .plan import Buffer, MemoryPlan, OverlapError, plan, plan_graph, plan_liveness
from .relay_kernels import kernel_module, liveness

__all__ = [
    "Buffer",
    "GraphStorage",
    "Liveness",
    "MemoryPlan",
    "OverlapError",
    "Storage",
    "Tensor",
    "graph_storage",
    "fused_away",
    "kernel_module",
    "liveness",
    "plan",
    "plan_graph",
    "plan_liveness",
]
