"""Memory reuse planning of a Relay graph's intermediate tensors (the graph half's third job).

``plan(mod, params)`` computes the live ranges of the tensors the graph executor's kernels write
and places them in one arena (TVM's USMP algorithms); ``plan_storage(graph_json)`` turns the same
live ranges into storage ids the graph executor runs (``tvm_fuse.build`` applies it by default);
``graph_storage(lib.get_graph_json())`` reads what a built module allocates; ``report.report(mod,
params)`` puts them side by side, stock TVM against tvm_fuse. ``python -m tvm_fuse.memory
resnet-18`` prints that report. The report is a tool above the build, so it is not imported
here: use ``tvm_fuse.memory.report.report``.
"""

from ..backend import installed

if installed() == "relay":  # the Relax stack imports only ``planner`` and ``liveness``
    from .apply import Applied, apply_to_factory, apply_to_package, plan_storage
    from .fusion import fused_away
    from .graph_storage import GraphStorage, Storage, graph_storage
    from .liveness import Liveness, Tensor
    from .plan import Buffer, MemoryPlan, OverlapError, plan, plan_graph, plan_liveness
    from .relay_kernels import kernel_module, liveness
    from .sharing import Sharing, SharingError, share_storage

__all__ = [
    "Applied",
    "Buffer",
    "GraphStorage",
    "Liveness",
    "MemoryPlan",
    "OverlapError",
    "Sharing",
    "SharingError",
    "Storage",
    "Tensor",
    "apply_to_factory",
    "apply_to_package",
    "fused_away",
    "graph_storage",
    "kernel_module",
    "liveness",
    "plan",
    "plan_graph",
    "plan_liveness",
    "plan_storage",
    "share_storage",
]
