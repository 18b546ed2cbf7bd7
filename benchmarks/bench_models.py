"""Whole-model benchmark: ResNet-18/50, batch 1, fp32, ``common.THREADS`` threads.

The networks are ``tvm.relay.testing.resnet.get_workload`` (pre-activation ResNet v2 with a BN
on the input) with seeded random BN statistics and biases (``tvm_fuse.models.zoo_workload``), so
that BN folding is really exercised. They
run as ``tvm_fuse.build`` and stock ``relay.build`` at opt_level 3; PyTorch jit and ONNX Runtime
run ``TorchResNet``, a PyTorch network that mirrors relay.testing's structure layer by layer
and holds the very same weights, so all outputs are checked against stock TVM's. Each output's
error is measured against the same network computed in float64 (relay.testing's float64
workload with the same parameters, built by stock TVM), and the report counts the algorithms
tvm_fuse chose for the convs.

    tvm-fuse bench models [--models resnet-18,resnet-50] [--quick] [--results DIR] [--json PATH]
    python -m tvm_fuse.bench.bench_models ...  (the same)

``--quick`` times few short repeats of ResNet-18 only (unless ``--models`` names others),
without the float64 reference (its error column stays empty) and, unless ``--no-peers``,
without stock TVM, the slowest build (outputs are then checked against ONNX Runtime's), so that
``tvm-fuse bench --quick`` stays within two minutes.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from dataclasses import asdict

# common first: it sets the threads' environment
from tvm_fuse.bench import common, fma_peak, kernel_profile, peers  # noqa: E402

import numpy as np  # noqa: E402
from tvm.relay import testing  # noqa: E402
import tvm_fuse  # noqa: E402
from tvm_fuse import models  # noqa: E402
from tvm_fuse.memory.liveness import tensor_bytes  # noqa: E402
from tvm_fuse.memory.weights import fallback_bytes  # noqa: E402

MODELS = {"resnet-18": 18, "resnet-50": 50}
QUICK_MODELS = ("resnet-18",)
IMPLS = ("tvm_fuse", "tvm_nchwc", "pytorch", "onnxruntime")
BN_EPS = 2e-5  # relay.testing.resnet's epsilon
INPUT_SHAPE = (1, 3, 224, 224)


# -- the equivalent PyTorch network --------------------------------------------------------
def torch_resnet(num_layers: int, params: dict):
    """``TorchResNet`` for ``num_layers`` with ``params`` (relay.testing names) loaded."""
    import torch  # pylint: disable=import-outside-toplevel

    nn = torch.nn

    def conv(cin, cout, k, stride, pad):
        return nn.Conv2d(cin, cout, k, stride, pad, bias=False)

    class Unit(nn.Module):
        """relay.testing's residual_unit: BN-ReLU first, shortcut conv on the activation."""

        def __init__(self, cin, filters, stride, dim_match, bottle_neck):
            super().__init__()
            mid = filters // 4 if bottle_neck else filters
            self.bn1 = nn.BatchNorm2d(cin, eps=BN_EPS)
            if bottle_neck:
                convs = [conv(cin, mid, 1, stride, 0), conv(mid, mid, 3, 1, 1)]
                convs.append(conv(mid, filters, 1, 1, 0))
            else:
                convs = [conv(cin, mid, 3, stride, 1), conv(mid, filters, 3, 1, 1)]
            layers = []
            for i, c in enumerate(convs):
                if i:
                    layers += [nn.BatchNorm2d(c.in_channels, eps=BN_EPS), nn.ReLU()]
                layers.append(c)
            self.body = nn.Sequential(*layers)
            self.dim_match = dim_match
            self.sc = nn.Identity() if dim_match else conv(cin, filters, 1, stride, 0)

        def forward(self, x):
            act1 = torch.relu(self.bn1(x))
            shortcut = x if self.dim_match else self.sc(act1)
            return self.body(act1) + shortcut

        def named_for_relay(self, prefix):
            convs = [m for m in self.body if isinstance(m, nn.Conv2d)]
            bns = [self.bn1] + [m for m in self.body if isinstance(m, nn.BatchNorm2d)]
            named = {f"{prefix}_conv{i + 1}": c for i, c in enumerate(convs)}
            named.update({f"{prefix}_bn{i + 1}": b for i, b in enumerate(bns)})
            if not self.dim_match:
                named[f"{prefix}_sc"] = self.sc
            return named

    class TorchResNet(nn.Module):
        """relay.testing.resnet.resnet for 224x224 inputs, in PyTorch."""

        def __init__(self, units, filters, bottle_neck, classes=1000):
            super().__init__()
            self.bn_data = nn.BatchNorm2d(3, eps=BN_EPS, affine=True)  # scale=False: gamma=1
            self.conv0 = conv(3, filters[0], 7, 2, 3)
            self.bn0 = nn.BatchNorm2d(filters[0], eps=BN_EPS)
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.units = units
            stages, cin = [], filters[0]
            for i, count in enumerate(units):
                for j in range(count):
                    stride = 1 if i == 0 or j else 2
                    stages.append(Unit(cin, filters[i + 1], stride, j > 0, bottle_neck))
                    cin = filters[i + 1]
            self.stages = nn.Sequential(*stages)
            self.bn1 = nn.BatchNorm2d(cin, eps=BN_EPS)
            self.fc1 = nn.Linear(cin, classes)

        def named_for_relay(self):
            """relay.testing's name prefix -> the module holding that layer's params."""
            named = {"bn_data": self.bn_data, "conv0": self.conv0, "bn0": self.bn0}
            named.update({"bn1": self.bn1, "fc1": self.fc1})
            stages = iter(self.stages)
            for i, count in enumerate(self.units):
                for j in range(count):
                    named.update(next(stages).named_for_relay(f"stage{i + 1}_unit{j + 1}"))
            return named

        def forward(self, x):
            x = self.pool(torch.relu(self.bn0(self.conv0(self.bn_data(x)))))
            x = torch.relu(self.bn1(self.stages(x)))
            x = torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1)
            return torch.softmax(self.fc1(x), dim=1)

    units = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[num_layers]
    if num_layers >= 50:
        net = TorchResNet(units, [64, 256, 512, 1024, 2048], True)
    else:
        net = TorchResNet(units, [64, 64, 128, 256, 512], False)
    load_relay_params(net.named_for_relay(), params)
    return net.eval()


