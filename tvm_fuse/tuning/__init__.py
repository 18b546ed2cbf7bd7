"""AutoTVM tuning of the fused kernel's knobs, locally or through TVM's RPC tracker (issue 7).

Where it sits: beside the build. ``extract_tasks`` finds the kernels a ``tvm_fuse.build`` would
compile (the packed-weight workloads of ``conv2d_nhwc_fused.x86``), ``tune`` searches their
knobs and appends AutoTVM records, and ``tvm_fuse.build(..., tuning_records=log)`` applies them
after ``check_records`` has validated the whole log. One job per module:

- ``tasks``    task extraction from a module, as the real build sees it
- ``records``  reading, validating and applying logs
- ``rpc``      the tracker address, its pre-flight check and the ``RPCRunner``
- ``tuner``    the tuning loop with its progress lines and Ctrl-C handling
- ``cli``      the ``tvm-fuse tune`` subcommand (``add_cli``)
"""

from .cli import add_cli
from .records import RecordsError, apply_records, check_records
from .rpc import TrackerError, check_tracker, parse_tracker, rpc_runner
from .tasks import extract_tasks
from .tuner import TaskResult, TuneResult, default_tuner, local_runner, tune

__all__ = [
    "RecordsError",
    "TaskResult",
    "TrackerError",
    "TuneResult",
    "add_cli",
    "apply_records",
    "check_records",
    "check_tracker",
    "default_tuner",
    "extract_tasks",
    "local_runner",
    "parse_tracker",
    "rpc_runner",
    "tune",
]
