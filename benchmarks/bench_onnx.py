"""Whole ONNX models, one file for all: tvm_fuse against stock TVM and ONNX Runtime.

The models are written by ``tvm_fuse.onnx_example`` with random weights and BatchNorm kept:
``mobilenet_v2`` (torchvision's layout: depthwise convs, ReLU6 as ``Clip``, linear bottlenecks
with residual adds), the ResNets ``resnet18``/``resnet50`` (v1) and ``block``, a residual block
at 56x56 (quick to build). ONNX Runtime runs the file
itself, input and output bound once; tvm_fuse and stock TVM (``relay.build`` at opt_level 3,
NCHWc) build the Relay module TVM's ONNX importer makes of it, weights frozen as constants.
Every output is checked against ONNX Runtime's; the report counts the kernels tvm_fuse runs by
algorithm (``direct``, ``depthwise``, ``winograd F(mxm)``). ``--by-conv`` adds, per model, the
time of each conv shape within whole runs against ONNX Runtime's (``conv_compare``): where
tvm_fuse wins and loses.

    tvm-fuse bench onnx [--models mobilenet_v2,resnet18] [--by-conv] [--quick] [--results DIR]
                        [--json PATH]
    python -m tvm_fuse.bench.bench_onnx ...  (the same)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import asdict

from tvm_fuse.bench import common, conv_compare, peers  # noqa: E402  (common first: threads)
from tvm_fuse.bench.layer_table import write_onnx_model  # noqa: E402

import onnx  # noqa: E402
from tvm import relay  # noqa: E402

import tvm_fuse  # noqa: E402
from tvm_fuse import onnx_compat  # noqa: E402

MODELS = ("mobilenet_v2", "resnet18", "resnet50", "block")
DEFAULT_MODELS = ("mobilenet_v2",)
IMPLS = ("tvm_fuse", "tvm_nchwc", "onnxruntime")


def relay_module(path, data_shape) -> tuple:
    """(mod, params) of the ONNX file ``path``, input ``data`` of ``data_shape``, weights
    frozen as constants (``params`` is then empty)."""
    onnx_compat.install()
    return relay.frontend.from_onnx(onnx.load(path), {"data": data_shape}, freeze_params=True)


def bench_model(
    name: str, target, cfg: common.TimingConfig, folder, impls=IMPLS, by_conv: bool = False
) -> dict:
    """Time ``impls`` on the ONNX model ``name``; every output checked against ONNX Runtime's
    (stock TVM's when ONNX Runtime is not installed or not wanted). ``by_conv``: also compare
    the timed tvm_fuse build with ONNX Runtime conv by conv (``conv_compare.by_conv``)."""
    path, data = write_onnx_model(name, folder)
    mod, params = relay_module(path, data.shape)
    tvm_impls = [name for name in impls if name in common.TVM_BUILDERS]
    built = {}
    preps = peers.implementations(mod, params, data, target, None, tvm_impls, built)
    if "onnxruntime" in impls:  # on the file itself, not on a PyTorch module's export
        preps["onnxruntime"] = lambda: peers.ort_file_runner(path, data)
    available = "onnxruntime" in preps and not common.peers_available()["onnxruntime"]
    reference = "onnxruntime" if available else "tvm_nchwc"
    results = common.run_case(preps, reference=reference, cfg=cfg)
    record = {"model": name, **common.case_record(results, ("tvm_nchwc", "onnxruntime"))}
    paired = {
        peer: common.paired_ratio(results["tvm_fuse"].timing, results[peer].timing)
        for peer in ("tvm_nchwc", "onnxruntime")
        if peer in results
    }
    record["paired_ratios"] = {f"tvm_fuse/{peer}": value for peer, value in paired.items()}
    specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params, target))
    record["algorithms"] = common.algorithm_counts(specs)
    if by_conv and "tvm_fuse" in built and "onnxruntime" in results:
        record["by_conv"] = conv_compare.by_conv(built["tvm_fuse"], specs, path, data)
    return record


def print_report(records: list[dict]) -> None:
    rows = []
    for rec in records:
        for name, res in rec["results"].items():
            row = [rec["model"], name, res["ms"], res["min_ms"], res["build_s"]]
            rows.append(row + [common.status(res)])
    common.print_table(
        ["model", "impl", "median ms", "min ms", "compile s", "check"],
        rows,
        title=f"\nwhole ONNX models, batch 1, fp32, {common.THREADS} threads",
    )
    summary = []
    for rec in records:
        ratios, paired = rec["ratios"], rec["paired_ratios"]
        summary.append(
            [rec["model"], rec["best_peer"], ratios["tvm_fuse/best_peer"]]
            + [ratios["tvm_fuse/tvm_nchwc"], paired.get("tvm_fuse/tvm_nchwc")]
            + [ratios["tvm_fuse/onnxruntime"], paired.get("tvm_fuse/onnxruntime")]
            + [rec["algorithms"]]
        )
    common.print_table(
        ["model", "best peer", "fuse/best", "fuse/NCHWc", "per round", "fuse/ORT", "per round"]
        + ["tvm_fuse runs"],
        summary,
        title="\nratios of tvm_fuse's time (< 1: tvm_fuse faster): of the medians, and the "
        "median of the ratios within a round",
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated names of {', '.join(MODELS)}")
    parser.add_argument("--quick", action="store_true", help="few short repeats")
    parser.add_argument("--no-peers", action="store_true", help="TVM implementations only")
    parser.add_argument(
        "--by-conv",
        action="store_true",
        help="also time each conv within whole runs against ONNX Runtime's",
    )
    common.add_output_options(parser, "onnx")
    args = parser.parse_args(argv)
    names = common.select(parser, args.models or ",".join(DEFAULT_MODELS), MODELS)
    cfg = common.QUICK if args.quick else common.TimingConfig(min_repeat_ms=300, repeat=15)
    target = tvm_fuse.host_target()
    impls = IMPLS[:2] if args.no_peers else IMPLS
    note = common.peers_available()["onnxruntime"]
    if note and "onnxruntime" in impls:
        print(f"note: peer skipped: {note}")
    if args.by_conv and (note or "onnxruntime" not in impls):
        print("note: --by-conv compares with ONNX Runtime, which this run does not time: skipped")
    common.warm_up_tvm(target)
    records = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            print(f"model {name}", flush=True)
            records.append(bench_model(name, target, cfg, folder, impls, args.by_conv))
    print_report(records)
    for rec in records:
        if "by_conv" in rec:
            conv_compare.print_by_conv(rec["model"], rec["by_conv"])
    payload = {"machine": common.machine_info(), "timing": asdict(cfg), "models": records}
    payload["ok"] = all(rec["ok"] for rec in records)
    return common.finish(payload, common.json_path(args))


if __name__ == "__main__":
    sys.exit(main())
