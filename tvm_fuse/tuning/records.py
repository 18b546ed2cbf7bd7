"""AutoTVM logs: read, validate and apply them, all or nothing.

``check_records(path, target)`` decodes every line with ``autotvm.record.decode`` before any is
used, so a bad log is one clear :class:`RecordsError` (a ``ValueError``) naming the file, the line
and the reason, never a half-applied log. Refused:

- a missing or empty file, a line that is not an AutoTVM JSON record (garbage, a truncated line);
- a *foreign* log: a record tuned for another target -- a different target kind, ``-mcpu`` or
  ``-mtriple`` than the build's (``-num-cores`` and other flags may differ) -- or a log with no
  record of a fused kernel at all (a log of other ops only);
- a *stale* record of a fused kernel (the direct or the Winograd template,
  ``strategy.TUNABLE_KERNELS``): its knobs are not the template's current knobs, or a knob's
  value is not one of the template's choices for that workload (e.g. ``owb=0``, which would
  fail deep inside the schedule).

Accepted and ignored by the build: records of the fused kernels for workloads the model does not
have (the analytic default is used for kernels without a record), records of other ops
(applied by ``apply_history_best`` to those ops as usual), failed measurements.

Which config a build applies (``records_to_apply``): per workload, the one with the lowest
*median* time over its records, unless the analytic default (the template's fallback) has records
too and that median is not clearly lower than the default's (``tvm_fuse.tuning_rule``, the Relax
backend's rule too). A config measured once counts by that measurement, as in AutoTVM's own rule
(the lowest time); ``tvm_fuse.tune`` measures the search's best again against the default,
alternately, and those repeats then decide: the fastest of many single measurements is the one
most flattered by the machine's noise, and was seen slower than the default when rerun.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from tvm import autotvm

from .. import dispatch
from ..errors import UserError
from ..strategy import TUNABLE_KERNELS
from ..target import as_target
from ..tuning_rule import replaces_default
from .tasks import default_config_index

#: Target attributes that must agree between a record and the build.
TARGET_ATTRS = ("mcpu", "mtriple")


class RecordsError(UserError):
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
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    records.append((number, _decode(path, number, line)))
    except UnicodeDecodeError:
        raise RecordsError(f"{path}: not a text file, so not a tuning log") from None
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


def _template_knobs(task_name, args, target, cache: dict) -> dict:
    """Knob name -> the values (as text) the template's config space allows for ``args``."""
    key = (task_name, args)
    if key not in cache:
        task = autotvm.task.create(task_name, args, target)
        space = task.config_space.space_map
        cache[key] = {name: {repr(e) for e in knob.entities} for name, knob in space.items()}
    return cache[key]


def default_indices(target=None):
    """``default_index`` for :func:`chosen_configs`: the analytic default config (the template's
    fallback) of a record's task for ``target``, None for tasks of other ops."""
    target = as_target(target)

    def default_index(task):
        if task.name not in TUNABLE_KERNELS:
            return None
        with target:
            return default_config_index(autotvm.task.create(task.name, task.args, target))

    return default_index


def _check_knobs(path, number, inp, target, cache) -> None:
    template = inp.task.name
    try:
        knobs = _template_knobs(template, inp.task.args, target, cache)
    except Exception as err:  # noqa: BLE001  (any failure means: not a workload of this kernel)
        raise RecordsError(
            f"{path}: line {number}: the workload {inp.task.args} is not one of "
            f"{template} ({str(err).strip().splitlines()[-1] if str(err).strip() else err})"
        ) from None
    have = dict(inp.config._entity_map)  # pylint: disable=protected-access  (name -> entity)
    if set(have) != set(knobs):
        raise RecordsError(
            f"{path}: line {number} sets the knobs {sorted(have)}, but {template} now has "
            f"{sorted(knobs)}: the log was made with another version of the schedule; tune again"
        )
    for name, entity in have.items():
        if repr(entity) not in knobs[name]:
            raise RecordsError(
                f"{path}: line {number} sets {name}={entity!r}, which is not one of "
                f"{template}'s choices for this workload ({', '.join(sorted(knobs[name]))}); "
                "the log is corrupt or was edited: tune again"
            )


def check_records(path, target=None) -> list:
    """All records of the log at ``path``, checked for ``target`` (see the module docstring)."""
    target = as_target(target)
    numbered = _numbered_records(path)
    cache: dict = {}
    fused = 0
    for number, (inp, _) in numbered:
        _check_target(path, number, inp, target)
        if inp.task.name in TUNABLE_KERNELS:
            fused += 1
            with target:
                _check_knobs(path, number, inp, target, cache)
    if not fused:
        names = sorted({inp.task.name for _, (inp, _) in numbered})
        raise RecordsError(
            f"{path}: no record of {' or '.join(TUNABLE_KERNELS)} (the log has "
            f"{', '.join(names)}): a log of other ops; tune this model with 'tvm-fuse tune'"
        )
    return [record for _, record in numbered]


def records_to_apply(path, target=None) -> list:
    """The checked records of the log at ``path`` that a build applies (:func:`chosen_configs`)."""
    return chosen_configs(check_records(path, target), default_indices(target))


def chosen_configs(records, default_index=lambda task: None) -> list:
    """Of ``records``, per workload those of the config with the lowest median time, or of the
    default config (``default_index(task)``) when it is measured and the lowest is not clearly
    faster (see the module docstring); failed measurements dropped."""
    by_workload: dict = {}
    for inp, res in records:
        if res.error_no == 0:
            configs = by_workload.setdefault(inp.task.workload, {})
            configs.setdefault(inp.config.index, []).append((inp, res))
    chosen = []
    for configs in by_workload.values():
        best = min(configs.values(), key=median_seconds)
        task = best[0][0].task
        default = configs.get(default_index(task)) if len(configs) > 1 else None
        keep_default = default and not replaces_default(
            median_seconds(default), median_seconds(best)
        )
        chosen += default if keep_default else best
    return chosen


def median_seconds(records: list) -> float:
    """The time of a config over its successful ``(input, result)`` records: the median."""
    return statistics.median(mean_seconds(res) for _, res in records)


def mean_seconds(res) -> float:
    """The time of one successful measurement: the mean of its repeats (AutoTVM's ``costs``)."""
    return sum(res.costs) / len(res.costs)


def check_log_path(log, spelled: str = "log_file=") -> Path:
    """``log``, a path ``tune`` may append records to: not a directory, an existing file there
    is an AutoTVM log, its folder can be written; else a RecordsError naming ``spelled``."""
    log = Path(log)
    if log.is_dir():
        raise RecordsError(f"{log}: is a directory; give {spelled} a file name such as model.log")
    if log.exists() and log.stat().st_size:
        try:
            read_records(log)
        except RecordsError as err:
            raise RecordsError(
                f"{err}; tuning appends to {spelled}, so give a new file or an AutoTVM log"
            ) from None
    _require_writable_folder(log, spelled)
    return log


def _require_writable_folder(path: Path, spelled: str) -> None:
    """The nearest existing folder of ``path`` takes a new file (tried, not guessed: root may
    write everywhere except where the file system says no)."""
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder")
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as err:
        reason = err.strerror or str(err)
        raise RecordsError(
            f"{path}: cannot write there ({folder}: {reason}); choose a writable {spelled} path"
        ) from None


dispatch.set_records_checker(records_to_apply)  # how tvm_fuse.build reads its tuning_records
