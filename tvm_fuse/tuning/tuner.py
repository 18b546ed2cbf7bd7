"""``tvm_fuse.tune``: search the fused kernel's knobs for every task of a model.

Each task (``tasks.extract_tasks``) gets ``n_trial`` measurements (at most its space size): the
first is the analytic default (``tasks.default_config_index``), so the log's best is never a
config measured slower than what an untuned build gets; the rest come from an AutoTVM tuner.
When the search's best is not the default, both are measured ``CONFIRM_ROUNDS`` times more,
alternately, and the build applies the best only when its median is clearly lower
(``records.records_to_apply`` by ``tvm_fuse.tuning_rule``, the Relax backend's rule too): the
fastest of many single measurements is the one noise flattered most.
Every measurement is appended to ``log_file`` as one AutoTVM record line
(``autotvm.callback.log_to_file``), failed ones included, so the log is valid after every batch.
Measurement is local (:class:`LoopbackRunner`) unless a runner, or a tracker and key, are given.
The local runner is AutoTVM's ``LocalRunner`` with its RPC tracker and server bound to 127.0.0.1:
the stock one binds them to 0.0.0.0, and TVM's RPC has no authentication (anyone who reaches the
port may upload and run code).

Progress: a live line per task on a terminal, and one summary line per task when it is done
(trials, failures, best time and GFLOP/s). A failed measurement (compile error, timeout) counts as
a failure and tuning goes on. Ctrl-C stops at once, says how many records were written, and
re-raises ``KeyboardInterrupt``: the lines already in the log stay valid records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from tvm import autotvm

from ..schedules import conv2d_nhwc_fused as fast
from ..errors import UserError
from ..schedules import winograd
from ..target import as_target
from ..tuning_rule import CONFIRM_ROUNDS, replaces_default
from . import rpc
from .records import check_log_path, mean_seconds, median_seconds
from .tasks import default_config_index, extract_tasks

#: Tuner names -> AutoTVM tuner classes ("xgb" needs the xgboost package).
TUNERS = {
    "xgb": autotvm.tuner.XGBTuner,
    "ga": autotvm.tuner.GATuner,
    "random": autotvm.tuner.RandomTuner,
    "grid": autotvm.tuner.GridSearchTuner,
}


@dataclasses.dataclass
class TaskResult:
    """One task's tuning: its workload, measurements made and failed, the best time found."""

    workload: tuple
    trials: int = 0
    failures: int = 0
    best_seconds: float | None = None
    flop: float = 0.0
    first_error: str | None = None
    #: the config index of ``best_seconds``
    best_index: int | None = None
    #: (analytic default, search's best): each one's median seconds over all its measurements,
    #: when the best was measured again against the default (``CONFIRM_ROUNDS``)
    confirmed: tuple[float, float] | None = None

    @property
    def best_gflops(self) -> float | None:
        if not self.best_seconds or not self.flop:
            return None
        return self.flop / self.best_seconds / 1e9


@dataclasses.dataclass
class TuneResult:
    """What ``tune`` did: the log, the tasks and how many records it appended."""

    log_file: str
    tasks: list[TaskResult]
    records_written: int = 0


#: How to get the default tuner's package.
INSTALL_XGB = "pip install 'tvm_fuse[tune]'"


def default_tuner() -> str:
    """``"xgb"`` when the xgboost package is importable, else ``"ga"``."""
    try:
        import xgboost  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return "ga"
    return "xgb"


#: Shortest timing of one repeat: shorter ones were dominated by the measuring process's
#: warm-up (the first config of a session measured at up to 2x its real time on rocketlake).
MIN_REPEAT_MS = 100


