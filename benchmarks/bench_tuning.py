"""Analytic default vs AutoTVM-tuned fused kernel, per layer of the layer benchmark.

For each layer of ``bench_layers.LAYERS``: tune the fused kernel with ``tvm_fuse.tune`` for a
fixed budget (``--trials``, 64 by default; local measurement), then time, interleaved and
checked against stock TVM, three builds: stock TVM NCHWc (the reference), tvm_fuse with the
analytic default, tvm_fuse with the tuned records. Reports the gain of tuning per layer and
whether the default is within 15 % of the tuned best (``DEFAULT_SLACK``). The full run takes
long (seven layers x 64 measurements); ``--trials 16 --layers l2,l4`` is a short one.

    tvm-fuse bench tuning [--trials N] [--layers l2,l4] [--quick] [--results DIR] [--log PATH]

``--quick`` runs 8 trials on layer l4 with short timing repeats (unless told otherwise).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tvm_fuse.bench import bench_layers, common  # noqa: E402  (common pins the thread env)

import tvm_fuse  # noqa: E402

IMPLS = ("tvm_nchwc", "default", "tuned")
QUICK_LAYERS = ("l4",)
#: The goal: the analytic default within this fraction of the tuned best.
DEFAULT_SLACK = 0.15


def tune_layer(layer, mod, params, target, trials: int, log: Path) -> None:
    """Append ``trials`` measurements of the layer's fused kernel to ``log``.

    Measured warm (no cache flush), as the comparison below times the layers: with flushed
    caches the tuner optimizes cold runs, and its best was up to 27 % slower warm than the
    default (seed, l3, down; 64 trials on rocketlake). Each repeat lasts at least
    ``tuner.MIN_REPEAT_MS``."""
    runner = tvm_fuse.tuning.local_runner(number=5, repeat=3, timeout=10, flush_cache=False)
    tvm_fuse.tune(mod, params, log_file=log, n_trial=trials, runner=runner, target=target)


def bench(layer, target, cfg, trials: int, log: Path) -> dict:
    """``common.run_case`` of the three builds on ``layer`` (tuned first)."""
    mod, params = bench_layers.relay_layer(layer, bench_layers.layer_arrays(layer))
    data = bench_layers.layer_arrays(layer)["data"]
    tune_layer(layer, mod, params, target, trials, log)
    builds = {
        "tvm_nchwc": lambda: common.build_stock(mod, params, target),
        "default": lambda: tvm_fuse.build(mod, params, target),
        "tuned": lambda: tvm_fuse.build(mod, params, target, tuning_records=str(log)),
    }
    preparers = {
        name: (lambda build=build: common.TvmRunner(build(), {"data": data}))
        for name, build in builds.items()
    }
    return common.run_case(preparers, reference="tvm_nchwc", cfg=cfg)


def record(layer, results) -> dict:
    default, tuned, stock = (results[n].ms for n in IMPLS[1:] + IMPLS[:1])
    gain = default / tuned if default and tuned else None
    return {
        "layer": layer.name,
        "gflop": layer.gflop,
        "impls": {name: results[name].to_dict(layer.gflop) for name in IMPLS},
        "gain": gain,
        "default_within_15pct": bool(gain and gain <= 1 + DEFAULT_SLACK),
        "tuned_beats_stock": bool(tuned and stock and tuned < stock),
    }


def print_report(records: list[dict], trials: int) -> None:
    rows = [
        [
            r["layer"],
            *(r["impls"][name]["ms"] for name in IMPLS),
            r["gain"],
            "yes" if r["default_within_15pct"] else "no",
            "yes" if r["tuned_beats_stock"] else "no",
        ]
        for r in records
    ]
    headers = ["layer", "stock NCHWc ms", "default ms", "tuned ms", "default/tuned"]
    headers += [f"default within {DEFAULT_SLACK:.0%} of tuned", "tuned faster than stock"]
    common.print_table(headers, rows, f"tuning, {trials} trials per layer")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, help="measurements per layer (64; quick: 8)")
    layers = bench_layers.LAYERS
    parser.add_argument("--layers", help=f"comma-separated names of {', '.join(layers)} (all)")
    parser.add_argument("--quick", action="store_true", help="8 trials of l4, short repeats")
    parser.add_argument("--log", type=Path, help="AutoTVM log (default: DIR/tuning.log)")
    common.add_output_options(parser, "tuning")
    args = parser.parse_args(argv)
    default = QUICK_LAYERS if args.quick else layers
    chosen = [layers[n] for n in common.select(parser, args.layers or ",".join(default), layers)]
    cfg = common.QUICK if args.quick else common.FULL
    args.trials = args.trials or (8 if args.quick else 64)
    target = tvm_fuse.host_target()
    log = args.log or args.results / "tuning.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)  # one budget per run: no records of an earlier run
    records = []
    for layer in chosen:
        print(f"== {layer.name}", flush=True)
        records.append(record(layer, bench(layer, target, cfg, args.trials, log)))
    print_report(records, args.trials)
    checks = [r["impls"][n]["check"] for r in records for n in IMPLS[1:]]
    payload = {
        "machine": common.machine_info(),
        "trials": args.trials,
        "layers": records,
        "ok": all(c and c.get("ok") for c in checks),
    }
    return common.finish(payload, common.json_path(args))


if __name__ == "__main__":
    sys.exit(main())
