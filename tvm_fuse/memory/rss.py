"""Resident memory of a process that runs a built module: the plan, seen by the OS.

Sits beside ``apply``, for the report. Storage bytes in the graph JSON say what the executor
asks for; this says what a process holds. Each graph JSON runs in a fresh Python process (so no
allocation of another build is counted) that loads the exported library and params, creates the
graph executor, reads its resident memory (``/proc/self/statm``), runs the model once and reads
it again, then its peak (``resource.getrusage``). The storage is allocated when the executor is
created but its pages become resident only when a kernel writes them, so the rise over the first
run is the activation storage plus the kernels' workspaces. Linux only (``/proc``). Processes
alternate between the graph JSONs, ``rounds`` times; medians are reported (the machine may be
shared).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from tvm import relay

_CHILD = """
import json, resource, sys
import tvm
from tvm.contrib import graph_executor


def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


lib_path, graph_path, params_path = sys.argv[1:4]
graph = open(graph_path).read()
module = graph_executor.create(graph, tvm.runtime.load_module(lib_path), tvm.cpu())
module.load_params(open(params_path, "rb").read())
before = resident()
module.run()
after = resident()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"before": before, "after": after, "peak": peak}))
"""


@dataclass(frozen=True)
class Rss:
    """Medians over the rounds, in bytes: resident memory before and after the first run, and
    the process's peak (which loading the library and params may set, before any run)."""

    before: int
    after: int
    peak: int

    @property
    def run_rise(self) -> int:
        return self.after - self.before


def _measure(lib_path: str, graph_path: str, params_path: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, lib_path, graph_path, params_path],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS", "1")},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_rss(lib, graph_jsons: dict, rounds: int = 3) -> dict:
    """label -> :class:`Rss` of ``lib`` (a ``relay.build`` result) run with each graph JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        lib_path, params_path = os.path.join(tmp, "lib.so"), os.path.join(tmp, "params")
        lib.get_lib().export_library(lib_path)
        with open(params_path, "wb") as out:
            out.write(relay.save_param_dict(lib.get_params()))
        paths = {}
        for label, graph in graph_jsons.items():
            paths[label] = os.path.join(tmp, f"{len(paths)}.json")
            with open(paths[label], "w") as out:
                out.write(graph)
        samples: dict = {label: [] for label in graph_jsons}
        for _ in range(rounds):
            for label, path in paths.items():
                samples[label].append(_measure(lib_path, path, params_path))
    return {
        label: Rss(*(int(statistics.median(s[key] for s in runs)) for key in Rss.__annotations__))
        for label, runs in samples.items()
    }