class LoopbackRunner(autotvm.LocalRunner):
    """``autotvm.LocalRunner`` whose RPC tracker and server listen on 127.0.0.1 only."""

    HOST = "127.0.0.1"

    def set_task(self, task):
        # pylint: disable=import-outside-toplevel  (as autotvm does: the RPC modules start procs)
        from tvm.rpc.server import Server
        from tvm.rpc.tracker import Tracker

        self.task = task
        tracker = Tracker(host=self.HOST, port=9000, port_end=10000, silent=True)
        key = f"$local$device${tracker.port}"
        server = Server(
            host=self.HOST,
            port=9000,
            port_end=10000,
            key=key,
            silent=True,
            tracker_addr=(self.HOST, tracker.port),
        )
        self.key, self.host, self.port = key, self.HOST, tracker.port
        autotvm.RPCRunner.set_task(self, task)
        return server, tracker


def local_runner(
    number: int = 5,
    repeat: int = 3,
    timeout: float = 10.0,
    flush_cache: bool = True,
    min_repeat_ms: int = MIN_REPEAT_MS,
) -> LoopbackRunner:
    """The default runner: this machine (RPC on 127.0.0.1 only), ``repeat`` timings of at least
    ``number`` runs and ``min_repeat_ms`` each, with the CPU caches flushed before each repeat
    (a kernel inside a model meets cold weights) unless ``flush_cache`` is False (a kernel timed
    on its own, warm, as the layer benchmark does)."""
    return LoopbackRunner(
        number=number,
        repeat=repeat,
        timeout=timeout,
        min_repeat_ms=min_repeat_ms,
        enable_cpu_cache_flush=flush_cache,
    )


def check_tuner(name: str | None) -> str:
    """``name`` (default :func:`default_tuner`) if it is a tuner that can run here."""
    name = name or default_tuner()
    if name not in TUNERS:
        raise UserError(
            f"tvm_fuse.tune: unknown tuner {name!r}; choose one of {', '.join(TUNERS)}"
        )
    if name == "xgb" and default_tuner() != "xgb":
        raise UserError(f"tvm_fuse.tune: tuner 'xgb' needs xgboost ({INSTALL_XGB})")
    return name


def _shape(tensor_arg) -> str:
    return "[" + ",".join(str(d) for d in tensor_arg[1]) + "]"


def describe_workload(workload) -> str:
    """``data [1,56,56,64] weight [3,3,64,128] s2 relu`` from a fused-kernel workload
    (``... s1 relu winograd F4`` for the Winograd kernel's)."""
    template = winograd if workload[0] == winograd.NAME else fast
    fields = template.describe_workload(workload)
    data, weight = _shape(fields["data"]), _shape(fields["weight"])
    stride = fields.get("strides", (1, 1))[0]
    text = f"data {data} weight {weight} s{stride} {fields['activation']}"
    return text + (f" winograd F{fields['winograd_tile']}" if template is winograd else "")


class _Replay(autotvm.tuner.Tuner):
    """Measures the configs of ``indices`` in that order, repeats included (AutoTVM's tuners
    measure a config once)."""

    def __init__(self, task, indices):
        super().__init__(task)
        self.queue = list(indices)

    def has_next(self):
        return bool(self.queue)

    def next_batch(self, batch_size):
        batch, self.queue = self.queue[:batch_size], self.queue[batch_size:]
        return [self.task.config_space.get(index) for index in batch]

    def update(self, inputs, results):
        pass


