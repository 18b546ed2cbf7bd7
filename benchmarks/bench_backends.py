"""tvm_fuse's two backends side by side: Relay (TVM 0.19, this interpreter) against Relax
(apache-tvm 0.27, the interpreter of a venv made by ``.ci/relax-env``), with ONNX Runtime as the
reference, on the same ONNX files, in one run.

    python -m tvm_fuse.bench.bench_backends --relax-python ~/tvm_fuse-relax/bin/python \
        [--models resnet18,layer:l1,...] [--quick] [--rounds N] [--results DIR] [--json PATH]

The two TVM stacks cannot share a process, so each backend builds the model in a child process
of its own interpreter (``backend_worker``) and times it there when asked; the children take
turns round by round with ONNX Runtime (``common.time_interleaved``), so a change in the
machine's load hits all of them alike. Each output is checked against ONNX Runtime's
(``common.check_close``); the table gives each backend's median, its compile time (the build
alone, in its own process) and the ratios Relax/Relay: of the medians, and the median of the
ratios within a round (``common.paired_ratio``: steadier on a shared machine, as both backends
of a round see the same load). ONNX Runtime is here the reference, not a
peer: its times are in the JSON only (``bench_models``/``bench_layers`` time it as a peer, with
its output bound once and PyTorch's export of the model).

Models: ``block`` (the residual block of ``tvm_fuse.onnx_example`` at 64 channels on 56x56),
``resnet18``, ``resnet50`` (BatchNorm kept) and ``layer:NAME``, a conv -> BatchNorm -> ReLU of
the layer table of ``bench_layers`` (depthwise layers excepted).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tvm_fuse.bench import common, peers  # noqa: E402  (common first: thread env)
from tvm_fuse.bench.layer_table import ONNX_MODELS  # noqa: E402

import numpy as np  # noqa: E402


RELAY, RELAX, ORT = "tvm_fuse (relay)", "tvm_fuse.relax", "onnxruntime"


MODELS = ONNX_MODELS
DEFAULT_MODELS = ("resnet18", "layer:l1", "layer:l4", "layer:seed")


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


def bench_model(name: str, pythons: dict, cfg, folder: Path) -> dict:
    model = Path(MODELS[name](folder / f"{name.replace(':', '_')}.onnx"))
    import onnx  # pylint: disable=import-outside-toplevel

    dims = onnx.load(model).graph.input[0].type.tensor_type.shape.dim
    x = np.random.default_rng(0).standard_normal([d.dim_value for d in dims]).astype("float32")
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
    relay, relax = results[RELAY], results[RELAX]
    ratios = {
        "relax/relay time": common.ratio(relax.ms, relay.ms),
        "relax/relay time per round": common.paired_ratio(relax.timing, relay.timing),
        "relax/relay compile": common.ratio(
            relax.extra.get("compile_s"), relay.extra.get("compile_s")
        ),
        "relax/onnxruntime time": common.ratio(relax.ms, results[ORT].ms),
        "relay/onnxruntime time": common.ratio(relay.ms, results[ORT].ms),
    }
    return {
        "results": {n: r.to_dict() for n, r in results.items()},
        "ratios": ratios,
        "ok": common.all_checks_ok(results),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--relax-python", required=True, metavar="PATH",
                        help="python of the Relax venv (.ci/relax-env DIR: DIR/bin/python)")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated names of {', '.join(MODELS)}")
    parser.add_argument("--quick", action="store_true", help="few short repeats")
    parser.add_argument("--rounds", type=int, metavar="N",
                        help=f"timing rounds (default {common.FULL.repeat})")
    common.add_output_options(parser, "backends")
    args = parser.parse_args(argv)
    names = common.select(parser, args.models, MODELS)
    if not Path(args.relax_python).is_file():
        parser.error(f"--relax-python {args.relax_python}: no such file; make the venv with "
                     ".ci/relax-env DIR and give DIR/bin/python")
    pythons = {RELAY: sys.executable, RELAX: args.relax_python}
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1 round")
    cfg = common.QUICK if args.quick else common.FULL
    if args.rounds is not None:
        cfg = dataclasses.replace(cfg, repeat=args.rounds)
    records, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(f"{name}:", flush=True)
            record = records[name] = bench_model(name, pythons, cfg, Path(tmp))
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
    payload = {"machine": machine, "timing": vars(cfg), "models": records,
               "ok": all(r["ok"] for r in records.values())}
    return common.finish(payload, common.json_path(args))


if __name__ == "__main__":
    sys.exit(main())
