"""tvm_fuse's two backends side by side: Relay (TVM 0.19, this interpreter) against Relax
(apache-tvm 0.27, the interpreter of a venv made by ``.ci/relax-env``), with ONNX Runtime as the
reference, on the same ONNX files, in one run.

    python -m tvm_fuse.bench.bench_backends --relax-python ~/tvm_fuse-relax/bin/python \
        [--models resnet18,layer:l1,...] [--quick] [--rounds N] [--processes P] \
        [--results DIR] [--json PATH]

The two TVM stacks cannot share a process, so each backend builds the model in a child process
of its own interpreter (``backend_worker``) and times it there when asked; the children take
turns round by round with ONNX Runtime (``common.time_interleaved``), so a change in the
machine's load hits all of them alike. A process keeps the speed it starts with (seen: one
process ran a graph at 0.9 ms for its whole life, the next at 1.4 ms), so one pair of workers
is one draw: ``--processes P`` starts P fresh pairs one after the other, each timed for
``--rounds`` rounds, and pools their rounds. Each output is checked against ONNX Runtime's
(``common.check_close``); the table gives each backend's median, its compile time (the median
of its builds, each alone in its own process) and the ratios Relax/Relay: of the medians, and
the median of the ratios within a round (``common.paired_ratio``: steadier on a shared machine,
as both backends of a round see the same load); the JSON has each process's too. ONNX Runtime
is here the reference, not a peer: its times are in the JSON only (``bench_models`` and
``bench_layers`` time it as a peer, with its output bound once and PyTorch's export of the
model).

Models: ``block`` (the residual block of ``tvm_fuse.onnx_example`` at 64 channels on 56x56),
``resnet18``, ``resnet50``, ``mobilenet_v2`` (BatchNorm kept) and ``layer:NAME``, a conv ->
BatchNorm -> ReLU of the layer table of ``bench_layers`` (depthwise layers excepted).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tvm_fuse.bench import common, peers  # noqa: E402  (common first: thread env)
from tvm_fuse.bench.layer_table import ONNX_MODELS, write_onnx_model  # noqa: E402

import numpy as np  # noqa: E402


RELAY, RELAX, ORT = "tvm_fuse (relay)", "tvm_fuse.relax", "onnxruntime"


MODELS = ONNX_MODELS
DEFAULT_MODELS = ("resnet18", "layer:l1", "layer:l4", "layer:seed")
DEFAULT_PROCESSES = 3


class WorkerRunner(common.Runner):
    """A model built by ``backend_worker`` under ``python``; runs and times it on request."""

    def __init__(self, python: str, model: Path, x_path: Path, folder: Path):
        self.out_path = folder / f"out-{Path(python).parent.parent.name}.npy"
        self.proc = subprocess.Popen(
            [python, "-m", "tvm_fuse.bench.backend_worker", str(model), str(x_path),
             str(self.out_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.ready = self._answer()

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited with {self.proc.wait()} (see its stderr)")
        return json.loads(line)

    def output(self) -> np.ndarray:
        return np.load(self.out_path)

    def timed(self, number: int) -> float:
        self.proc.stdin.write(f"{number}\n")
        self.proc.stdin.flush()
        return self._answer()["ms"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _ort_runner(model: Path, x: np.ndarray) -> common.Runner:
    session = peers.ort_session(model)
    name = session.get_inputs()[0].name
    return common.CallableRunner(lambda: session.run(None, {name: x})[0])


def _one_process(model: Path, x: np.ndarray, pythons: dict, cfg, folder: Path) -> dict:
    """One draw: a fresh worker per backend, checked against and timed in turns with ONNX
    Runtime; the workers' build facts go into their results' ``extra``."""
    x_path = folder / "x.npy"
    np.save(x_path, x)
    workers = {}

    def worker(label):
        def prepare():
            workers[label] = WorkerRunner(pythons[label], model, x_path, folder)
            return workers[label]

        return prepare

    preps = {ORT: lambda: _ort_runner(model, x), RELAY: worker(RELAY), RELAX: worker(RELAX)}
    try:
        results = common.run_case(preps, reference=ORT, cfg=cfg)
    finally:
        for runner in workers.values():
            runner.close()
    for label, runner in workers.items():
        results[label].extra.update(
            compile_s=runner.ready["build_s"], backend=runner.ready["backend"],
            cpu=runner.ready["cpu"],
        )
    return results


def _pooled(draws: list) -> common.Result:
    """One implementation's results of several processes as one: the rounds of all, the median
    compile time, the worst check; each process's median time and compile time kept."""
    timed = [r for r in draws if r.timing]
    pooled = common.Result(draws[0].name, extra=dict(draws[0].extra))
    pooled.error = next((r.error for r in draws if r.error), None)
    checks = [r.check for r in draws if r.check]
    if checks:
        pooled.check = next((c for c in checks if not c.get("ok")), None) or max(
            checks, key=lambda c: c.get("max_abs_err", 0.0))
    if timed:
        pooled.timing = common.Timing([ms for r in timed for ms in r.timing.runs_ms],
                                      timed[0].timing.number,
                                      sum(r.timing.busy_runs for r in timed))
        pooled.extra["process_ms"] = [r.timing.median_ms for r in timed]
    compiles = [r.extra["compile_s"] for r in draws if "compile_s" in r.extra]
    if compiles:
        pooled.extra.update(compile_s=statistics.median(compiles), process_compile_s=compiles)
    return pooled


