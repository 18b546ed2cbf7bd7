"""Time the Relax backend against stock Relax on ONNX models (run in the Relax venv).

    python -m tvm_fuse.relax.bench [--models block resnet18 layer:l1 ...] [--rounds 3] [--stock]
        [--tune TRIALS] [--meta-schedule TRIALS] [--profile N [--peak GFLOPS]] [--json PATH]

Each model is written by ``tvm_fuse.onnx_example`` as ``tvm_fuse.bench.layer_table`` lists it
(``block``: the residual block at 64 channels on 56x56; ``resnet18``/``resnet50``: ResNets at
224x224, BatchNorm kept; ``layer:NAME``: a conv -> BN -> ReLU of the layer table), imported with
``from_onnx``, built by ``tvm_fuse.relax.build`` and, with ``--stock``, by ``tvm.compile`` of
the imported module (Relax's default pipeline: its convs are unscheduled loop nests).
``--tune TRIALS`` adds tvm_fuse tuned (``tvm_fuse.relax.tune``, TRIALS measurements per
kernel); ``--meta-schedule TRIALS`` adds stock Relax tuned by meta_schedule (as
``relax.pipeline.static_shape_tuning_pipeline`` does it, TRIALS trials per task); the wall
time of each tuning is reported. The runs are interleaved (``rounds`` rounds of each); the
median of each is printed in ms with the load average, and every build's output is checked
against the first's. Machines are shared and noisy: compare ratios within one run. Speed is
never asserted in tests. ``--profile N`` also times tvm_fuse's kernels one by one and sums them
by algorithm (``profile``; ``--peak`` gives the % of the FMA peak), their sum beside the whole
model's time (``kernel_profile.whole_model``). ``--json`` writes the table with the machine,
the command line and the budgets. ``--models`` takes names space- or comma-separated.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from ..bench.idle import Waits
from ..bench.layer_table import ONNX_MODELS, write_onnx_model
from ..bench import choices, kernel_profile
from ..memory.liveness import tensor_bytes
from ..memory.weights import fallback_bytes
from . import api, compat, records, tuning
from . import kernel as kernel_module

#: meta_schedule's builder and runner timeouts (its defaults: 30 s each)
MS_BUILD_TIMEOUT_S = 300
MS_RUN_TIMEOUT_S = 60


#: The benchmarks' ONNX models (``tvm_fuse.bench.layer_table``).
MODELS = ONNX_MODELS


def _runner(exe, x):
    vm = relax.VirtualMachine(exe, tvm.cpu())
    data = tvm.runtime.tensor(x)
    vm["main"](data)  # warm up

    def once():
        start = time.perf_counter()
        vm["main"](data)
        return (time.perf_counter() - start) * 1e3

    return once


def meta_schedule_build(mod, target, trials: int, work_dir: str):
    """Stock Relax tuned by meta_schedule, as ``static_shape_tuning_pipeline`` does it
    (decompose BatchNorm, the zero pipeline, ``tune_relax``, ``MetaScheduleApplyDatabase``),
    with ``trials`` per task (as ``--tune`` gives each tvm_fuse kernel) and a builder timeout
    long enough for a shared machine (the default 30 s fails every build of a 512-channel conv
    there); then ``tvm.compile``. Returns (executable, number of tasks)."""
    # pylint: disable-next=import-outside-toplevel  (meta_schedule loads only when asked for)
    from tvm.s_tir import meta_schedule as ms

    with target:
        prepared = tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.pipeline.zero_pipeline(),
            ]
        )(mod)
    tasks = len(ms.relax_integration.extract_tasks(prepared, target))
    ms.relax_integration.tune_relax(
        prepared,
        params={},
        target=target,
        work_dir=work_dir,
        max_trials_global=trials * tasks,
        max_trials_per_task=trials,
        num_trials_per_iter=min(64, trials),
        builder=ms.builder.LocalBuilder(timeout_sec=MS_BUILD_TIMEOUT_S),
        runner=ms.runner.LocalRunner(timeout_sec=MS_RUN_TIMEOUT_S),
    )
    with target:
        tuned = relax.transform.MetaScheduleApplyDatabase(work_dir)(prepared)
    return tvm.compile(tuned, target=target), tasks


def _timed(make):
    start = time.perf_counter()
    made = make()
    return made, time.perf_counter() - start


def load(model: str, folder: Path):
    """The imported Relax module of ``model`` (written to ``folder``) and a seeded input."""
    path, x = write_onnx_model(model, folder)
    return from_onnx(onnx.load(path), keep_params_in_input=False), x


def bench(
    model: str,
    rounds: int,
    stock: bool,
    folder: Path,
    tune=0,
    meta_schedule=0,
    profile_top=0,
    peak_gflops=None,
) -> dict:
    """Time the builds of ``model``; ``profile_top`` > 0 adds ``profile`` (its % of
    ``peak_gflops``) as ``result["profile"]``."""
    mod, x = load(model, folder)
    target = compat.host_target()
    exe, build_s = _timed(lambda: api.build(mod, target=target))
    exes = {"tvm_fuse.relax": exe}
    result = {"build_s": build_s, "tune_s": {}}
    if tune:
        log = folder / f"{model.replace(':', '_')}.tuning.json"
        done, result["tune_s"]["tvm_fuse.relax tuned"] = _timed(
            lambda: tuning.tune(mod, target=target, trials=tune, records=log)
        )
        result["tuned_kernels"] = [_tuned_row(kernel) for kernel in done]
        exes["tvm_fuse.relax tuned"] = api.build(mod, target=target, tuning_records=log)
    if stock:
        exes["stock relax"] = tvm.compile(mod, target=target)
    if meta_schedule:
        work_dir = folder / f"{model.replace(':', '_')}.meta_schedule"
        (exe, result["meta_schedule_tasks"]), result["tune_s"]["stock relax + meta_schedule"] = (
            _timed(lambda: meta_schedule_build(mod, target, meta_schedule, str(work_dir)))
        )
        exes["stock relax + meta_schedule"] = exe
    runners = {name: _runner(exe, x) for name, exe in exes.items()}
    result["max_rel_error"] = _max_rel_error(exes, x)
    times, waits = {name: [] for name in runners}, Waits()
    for _ in range(rounds):
        for name, once in runners.items():
            waits.settle()  # the previous runner's TVM workers spin a while after their last task
            times[name].append(once())
    waits.report()
    result["ms"] = {n: statistics.median(t) for n, t in times.items()}
    result["busy_measurements"] = waits.busy
    if profile_top:
        prof = profile(mod, target, profile_top, peak_gflops)
        result["profile"] = kernel_profile.whole_model(prof, result["ms"]["tvm_fuse.relax"])
    return result


def profile(mod, target, top: int, peak_gflops: float | None = None) -> dict:
    """The kernels ``tvm_fuse.relax.build`` runs for ``mod``, timed one by one: each PrimFunc
    that ``main`` calls built alone and run on fresh buffers of its call's shapes (weights warm
    in cache), each distinct call once. ``kernels``: the ``top`` slowest calls, with the
    PrimFunc's name, output shape, ms and share of the summed time; a fused conv also with its
    algorithm, GFLOP and % of ``peak_gflops``. ``by_algorithm``: the summed time by algorithm;
    ``kernel_sum_ms`` and ``weight_mb``, the calls' constant arguments less the Winograd
    fallback taps, which a finite run never reads (``memory.weights``;
    ``kernel_profile.profile``)."""
    lowered = api.lowered_for_compile(mod, None, target)
    timed: dict = {}
    weights: dict = {}  # the constant arguments, each once
    fallback: dict = {}  # a Winograd weight's fallback taps, once per weight constant
    kernels = []
    for call in api.op_calls(lowered["main"], "relax.call_tir"):
        func = lowered[call.args[0]]
        args = [*call.args[1].fields, call]
        weights.update(
            (a, tensor_bytes(compat.tensor_shape(a), compat.tensor_dtype(a)))
            for a in args[:-1]
            if _is_weight(a)
        )
        key = (call.args[0].name_hint, tuple(compat.tensor_shape(a) for a in args))
        if key not in timed:
            timed[key] = _time_alone(func, args, target)
        kernel = {"node": key[0], "shape": list(key[1][-1]), "ms": timed[key]}
        spec = kernel_module.spec_of(func)
        if spec is not None:
            weight = args[list(spec.argument_names).index("weight")]  # prim_func's order
            if _is_weight(weight):
                fallback[weight] = fallback_bytes([spec])
            kernel.update(algorithm=spec.algorithm_name, gflop=spec.flops / 1e9)
            pct = kernel_profile.pct_of_peak(kernel["gflop"], timed[key], peak_gflops)
            kernel["pct_peak"] = pct
        kernels.append(kernel)
    read = sum(weights.values()) - sum(fallback.values())
    return kernel_profile.profile(kernels, top, peak_gflops, read)


def _is_weight(expr) -> bool:
    """A constant tensor (0.27's scalars are constants too)."""
    return isinstance(expr, compat.Constant) and compat.tensor_shape(expr) is not None


def _time_alone(func, args, target) -> float:
    """Median ms of ``func`` compiled alone, on random buffers shaped as ``args``."""
    rng = np.random.default_rng(0)
    buffers = [
        tvm.runtime.tensor(
            rng.standard_normal(compat.tensor_shape(a)).astype(compat.tensor_dtype(a))
        )
        for a in args
    ]
    return tuning.prim_func_timer(func, target, buffers)()


def _tuned_row(done: tuning.TunedKernel) -> dict:
    """What the tuner measured for one kernel, the kernel alone: model's tiles vs chosen."""
    return {
        "kernel": f"{done.spec.data.shape} -> {done.spec.out.shape}",
        "model": records.tiles_text(done.default),
        "model_ms": done.default_ms,
        "tuned": records.tiles_text(done.best),
        "tuned_ms": done.best_ms,
    }


def _max_rel_error(exes: dict, x) -> float:
    """The largest difference of any build's output from the first's, over max |first|."""
    data = tvm.runtime.tensor(x)
    outs = [relax.VirtualMachine(e, tvm.cpu())["main"](data).numpy() for e in exes.values()]
    scale = float(np.abs(outs[0]).max()) or 1.0
    return max(float(np.abs(o - outs[0]).max()) / scale for o in outs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["block", "resnet18"],
        metavar="MODEL",
        help=f"space- or comma-separated: {', '.join(MODELS)}",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stock", action="store_true", help="also time stock Relax")
    parser.add_argument(
        "--tune",
        type=int,
        default=0,
        metavar="TRIALS",
        help="also tvm_fuse tuned, TRIALS per kernel",
    )
    parser.add_argument(
        "--meta-schedule",
        type=int,
        default=0,
        metavar="TRIALS",
        help="also stock Relax tuned by meta_schedule, TRIALS per task",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also time tvm_fuse's kernels one by one: by algorithm, and the N slowest",
    )
    parser.add_argument(
        "--peak",
        type=float,
        metavar="GFLOPS",
        help="the FMA peak for --profile's %% of peak (from `tvm-fuse bench peak`, Relay venv)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results there")
    args = parser.parse_args(argv)
    args.models = choices.select(parser, ",".join(args.models), MODELS)
    if args.tune < 0 or args.meta_schedule < 0 or args.profile < 0:
        parser.error("--tune, --meta-schedule and --profile take a number >= 0")
    if args.peak is not None and not args.peak > 0:
        parser.error("--peak takes the peak in GFLOP/s, a number > 0")
    machine = {
        "host": platform.node(),
        "cpu": tvm.target.codegen.llvm_get_system_cpu(),
        "cores": os.cpu_count(),
        # What the runtime uses, not the variable: unset, TVM starts half the logical CPUs on x86
        "threads": tvm.get_global_func("runtime.NumThreads")(),
    }
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            result = bench(
                model,
                args.rounds,
                args.stock,
                Path(folder),
                args.tune,
                args.meta_schedule,
                args.profile,
                args.peak,
            )
            result["load"] = os.getloadavg()[0]
            results[model] = result
            print(_table(model, result, machine))
            if "profile" in result:
                print(kernel_profile.report(model, result["profile"], "each built alone, warm"))
    if args.json:
        payload = {
            "command": " ".join([Path(sys.executable).name, "-m", __spec__.name, *sys.argv[1:]]),
            "machine": machine,
            "rounds": args.rounds,
            "peak_gflops": args.peak,
            "trials per kernel or task": {
                "tvm_fuse.relax tuned": args.tune,
                "stock relax + meta_schedule": args.meta_schedule,
            },
            "results": results,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")


def _table(model: str, result: dict, machine: dict) -> str:
    """The rows of one model: each build's median ms, its ratio to tvm_fuse untuned, the tuning
    wall time where it was tuned."""
    base = result["ms"]["tvm_fuse.relax"]
    lines = [
        f"{model} on {machine['host']} ({machine['cpu']}, {machine['threads']} threads, "
        f"load {result['load']:.2f}; outputs agree within "
        f"{result['max_rel_error']:.1g} of max |out|)",
        f"  {'build':<30} {'ms':>9} {'vs tvm_fuse':>12} {'tuning s':>9}",
    ]
    for name, ms in result["ms"].items():
        tuned = result["tune_s"].get(name)
        lines.append(
            f"  {name:<30} {ms:9.3f} {ms / base:11.2f}x {'' if tuned is None else f'{tuned:9.0f}'}"
        )
    for row in result.get("tuned_kernels", []):
        lines.append(
            f"  tuned alone {row['kernel']}: model {row['model']} {row['model_ms']:.3f} ms, "
            f"chosen {row['tuned']} {row['tuned_ms']:.3f} ms"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
