"""AutoTVM tuning of the fused kernel's knobs, locally or through TVM's RPC tracker.

Where it sits: above the build, which never imports it. ``extract_tasks`` finds the kernels a
``tvm_fuse.build`` would compile (the workloads of ``conv2d_nhwc_fused.x86``), ``tune`` searches
their knobs and appends AutoTVM records, and ``tvm_fuse.build(..., tuning_records=log)`` applies
them after ``check_records`` (registered with ``tvm_fuse.dispatch`` on import) has validated the
whole log. One job per module:

- ``tasks``    task extraction from a module, as the real build sees it
- ``records``  reading and validating logs
- ``rpc``      the tracker address, its pre-flight check and the ``RPCRunner``
- ``tuner``    the tuning loop with its progress lines and Ctrl-C handling
- ``cli``      the ``tvm-fuse tune`` subcommand (a tool: ``tvm_fuse.cli`` imports it)
"""

from .. import dispatch
from .records import RecordsError, check_records
from .rpc import TrackerError, check_tracker, parse_tracker, rpc_runner
from .tasks import extract_tasks
from .tuner import TaskResult, TuneResult, default_tuner, local_runner, tune

dispatch.set_records_checker(check_records)

__all__ = [
    "RecordsError",
    "TaskResult",
    "TrackerError",
    "TuneResult",
    "check_records",
    "check_tracker",
    "default_tuner",
    "extract_tasks",
    "local_runner",
    "parse_tracker",
    "rpc_runner",
    "tune",
]