class _Progress:
    """The tuning callback that keeps a TaskResult and prints the task's lines."""

    def __init__(self, result: TaskResult, label: str, n_trial: int, stream):
        self.result, self.label, self.n_trial, self.stream = result, label, n_trial, stream
        self.live = bool(getattr(stream, "isatty", lambda: False)())
        self.records: dict[int, list] = {}  # config index -> its successful (input, result)s

    def __call__(self, _tuner, inputs, results):
        self.remember(_tuner, inputs, results)
        for inp, res in zip(inputs, results):
            self.result.trials += 1
            if res.error_no != 0:
                self.result.failures += 1
                self.result.first_error = self.result.first_error or _error_line(res)
                continue
            seconds = mean_seconds(res)
            if self.result.best_seconds is None or seconds < self.result.best_seconds:
                self.result.best_seconds = seconds
                self.result.best_index = inp.config.index
        if self.live:
            self.stream.write(f"\r{self.line()}")
            self.stream.flush()

    def remember(self, _tuner, inputs, results):
        """Keep the successful measurements (a callback of the confirmation rounds)."""
        for inp, res in zip(inputs, results):
            if res.error_no == 0:
                self.records.setdefault(inp.config.index, []).append((inp, res))

    def median(self, index: int) -> float | None:
        records = self.records.get(index)
        return median_seconds(records) if records else None

    def line(self) -> str:
        r = self.result
        best = "no valid measurement"
        if r.best_seconds is not None:
            gflops = f", {r.best_gflops:.1f} GFLOP/s" if r.best_gflops else ""
            best = f"best {r.best_seconds * 1e3:.3f} ms{gflops}"
        line = f"{self.label}: {r.trials}/{self.n_trial} trials, {r.failures} failed, {best}"
        if r.confirmed:
            default, searched = r.confirmed
            applied = "the search's best" if replaces_default(default, searched) else "the default"
            line += (
                f"; measured again {CONFIRM_ROUNDS}x, medians: default {default * 1e3:.3f} ms, "
                f"search's best {searched * 1e3:.3f} ms: {applied} applies"
            )
        return line + (f" (first failure: {r.first_error})" if r.first_error else "")

    def done(self) -> None:
        self.stream.write(("\r" if self.live else "") + self.line() + "\n")
        self.stream.flush()


def _error_line(res, width: int = 160) -> str:
    """The kind and last line of a failed measurement (its ``costs`` are (traceback, error))."""
    kind = autotvm.measure.MeasureErrorNo(res.error_no).name
    error = res.costs[-1] if res.costs else ""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    last = lines[-1] if lines else type(error).__name__
    return f"{kind}: {last}"[:width]


class _DropErrorFileWarning(logging.Filter):
    """Drops AutoTVM's warning naming its error file (that file is removed, see _scratch)."""

    def filter(self, record):
        return "A file containing the errors has been written" not in str(record.msg)


@contextlib.contextmanager
def _scratch():
    """AutoTVM's tuner writes ``tvm_tuning_errors_*.log`` into the system temp folder whenever
    every measurement of one of its ``tune`` calls failed, and never removes it. tvm_fuse names the
    first failure in the task's summary line instead, so while tuning that file goes to a private
    folder removed afterwards: tuning leaves nothing outside the log the user named."""
    saved = tempfile.tempdir
    drop = _DropErrorFileWarning()
    logging.getLogger().addFilter(drop)
    with tempfile.TemporaryDirectory(prefix="tvm_fuse_tune_") as private:
        tempfile.tempdir = private
        try:
            yield
        finally:
            tempfile.tempdir = saved
            logging.getLogger().removeFilter(drop)


def _runner(runner, tracker, key, timeout):
    if runner is not None:
        if tracker or key:
            raise UserError("tvm_fuse.tune: give either runner= or tracker= and key=, not both")
        return runner
    if bool(tracker) != bool(key):
        raise UserError("tvm_fuse.tune: RPC measurement needs both tracker='host:port' and key=")
    if tracker:
        host, port = rpc.parse_tracker(tracker)
        return rpc.rpc_runner(key, host, port, timeout=timeout, min_repeat_ms=MIN_REPEAT_MS)
    return local_runner(timeout=timeout)


def _counter(result: TuneResult):
    def count(_tuner, inputs, _results):
        result.records_written += len(inputs)

    return count


@dataclasses.dataclass
class _Session:
    """What every task of one ``tune`` call shares."""

    tuner: str
    n_trial: int
    measure: dict
    result: TuneResult
    callbacks: list
    stream: object
    total: int


