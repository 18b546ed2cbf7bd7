"""AutoTVM logs: read, validate and apply them, all or nothing.

``check_records(path, target)`` decodes every line with ``autotvm.record.decode`` before any is
used, so a bad log is one clear :class:`RecordsError` (a ``ValueError``) naming the file, the line
and the reason, never a half-applied log. Refused:

- a missing or empty file, a line that is not an AutoTVM JSON record (garbage, a truncated line);
- a *foreign* log: a record tuned for another target -- a different target kind, ``-mcpu`` or
  ``-mtriple`` than the build's (``-num-cores`` and other flags may differ) -- or a log with no
  record of the fused kernel at all (a log of other ops only);
- a *stale* record of the fused kernel: its knobs are not the template's current knobs.

Accepted and ignored by the build: records of the fused kernel for workloads the model does not
have (the analytic default is used for kernels without a record), records of other ops
(applied by ``apply_history_best`` to those ops as usual), failed measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

from tvm import autotvm

from .. import dispatch
from ..schedules.conv2d_nhwc_fused import NAME as FUSED_TASK
from ..target import as_target

#: Target attributes that must agree between a record and the build.
TARGET_ATTRS = ("mcpu", "mtriple")


class RecordsError(ValueError):
    """A tuning log that cannot be applied; ``str()`` names the file, line and reason."""


def read_records(path) -> list:
    """Every ``(MeasureInput, MeasureResult)`` of the log at ``path``, or a RecordsError."""
    return [record for _, record in _numbered_records(path)]


def _numbered_records(path) -> list:
    """``(line number, record)`` of every non-blank line at ``path``."""
    path = Path(path)
    if not path.is_file():
        raise RecordsError(f"{path}: tuning records file does not exist")
    records = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                records.append((number, _decode(path, number, line)))
    if not records:
        raise RecordsError(f"{path}: no tuning records in the file; run 'tvm-fuse tune' first")
    return records


def _decode(path, number, line):
    try:
        record = autotvm.record.decode(line)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as err:
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise RecordsError(
            f"{path}: line {number} is not an AutoTVM record ({reason}); the file is corrupt "
            "or not a tuning log"
        ) from None
    except Exception as err:  # noqa: BLE001  (tvm raises TVMError for a bad target string)
        raise RecordsError(f"{path}: line {number} is not an AutoTVM record ({err})") from None
    if record is None:
        raise RecordsError(f"{path}: line {number} is an AutoTVM record of an old log version")
    return record


def _target_key(target) -> tuple:
    return (target.kind.name, *(str(target.attrs.get(a, "")) for a in TARGET_ATTRS))


def _check_target(path, number, inp, target) -> None:
    if _target_key(inp.target) != _target_key(target):
        raise RecordsError(
            f"{path}: line {number} was tuned for '{inp.target}', not for the build target "
            f"'{target}'; tune again for this target, or build for the log's target"
        )


def _template_knobs(task_name, args, target, cache: dict) -> set:
    key = (task_name, args)
    if key not in cache:
        task = autotvm.task.create(task_name, args, target)
        cache[key] = set(task.config_space.space_map)
    return cache[key]


def _check_knobs(path, number, inp, target, cache) -> None:
    try:
        knobs = _template_knobs(inp.task.name, inp.task.args, target, cache)
    except Exception as err:  # noqa: BLE001  (any failure means: not a workload of this kernel)
        raise RecordsError(
            f"{path}: line {number}: the workload {inp.task.args} is not one of "
            f"{FUSED_TASK} ({str(err).strip().splitlines()[-1] if str(err).strip() else err})"
        ) from None
    have = {name for name, *_ in inp.config.to_json_dict()["entity"]}
    if have != knobs:
        raise RecordsError(
            f"{path}: line {number} sets the knobs {sorted(have)}, but {FUSED_TASK} now has "
            f"{sorted(knobs)}: the log was made with another version of the schedule; tune again"
        )


def check_records(path, target=None) -> list:
    """All records of the log at ``path``, checked for ``target`` (see the module docstring)."""
    target = as_target(target)
    numbered = _numbered_records(path)
    cache: dict = {}
    fused = 0
    for number, (inp, _) in numbered:
        _check_target(path, number, inp, target)
        if inp.task.name == FUSED_TASK:
            fused += 1
            with target:
                _check_knobs(path, number, inp, target, cache)
    if not fused:
        names = sorted({inp.task.name for _, (inp, _) in numbered})
        raise RecordsError(
            f"{path}: no record of {FUSED_TASK} (the log has {', '.join(names)}): a log of other "
            "ops; tune this model with 'tvm-fuse tune'"
        )
    return [record for _, record in numbered]


dispatch.set_records_checker(check_records)  # how tvm_fuse.build validates its tuning_records