def bench_model(name: str, pythons: dict, cfg, folder: Path, processes: int) -> dict:
    model, x = write_onnx_model(name, folder)
    draws = []
    for index in range(processes):
        print(f" process {index + 1} of {processes}", flush=True)
        draws.append(_one_process(model, x, pythons, cfg, folder))
    results = {label: _pooled([d[label] for d in draws]) for label in draws[0]}
    relay, relax = results[RELAY], results[RELAX]
    ratios = {
        "relax/relay time": common.ratio(relax.ms, relay.ms),
        "relax/relay time per round": common.paired_ratio(relax.timing, relay.timing),
        "relax/relay time per process": [
            common.paired_ratio(d[RELAX].timing, d[RELAY].timing) for d in draws
        ],
        "relax/relay compile": common.ratio(
            relax.extra.get("compile_s"), relay.extra.get("compile_s")
        ),
        "relax/onnxruntime time": common.ratio(relax.ms, results[ORT].ms),
        "relay/onnxruntime time": common.ratio(relay.ms, results[ORT].ms),
    }
    return {
        "results": {n: r.to_dict() for n, r in results.items()},
        "ratios": ratios,
        "ok": all(common.all_checks_ok(d) for d in draws),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--relax-python", required=True, metavar="PATH",
                        help="python of the Relax venv (.ci/relax-env DIR: DIR/bin/python)")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated names of {', '.join(MODELS)}")
    parser.add_argument("--quick", action="store_true", help="few short repeats")
    parser.add_argument("--rounds", type=int, metavar="N",
                        help=f"timing rounds per process (default {common.FULL.repeat} / P)")
    parser.add_argument("--processes", type=int, default=DEFAULT_PROCESSES, metavar="P",
                        help=f"fresh pairs of workers, one after the other, whose rounds are "
                             f"pooled (default {DEFAULT_PROCESSES})")
    common.add_output_options(parser, "backends")
    args = parser.parse_args(argv)
    names = common.select(parser, args.models, MODELS)
    if not Path(args.relax_python).is_file():
        parser.error(f"--relax-python {args.relax_python}: no such file; make the venv with "
                     ".ci/relax-env DIR and give DIR/bin/python")
    pythons = {RELAY: sys.executable, RELAX: args.relax_python}
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1 round")
    if args.processes < 1:
        parser.error(f"--processes {args.processes}: give at least 1 process")
    cfg = common.QUICK if args.quick else common.FULL
    rounds = args.rounds or max(1, -(-cfg.repeat // args.processes))
    cfg = dataclasses.replace(cfg, repeat=rounds)
    records, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(f"{name}:", flush=True)
            record = records[name] = bench_model(name, pythons, cfg, Path(tmp), args.processes)
            res, ratios = record["results"], record["ratios"]
            rows.append([
                name, res[RELAY]["ms"], res[RELAX]["ms"],
                ratios["relax/relay time"], ratios["relax/relay time per round"],
                res[RELAY].get("compile_s"),
                res[RELAX].get("compile_s"), ratios["relax/relay compile"],
                "ok" if record["ok"] else "FAIL",
            ])
    machine = common.machine_info()
    common.print_table(
        ["model", "relay ms", "relax ms", "relax/relay", "per round", "relay compile s",
         "relax compile s", "compile relax/relay", "check vs ORT"],
        rows,
        title=f"\ntvm_fuse's backends, batch 1, fp32, {common.THREADS} threads, {machine['cpu']}",
    )
    payload = {"machine": machine, "timing": {**vars(cfg), "processes": args.processes},
               "models": records,
               "ok": all(r["ok"] for r in records.values())}
    return common.finish(payload, common.json_path(args))


if __name__ == "__main__":
    sys.exit(main())