#: relay.testing parameter suffix -> attribute of the PyTorch module holding it.
TORCH_ATTRS = {
    "_weight": "weight",
    "_bias": "bias",
    "_gamma": "weight",
    "_beta": "bias",
    "_moving_mean": "running_mean",
    "_moving_var": "running_var",
}


def load_relay_params(modules: dict, params: dict) -> None:
    """Copy every relay.testing param into ``modules[prefix].<attr>``; all must be used."""
    import torch  # pylint: disable=import-outside-toplevel

    unused = set(params)
    with torch.no_grad():
        for prefix, module in modules.items():
            for suffix, attr in TORCH_ATTRS.items():
                name = prefix + suffix
                if name in params:
                    getattr(module, attr).copy_(torch.from_numpy(params[name].numpy()))
                    unused.discard(name)
        modules["bn_data"].weight.fill_(1.0)  # relay.testing: bn_data has scale=False
    unused.discard("bn_data_gamma")
    if unused:
        raise ValueError(f"TorchResNet: relay params without a PyTorch home: {sorted(unused)}")


# -- one model -----------------------------------------------------------------------------
def fused_kernels(specs) -> dict:
    """How many fused kernels tvm_fuse makes (their ``KernelSpec``s), by op chain, epilogue
    and algorithm."""
    return {
        "count": len(specs),
        "by_ops": dict(collections.Counter(" + ".join(s.ops) for s in specs)),
        "by_epilogue": dict(collections.Counter(s.epilogue for s in specs)),
        "by_algorithm": dict(collections.Counter(s.algorithm_name for s in specs)),
    }


def reference_f64(num_layers: int, params: dict, data: np.ndarray, target) -> np.ndarray:
    """The network on ``data`` in float64: relay.testing's float64 ResNet with ``params``,
    built by stock TVM."""
    mod64, _ = testing.resnet.get_workload(num_layers=num_layers, dtype="float64")
    params64 = {name: value.numpy().astype("float64") for name, value in params.items()}
    lib = common.build_stock(mod64, params64, target)
    return common.TvmRunner(lib, {"data": data.astype("float64")}).output().astype("float64")


#: Rounds of ``profile``: in each, the FMA peak's microkernel and then every kernel, one by one.
PROFILE_ROUNDS = 3
#: Runs of the FMA peak's microkernel per round of ``profile`` (each well under a millisecond).
PEAK_RUNS = 20


