"""Wait for idle CPUs before a measurement (``settle``): plain Python, no TVM.

Both benchmark stacks use it: the Relay suites (``common.time_interleaved``) and the Relax
backend's ``tvm_fuse.relax.bench``, which runs where Relay (and so ``common``) cannot be imported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: Before each measurement, wait until the machine is idle (``settle``): the worker threads of
#: the implementation timed before it spin after their last task, TVM's for about 0.2 s of CPU
#: time (300,000 yields, measured on Zen 3), and on two cores a spinning thread takes one from
#: the next implementation (ONNX Runtime ran 2.5x slower right after TVM with a fixed 50 ms
#: pause). Idle means at most ``IDLE_BUSY`` of the CPUs' time busy over ``IDLE_WINDOW_S``.
IDLE_WINDOW_S = 0.05
IDLE_BUSY = 0.05
#: The longest wait for idle CPUs (a machine busy with other work never gets there).
SETTLE_MAX_S = 2.0


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot (Linux ``/proc/stat``), else None."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def settle(max_s: float = SETTLE_MAX_S) -> float:
    """Wait until the CPUs are idle (``IDLE_BUSY`` over a window of ``IDLE_WINDOW_S``), at most
    ``max_s``; return the seconds waited. Without ``/proc/stat``, wait ``max_s / 4``."""
    start = time.perf_counter()
    before = _cpu_times()
    if before is None:
        time.sleep(max_s / 4)
        return time.perf_counter() - start
    while True:
        time.sleep(IDLE_WINDOW_S)
        after = _cpu_times()
        busy, total = after[0] - before[0], after[1] - before[1]
        waited = time.perf_counter() - start
        if (total and busy <= IDLE_BUSY * total) or waited >= max_s:
            return waited
        before = after


@dataclass
class Waits:
    """The waits before one suite's measurements, and how many never reached idle CPUs: other
    processes were running. TVM's thread pool pins its threads and waits for the last one at
    every kernel, so beside a busy process its timings can be many times too slow (the README,
    "Threads"), and the suite says so (:meth:`warning`)."""

    busy: int = 0
    total: int = 0

    def settle(self) -> None:
        """:func:`settle`, counted."""
        self.total += 1
        if settle() >= SETTLE_MAX_S:
            self.busy += 1

    @staticmethod
    def combined(waits) -> Waits:
        """The counts of several ``Waits`` (one per implementation) added up."""
        waits = list(waits)
        return Waits(sum(w.busy for w in waits), sum(w.total for w in waits))

    def warning(self) -> str | None:
        """One line for a suite whose measurements started on busy CPUs, else None."""
        if not self.busy:
            return None
        return (
            f"warning: other processes kept the CPUs busy before {self.busy} of {self.total} "
            "measurements; TVM's times are unreliable beside them (README, Threads: use fewer "
            "threads than cores, TVM_FUSE_BENCH_THREADS)"
        )

    def report(self) -> None:
        """Print :meth:`warning`, if any, under the suite's timing line."""
        if warning := self.warning():
            print(f"  {warning}", flush=True)