def _tune_task(session: _Session, index: int, task) -> None:
    trials = min(session.n_trial, len(task.config_space))
    task_result = TaskResult(task.workload, flop=float(task.flop or 0.0))
    session.result.tasks.append(task_result)
    label = f"[{index}/{session.total}] {describe_workload(task.workload)}"
    progress = _Progress(task_result, label, trials, session.stream)
    log = autotvm.callback.log_to_file(session.result.log_file)
    chain = [log, _counter(session.result), progress, *session.callbacks]
    try:
        default = default_config_index(task)
        _Replay(task, [default]).tune(1, session.measure, callbacks=chain)
        if trials > 1:
            TUNERS[session.tuner](task).tune(trials - 1, session.measure, callbacks=chain)
        best = task_result.best_index
        if best is not None and best != default and progress.median(default) is not None:
            confirm = [log, _counter(session.result), progress.remember, *session.callbacks]
            rounds = [default, best] * CONFIRM_ROUNDS
            _Replay(task, rounds).tune(len(rounds), session.measure, callbacks=confirm)
            task_result.confirmed = (progress.median(default), progress.median(best))
    finally:
        autotvm.GLOBAL_SCOPE.in_tuning = False  # autotvm leaves it set when interrupted
        progress.done()


def tune(
    mod,
    params=None,
    log_file="tvm_fuse_tuning.log",
    n_trial: int = 64,
    runner=None,
    target=None,
    tuner: str | None = None,
    *,
    tracker: str | None = None,
    key: str | None = None,
    builder=None,
    timeout: float = 10.0,
    callbacks=(),
    stream=None,
) -> TuneResult:
    """Tune every fused kernel of ``mod`` and append the AutoTVM records to ``log_file``.

    Parameters
    ----------
    mod, params, target
        What ``tvm_fuse.build`` takes (the unoptimized module; default target: the host).
    n_trial
        Measurements per task (at most the task's space size).
    runner
        An AutoTVM runner; default :func:`local_runner`, or with ``tracker="host:port"`` and
        ``key`` an ``autotvm.RPCRunner`` on the tracker's devices (checked first: a clear
        :class:`~tvm_fuse.tuning.rpc.TrackerError` when unreachable or the key is unknown).
    tuner
        ``"xgb"``, ``"ga"``, ``"random"`` or ``"grid"``; default :func:`default_tuner`.
    builder, timeout
        The AutoTVM builder (default ``LocalBuilder``) and the per-measurement timeout (s).
    callbacks
        Extra AutoTVM callbacks ``(tuner, inputs, results)``, called after the record is written.
    stream
        Where progress goes (default stderr).
    """
    if n_trial < 1:
        raise UserError(f"tvm_fuse.tune: n_trial={n_trial}; give at least 1 measurement per kernel")
    if not timeout > 0:
        raise UserError(f"tvm_fuse.tune: timeout={timeout}; give a measurement's seconds")
    check_log_path(log_file)
    target = as_target(target)
    hint = "" if tuner or default_tuner() == "xgb" else f"; {INSTALL_XGB} for the xgb tuner"
    tuner = check_tuner(tuner)
    stream = stream or sys.stderr
    runner = _runner(runner, tracker, key, timeout)
    own_builder = builder is None
    builder = builder or autotvm.LocalBuilder(timeout=max(timeout, 10.0))
    measure = autotvm.measure_option(builder=builder, runner=runner)
    tasks = extract_tasks(mod, params, target)
    result = TuneResult(str(log_file), [])
    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    stream.write(
        f"tuning {len(tasks)} fused kernels ({tuner}, {n_trial} trials each) -> {log_file}{hint}\n"
    )
    session = _Session(tuner, n_trial, measure, result, list(callbacks), stream, len(tasks))
    try:
        with _scratch():
            for index, task in enumerate(tasks, 1):
                _tune_task(session, index, task)
    except KeyboardInterrupt:
        stream.write(
            f"interrupted: {result.records_written} records written to {log_file} "
            "(all valid; build with them or tune again to add more)\n"
        )
        raise
    finally:
        if own_builder:  # AutoTVM's LocalBuilder removes each build's folder but the last
            shutil.rmtree(getattr(builder, "tmp_dir", None) or "", ignore_errors=True)
    return result