def profile(mod, params, data, target, top: int, peak=None, specs=None, lib=None) -> dict:
    """tvm_fuse's kernels timed one by one by TVM's debug executor (weights warm in cache).

    ``kernels``: the ``top`` slowest, each with its node name, output shape, median ms over
    ``PROFILE_ROUNDS`` rounds (``runs_ms``: each round's) and share of the summed kernel time; a
    fused conv also with its algorithm and GFLOP (multiply-adds of the direct conv, counted
    twice, as for every algorithm) and, given the FMA peak's runner ``peak``
    (``fma_peak.PeakRunner``, timed at the start of every round), its % of the peak: the
    median over rounds of each round's time against that round's peak, as ``bench_layers``
    counts it (``peak_gflops_in_rounds``). ``by_algorithm``: every kernel's time summed by
    algorithm, its % against the rounds' median peak; ``kernel_sum_ms`` and ``weight_mb``, the
    built module's weights less the Winograd kernels' fallback taps, which a finite run never
    reads (``kernel_profile.profile``). ``specs``: the model's ``KernelSpec``s if already known;
    ``lib``: tvm_fuse's build of the model if already built (the one that was timed)."""
    if lib is None:
        lib = tvm_fuse.build(mod, params=params, target=target)
    graph_json = lib.get_graph_json()
    with tempfile.TemporaryDirectory() as tmp:
        runs, peaks = _kernel_rounds(common.debug_module(lib, {"data": data}, tmp), peak)
    if specs is None:
        specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params, target))
    weight_bytes = sum(tensor_bytes(v.shape, v.dtype) for v in lib.get_params().values())
    weight_bytes -= fallback_bytes(specs)
    kernels = []
    for i, node, out, spec in kernel_nodes(graph_json, specs):
        kernel = {"node": node["name"], "shape": out, "ms": statistics.median(runs[i])}
        kernel["runs_ms"] = runs_ms = runs[i]
        if spec is not None:
            kernel.update(algorithm=spec.algorithm_name, gflop=spec.flops / 1e9)
            kernel["pct_peak"] = kernel_profile.pct_in_rounds(kernel["gflop"], runs_ms, peaks)
        kernels.append(kernel)
    peak_gflops = statistics.median(peaks) if peaks else None
    prof = kernel_profile.profile(kernels, top, peak_gflops, weight_bytes)
    return prof | {"peak_gflops_in_rounds": peaks}


def _kernel_rounds(dbg, peak) -> tuple[list[list[float]], list[float] | None]:
    """Every graph node's time in each of ``PROFILE_ROUNDS`` rounds (ms; a node that is no
    kernel: 0), and the peak's GFLOP/s timed at the start of each round (None without ``peak``),
    each measured on idle CPUs (``common.settle``), as ``common.time_interleaved`` measures."""
    rounds, peaks = [], []
    for _ in range(PROFILE_ROUNDS):
        if peak is not None:
            common.settle()
            peaks.append(peak.gflops(peak.timed(PEAK_RUNS)))
        common.settle()
        rounds.append(dbg.run_individual(number=5, repeat=1, min_repeat_ms=50))
    runs = [[node[0] * 1e3 for node in by_round] for by_round in zip(*rounds)]
    return runs, peaks or None


def kernel_nodes(graph_json: str, specs) -> list[tuple[int, dict, list, object]]:
    """(node index, node, output shape, ``KernelSpec`` or None) of each kernel of a built
    module's graph, in execution order; the spec found among ``specs`` by the node's shapes
    (:func:`_specs_by_shapes`), None for a kernel that is no fused conv."""
    by_shapes = _specs_by_shapes(specs)
    graph = json.loads(graph_json)
    shapes, first_entry = graph["attrs"]["shape"][1], graph["node_row_ptr"]
    found = []
    for i, node in enumerate(graph["nodes"]):
        if node["op"] != "tvm_op":
            continue
        inputs = [shapes[first_entry[entry[0]] + entry[1]] for entry in node["inputs"]]
        out = shapes[first_entry[i]]
        found.append((i, node, out, by_shapes.get(_shape_key(inputs[:2], out))))
    return found


def _shape_key(inputs, out) -> tuple:
    return tuple(tuple(shape) for shape in (*inputs, out))


def _specs_by_shapes(specs) -> dict:
    """KernelSpecs by (data, packed weight, output) shapes: a graph node's first two inputs and
    its output. Specs that share the key do the same FLOPs, and the packed weight's shape tells
    a Winograd conv (alpha x alpha first) from a direct one."""
    return {_shape_key((s.data.shape, s.weight.shape), s.out.shape): s for s in specs}


