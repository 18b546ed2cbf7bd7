"""AutoTVM tuning of the fused kernel's knobs, locally or through TVM's RPC tracker.

Where it sits: above the build, which never imports it. ``extract_tasks`` finds the kernels a
``tvm_fuse.build`` would compile (the workloads of ``conv2d_nhwc_fused.x86``), ``tune`` searches
their knobs and appends AutoTVM records, and ``tvm_fuse.build(..., tuning_records=log)`` applies
them after ``records_to_apply`` (registered with ``tvm_fuse.dispatch``) has validated the
whole log and chosen each workload's config. One job per module:

- ``tasks``    task extraction from a module, as the real build sees it
- ``records``  reading and validating logs, and choosing the configs a build applies
- ``rpc``      the tracker address, its pre-flight check and the ``RPCRunner``
- ``tuner``    the tuning loop with its progress lines and Ctrl-C handling
- ``cli``      the ``tvm-fuse tune`` subcommand (a tool: ``tvm_fuse.cli`` imports it)

The names load on first use (``tvm_fuse.lazy``), so that ``tvm-fuse --help`` imports no TVM;
importing ``records`` registers ``records_to_apply`` with ``tvm_fuse.dispatch``.
"""

from ..lazy import lazy_exports

#: public name -> the submodule that defines it
_EXPORTS = {
    "add_cli": "cli",
    "RecordsError": "records",
    "check_records": "records",
    "records_to_apply": "records",
    "TrackerError": "rpc",
    "check_tracker": "rpc",
    "parse_tracker": "rpc",
    "rpc_runner": "rpc",
    "extract_tasks": "tasks",
    "TaskResult": "tuner",
    "TuneResult": "tuner",
    "default_tuner": "tuner",
    "local_runner": "tuner",
    "tune": "tuner",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
