"""The model-zoo check: every relay.testing network, ``tvm_fuse.build`` vs stock TVM.

For each (model, batch) it builds the network twice, with ``tvm_fuse.build`` and with stock
``relay.build`` at opt_level 3, runs both on one seeded input and reports: the fused kernels
(and their epilogues), the ``layout_transform`` calls left in ``tvm_fuse.optimize``'s output and
the layout_transform kernels in the built graph, the max relative error vs stock (must be
<= 1e-4 of max|stock|), and both build times (wall and CPU; the machines are shared). BN
statistics, gamma, beta and biases are redrawn with a seeded RNG (``tvm_fuse.models``), so
that BN folding is really exercised. Correctness only: latency is ``bench_models.py``'s job.

    tvm-fuse bench zoo [--models resnet-18,mobilenet] [--quick] [--results DIR] [--json PATH]

``--quick`` checks ResNet-18 at batch 1 only.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from tvm_fuse.bench import common  # noqa: E402  (first: thread env, TopHub off)

import numpy as np  # noqa: E402

import tvm_fuse  # noqa: E402
from tvm_fuse import models, testing  # noqa: E402
from tvm_fuse.examples import random_inputs  # noqa: E402
from tvm_fuse.passes.layout import count_layout_transforms  # noqa: E402

#: (model, batch) pairs checked: ResNets at two batch sizes, the rest of the zoo at batch 1.
CASES = [("resnet-18", 1), ("resnet-18", 2), ("resnet-50", 1), ("resnet-50", 2)] + [
    (name, 1) for name in ("mobilenet", "vgg-11", "squeezenet1.1", "inception_v3", "densenet-121")
]


def _timed(fn):
    """``(fn(), wall s, CPU s)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def check_case(name: str, batch: int, target) -> dict:
    """Build ``name`` at ``batch`` both ways, compare, and count kernels and transforms."""
    mod, params = models.zoo_workload(name, batch)
    data = random_inputs(mod, params)
    optimized = tvm_fuse.optimize(mod, params)
    specs = tvm_fuse.describe(optimized)
    stock, stock_s, stock_cpu = _timed(lambda: testing.build_stock(mod, params, target))
    fused, fuse_s, fuse_cpu = _timed(lambda: tvm_fuse.build(mod, params, target))
    ref, got = testing.run(stock, data), testing.run(fused, data)
    errors = [testing.relative_error(g, r) for g, r in zip(got, ref)]
    return {
        "model": name,
        "batch": batch,
        "fused_kernels": len(specs),
        "epilogues": dict(collections.Counter(s.epilogue for s in specs)),
        "layout_transforms_optimized": count_layout_transforms(optimized),
        "layout_transforms_built": models.built_layout_transforms(fused),
        "max_rel_error": max(errors),
        "ok": len(got) == len(ref) and max(errors) <= common.RTOL,
        "build_s": {"stock": stock_s, "tvm_fuse": fuse_s},
        "build_cpu_s": {"stock": stock_cpu, "tvm_fuse": fuse_cpu},
    }


def _row(rec: dict) -> list:
    if "error" in rec:
        return [rec["model"], rec["batch"], "-", "-", "-", "ERROR", "-", "-", "-", "-"]
    lt = f"{rec['layout_transforms_optimized']}/{len(rec['layout_transforms_built'])}"
    build, cpu = rec["build_s"], rec["build_cpu_s"]
    return [
        rec["model"],
        rec["batch"],
        rec["fused_kernels"],
        lt,
        f"{rec['max_rel_error']:.2e}",
        "ok" if rec["ok"] else "FAIL",
        build["stock"],
        build["tvm_fuse"],
        cpu["stock"],
        cpu["tvm_fuse"],
    ]


def _summary(rec: dict) -> str:
    """One progress line for a finished case (the table at the end has every column)."""
    if "error" in rec:
        return "ERROR (see above)"
    check = "ok" if rec["ok"] else "FAIL"
    build = rec["build_s"]
    return (
        f"{rec['fused_kernels']} fused kernels, max rel err {rec['max_rel_error']:.2e} ({check}), "
        f"built in {build['stock']:.1f} s stock, {build['tvm_fuse']:.1f} s tvm_fuse"
    )


def print_report(records: list[dict]) -> None:
    headers = ["model", "batch", "fused", "LT opt/built", "max rel err", "check"]
    headers += ["stock s", "fuse s", "stock cpu s", "fuse cpu s"]
    common.print_table(
        headers,
        [_row(rec) for rec in records],
        title=f"\nrelay.testing zoo: tvm_fuse.build vs stock relay.build (rtol {common.RTOL:g})",
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = sorted({name for name, _ in CASES}, key=[n for n, _ in CASES].index)
    parser.add_argument("--models", help=f"comma-separated names of {', '.join(names)} (all)")
    parser.add_argument("--quick", action="store_true", help="resnet-18 at batch 1 only")
    common.add_output_options(parser, "zoo")
    args = parser.parse_args(argv)
    chosen = common.select(parser, args.models or ",".join(names), models.ZOO)
    cases = [case for case in CASES if case[0] in chosen]
    target = tvm_fuse.host_target()
    records = []
    for name, batch in cases[:1] if args.quick else cases:
        print(f"{name} batch {batch}", flush=True)
        try:
            records.append(check_case(name, batch, target))
        except Exception as err:  # pylint: disable=broad-except  # reported in the table
            print(f"  !! ERROR: {type(err).__name__}: {err}")
            records.append({"model": name, "batch": batch, "error": str(err), "ok": False})
        print("  " + _summary(records[-1]), flush=True)
    print_report(records)
    payload = {"machine": common.machine_info(), "rtol": common.RTOL, "cases": records}
    payload["ok"] = all(rec["ok"] for rec in records)
    return common.finish(payload, common.json_path(args))


if __name__ == "__main__":
    sys.exit(main())