def bench_model(
    name: str,
    target,
    cfg: common.TimingConfig,
    impls=IMPLS,
    top: int = 0,
    exact: bool = True,
    peak=None,
) -> dict:
    """Time ``impls`` on one model; ``top`` > 0 adds tvm_fuse's kernel profile (``profile``, its
    % of the FMA peak that ``peak`` times in its rounds) beside the whole model's time
    (``kernel_profile.whole_model``); ``exact`` measures every output's error against the
    float64 network (one more build)."""
    num_layers = MODELS[name]
    mod, params = models.zoo_workload(name)  # relay.testing's, BN statistics redrawn
    data = np.random.default_rng(1).standard_normal(INPUT_SHAPE).astype("float32")
    built = {}
    preps = peers.implementations(
        mod, params, data, target, lambda: torch_resnet(num_layers, params), impls, built
    )
    reference = None
    if exact:
        print("  float64 reference: building ...", flush=True)
        reference = reference_f64(num_layers, params, data, target)
    checked_against = "tvm_nchwc" if "tvm_nchwc" in impls else "onnxruntime"
    results = common.run_case(preps, reference=checked_against, cfg=cfg, exact=reference)
    record = {"model": name, **common.case_record(results, ("tvm_nchwc", "onnxruntime"))}
    described = _or_error(
        "describe", lambda: tvm_fuse.describe(tvm_fuse.optimize(mod, params, target))
    )
    specs = described if isinstance(described, list) else None  # None: describe failed
    record["fused_kernels"] = described if specs is None else fused_kernels(specs)
    if top:
        end_to_end_ms = results["tvm_fuse"].ms

        def run_profile():  # describes the model itself when the step above failed
            lib = built.get("tvm_fuse")
            prof = profile(mod, params, data, target, top, peak, specs, lib)
            return kernel_profile.whole_model(prof, end_to_end_ms) if end_to_end_ms else prof

        record["profile_tvm_fuse"] = _or_error("profile", run_profile)
    return record


def _or_error(what: str, fn):
    try:
        return fn()
    except Exception as err:  # pylint: disable=broad-except  # reported, not fatal
        print(f"  !! {what} FAILED: {type(err).__name__}: {err}")
        return {"error": f"{type(err).__name__}: {err}"}


# -- report --------------------------------------------------------------------------------
def print_report(records: list[dict]) -> None:
    rows = []
    for rec in records:
        for name, res in rec["results"].items():
            status = common.status(res)
            row = [rec["model"], name, res["ms"], res["min_ms"], res.get("err_f64"), res["build_s"]]
            rows.append(row + [status])
    common.print_table(
        ["model", "impl", "median ms", "min ms", "err/f64", "compile s", "check"],
        rows,
        title=f"\nwhole models, batch 1, fp32, {common.THREADS} threads",
    )
    summary = []
    for rec in records:
        kernels = rec["fused_kernels"]
        epilogues = "; ".join(f"{n}x {e}" for e, n in kernels.get("by_epilogue", {}).items())
        algorithms = ", ".join(f"{n} {a}" for a, n in kernels.get("by_algorithm", {}).items())
        summary.append(
            [rec["model"], rec["best_peer"]]
            + list(rec["ratios"].values())
            + [kernels.get("count", "ERROR"), algorithms, epilogues]
        )
    common.print_table(
        ["model", "best peer", "fuse/best", "fuse/NCHWc", "fuse/ORT", "compile fuse/NCHWc"]
        + ["fused", "algorithms", "epilogues"],
        summary,
        title="\nratios of tvm_fuse's time (< 1: tvm_fuse faster); fused kernels",
    )
    for rec in records:
        prof = rec.get("profile_tvm_fuse") or {}
        if "kernels" in prof:
            print("\n" + kernel_profile.report(rec["model"], prof, "debug executor, warm"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated names of {', '.join(MODELS)} (all)")
    parser.add_argument("--quick", action="store_true", help="few short repeats of resnet-18")
    parser.add_argument("--no-peers", action="store_true", help="TVM implementations only")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also profile tvm_fuse's kernels: time and %% of the FMA peak by algorithm, "
        "and the N slowest (debug executor)",
    )
    common.add_output_options(parser, "models")
    args = parser.parse_args(argv)
    default = QUICK_MODELS if args.quick else MODELS
    names = common.select(parser, args.models or ",".join(default), MODELS)
    cfg = common.QUICK if args.quick else common.TimingConfig(min_repeat_ms=500, repeat=10)
    target = tvm_fuse.host_target()
    impls = IMPLS[:2] if args.no_peers else IMPLS
    if args.quick and not args.no_peers:
        impls = tuple(name for name in impls if name != "tvm_nchwc")
    common.print_peer_notes(impls)
    common.warm_up_tvm(target)
    peak = fma_peak.fma_peak(target, quick=args.quick) if args.profile else None
    if peak:
        fma_peak.print_peak(peak)
    peak_runner = fma_peak.PeakRunner(target, chunks=common.THREADS) if args.profile else None
    records = []
    for name in names:
        print(f"model {name}", flush=True)
        exact = not args.quick
        records.append(bench_model(name, target, cfg, impls, args.profile, exact, peak_runner))
    print_report(records)
    payload = {"machine": common.machine_info(), "timing": asdict(cfg), "models": records}
    if peak:
        payload["fma_peak"] = peak
    payload["ok"] = all(rec["ok"] for rec in records)
    return common.finish(payload, common.json_path(args))


if __name__ == "__main__":
    sys.exit(main())
