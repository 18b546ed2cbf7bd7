"""Per-layer benchmark: conv + BN + ReLU, batch 1, fp32, ``common.THREADS`` threads.

Each layer is an NCHW Relay graph ``conv2d -> batch_norm -> relu`` with seeded random weights and BN
statistics, timed side by side in one run as: ``tvm_fuse.build`` (the row names the algorithm it
chose); on the 3x3 layers (stride 1 or 2) also ``tvm_fuse.build(..., algorithm="direct")``; stock
``relay.build`` at opt_level 3 (NCHWc x86 schedules); stock TVM after ``ConvertLayout`` to NHWC;
PyTorch jit (oneDNN) and ONNX Runtime on the equivalent ``Conv2d + BatchNorm2d + ReLU``.
Every output is checked against stock TVM's and its error measured against a float64 NumPy
reference. GFLOP/s and % of the FMA peak come with each time. The FMA peak's microkernel
(``fma_peak``) is timed in the same rounds as the implementations: ``% peak`` is the median over
rounds of each run's GFLOP/s as % of the peak's in that round, so that a neighbour on a shared
machine, who takes a share of the FMA units that changes from minute to minute, lowers both
alike (JSON ``pct_peak_round``; ``pct_peak``: the median run against the best peak of the run).
``best run``: the best run against the best peak, what the code can do.
tvm_fuse's rows also time its fused conv kernel alone, in the same rounds (``kernel ms``,
``kernel %`` of the peak in the round; TVM's debug executor): the layer less the transposes between
the NCHW graph and the NHWC kernel, which a whole model pays once, not per conv.

The table holds ResNet's layers (stem, the 3x3 stages l1-l4, the strided seed and down
convs), ResNet-50 bottleneck 1x1 convs (``r50_*``) and MobileNet-v2-style layers (``mb_*``:
1x1 expansion and projection, a 3x3 depthwise conv, which tvm_fuse runs with its depthwise
kernel).

    tvm-fuse bench layers [--layers l1,seed] [--quick] [--results DIR] [--json PATH] [--no-peers]
    python -m tvm_fuse.bench.bench_layers ...  (the same)

``--quick`` times few short repeats of the layers ``QUICK_LAYERS`` (unless ``--layers`` names
others) without stock TVM's NHWC build and the forced direct kernel, to finish within a minute
on two cores. ``--mcpu CPU`` builds the TVM implementations, and the FMA peak's microkernel, for
another LLVM CPU than this one (the peers run their own code): ``--mcpu znver3`` on a Zen 4
measures the AVX2 kernels (8 lanes, 16 registers, their own tile plans) on a machine whose 256-
and 512-bit FMA throughput is the same.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from tvm_fuse.bench import common, fma_peak, peers  # noqa: E402  (common first: thread env)
from tvm_fuse.bench.layer_table import LAYERS, Layer  # noqa: E402

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relay  # noqa: E402
from tvm.topi.testing import conv2d_nchw_python  # noqa: E402

import tvm_fuse  # noqa: E402
from tvm_fuse.op import OP_NAME  # noqa: E402
from tvm_fuse.errors import UserError  # noqa: E402
from tvm_fuse.target import as_target  # noqa: E402

BN_EPS = 1e-5
PEERS = ("pytorch", "onnxruntime")
IMPLS = ("tvm_fuse", "tvm_fuse_direct", "tvm_nchwc", "tvm_nhwc") + PEERS


#: A ``--quick`` run: a stride-1 3x3 and the strided seed layer, without the slowest builds.
QUICK_LAYERS = ("l2", "seed")
SLOW = ("tvm_nhwc", "tvm_fuse_direct")


# -- the layer in each framework -----------------------------------------------------------
def layer_arrays(layer: Layer, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded input, conv weight (OIHW) and BN statistics of ``layer``."""
    rng = np.random.default_rng(seed)
    co = layer.cout
    fan_in = layer.cin // layer.groups * layer.kernel**2
    shape = (co, layer.cin // layer.groups, layer.kernel, layer.kernel)
    arrays = {
        "data": rng.standard_normal(layer.data_shape),
        "weight": rng.standard_normal(shape) / np.sqrt(fan_in),
        "gamma": rng.uniform(0.5, 1.5, co),
        "beta": rng.normal(0.0, 0.1, co),
        "mean": rng.normal(0.0, 0.1, co),
        "var": rng.uniform(0.5, 1.5, co),
    }
    return {name: np.ascontiguousarray(a, dtype="float32") for name, a in arrays.items()}


def relay_layer(layer: Layer, arrays: dict[str, np.ndarray]) -> tuple[tvm.IRModule, dict]:
    """The NCHW Relay graph conv2d -> batch_norm -> relu and its params."""
    names = ("weight", "gamma", "beta", "mean", "var")
    v = {n: relay.var(n, shape=arrays[n].shape, dtype="float32") for n in ("data",) + names}
    conv = relay.nn.conv2d(
        v["data"],
        v["weight"],
        strides=(layer.stride, layer.stride),
        padding=(layer.pad, layer.pad),
        channels=layer.cout,
        kernel_size=(layer.kernel, layer.kernel),
        groups=layer.groups,
    )
    bn = relay.nn.batch_norm(conv, v["gamma"], v["beta"], v["mean"], v["var"], epsilon=BN_EPS)
    out = relay.nn.relu(bn[0])
    mod = tvm.IRModule.from_expr(relay.Function(list(v.values()), out))
    params = {n: tvm.nd.array(arrays[n]) for n in names}
    return relay.transform.InferType()(mod), params


def torch_layer(layer: Layer, arrays: dict[str, np.ndarray]):
    """``Conv2d(bias=False) + BatchNorm2d + ReLU`` holding the same weights, in eval mode."""
    import torch  # pylint: disable=import-outside-toplevel

    conv = torch.nn.Conv2d(
        layer.cin, layer.cout, layer.kernel, layer.stride, layer.pad, groups=layer.groups, bias=False
    )
    bn = torch.nn.BatchNorm2d(layer.cout, eps=BN_EPS)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(arrays["weight"]))
        bn.weight.copy_(torch.from_numpy(arrays["gamma"]))
        bn.bias.copy_(torch.from_numpy(arrays["beta"]))
        bn.running_mean.copy_(torch.from_numpy(arrays["mean"]))
        bn.running_var.copy_(torch.from_numpy(arrays["var"]))
    return torch.nn.Sequential(conv, bn, torch.nn.ReLU()).eval()


def reference_f64(layer: Layer, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """conv -> BN -> ReLU of the float32 inputs, computed by NumPy in float64."""
    a = {name: value.astype("float64") for name, value in arrays.items()}
    conv = conv2d_nchw_python(a["data"], a["weight"], layer.stride, layer.pad, layer.groups)
    scale = a["gamma"] / np.sqrt(a["var"] + BN_EPS)
    shift = a["beta"] - a["mean"] * scale
    return np.maximum(conv * scale[:, None, None] + shift[:, None, None], 0)


# -- one layer, every implementation -------------------------------------------------------
def bench_layer(layer: Layer, target, cfg: common.TimingConfig, impls=IMPLS, peak=None) -> dict:
    """Time the implementations ``impls`` on ``layer``: name -> ``common.Result``; ``peak``
    (``fma_peak.PeakRunner``) timed in the same rounds."""
    arrays = layer_arrays(layer)
    mod, params = relay_layer(layer, arrays)
    if not layer.winograd_applies:  # the direct kernel is what tvm_fuse runs anyway
        impls = [name for name in impls if name != "tvm_fuse_direct"]
    preps = peers.implementations(
        mod, params, arrays["data"], target, lambda: torch_layer(layer, arrays), impls
    )
    exact = reference_f64(layer, arrays)
    kernels = {name: fused_conv_kernel for name in ("tvm_fuse", "tvm_fuse_direct")}
    return common.run_case(
        preps, reference="tvm_nchwc", cfg=cfg, exact=exact, kernels=kernels, peak=peak
    )


def fused_conv_kernel(runner: common.TvmRunner) -> common.KernelRunner:
    """The fused conv kernel of tvm_fuse's build of a layer, timed alone: the layer less the
    transposes between the NCHW graph and the NHWC kernel, which a model pays once."""
    return common.KernelRunner(runner, FUSED_KERNEL)


#: What the graph executor's name of a tvm_fuse kernel holds: the fused op's name.
FUSED_KERNEL = OP_NAME.replace(".", "_")


def layer_record(layer: Layer, results: dict[str, common.Result], peak: float, target) -> dict:
    record = common.case_record(results, ("tvm_nchwc", "tvm_nhwc"), layer.gflop, peak)
    mod, params = relay_layer(layer, layer_arrays(layer))
    algorithm = common.algorithms_chosen(mod, params, target)
    return {"layer": asdict(layer), "gflop": layer.gflop, "algorithm": algorithm, **record}


# -- report --------------------------------------------------------------------------------
def print_report(records: list[dict], peak: dict) -> None:
    rows = []
    for rec in records:
        for name, res in rec["results"].items():
            status = common.status(res)
            rows.append(
                [rec["layer"]["name"], name, res["ms"], res.get("gflops")]
                + [res.get("pct_peak_round"), res.get("pct_peak_best")]
                + [res.get("kernel_ms"), res.get("kernel_pct_peak_round")]
                + [res.get("err_f64"), res["build_s"], status]
            )
    headers = ["layer", "impl", "ms", "GFLOP/s", "% peak", "best run", "kernel ms", "kernel %"]
    common.print_table(
        headers + ["err/f64", "build s", "check"],
        rows,
        title=f"\nconv+BN+ReLU, batch 1, fp32, {common.THREADS} threads; "
        f"peak {peak['gflops_all']:.1f} GFLOP/s",
    )
    summary = [
        [rec["layer"]["name"], rec["gflop"], rec["algorithm"], rec["best_peer"]]
        + list(rec["ratios"].values())
        for rec in records
    ]
    common.print_table(
        ["layer", "GFLOP", "tvm_fuse runs", "best peer", "fuse/best", "fuse/NCHWc", "fuse/NHWC", "build fuse/NCHWc"],
        summary,
        title="\nratios of tvm_fuse's time (< 1: tvm_fuse faster)",
    )


def run(
    layers: list[Layer],
    cfg: common.TimingConfig,
    json_path=None,
    impls=IMPLS,
    quick_peak: bool = False,
    warm_up: bool = True,
    target=None,
) -> dict:
    """Benchmark ``impls`` on ``layers``; print the tables, write JSON if ``json_path``.

    Returns the JSON payload. ``warm_up`` does one throw-away build first, so that the first
    layer's build time does not include TVM's start-up. The FMA peak is measured before and
    after the layers and the better figure kept (other load on the machine only lowers it).
    ``target``: what the TVM implementations are built for (default: this machine's CPU).
    """
    target = target or tvm_fuse.host_target()
    common.print_peer_notes(impls)
    before = fma_peak.fma_peak(target, quick=quick_peak)
    in_rounds = fma_peak.PeakRunner(target, chunks=common.THREADS)
    if warm_up:
        common.warm_up_tvm(target)
    results = []
    for layer in layers:
        print(
            f"layer {layer.name}: {layer.cin}->{layer.cout} channels, {layer.hw}x{layer.hw}, "
            f"{layer.kernel}x{layer.kernel} stride {layer.stride} pad {layer.pad}",
            flush=True,
        )
        results.append(bench_layer(layer, target, cfg, impls, in_rounds))
    peak = fma_peak.best_peak(before, fma_peak.fma_peak(target, quick=quick_peak))
    fma_peak.print_peak(peak)
    records = [layer_record(l, r, peak["gflops_all"], target) for l, r in zip(layers, results)]
    print_report(records, peak)
    payload = {
        "machine": common.machine_info(),
        "built_for": str(target),
        "timing": asdict(cfg),
        "fma_peak": peak,
        "layers": records,
        "ok": all(rec["ok"] for rec in records),
    }
    common.finish(payload, json_path)
    return payload


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", help=f"comma-separated names of {', '.join(LAYERS)} (all)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"few short repeats of {','.join(QUICK_LAYERS)}, no {','.join(SLOW)}",
    )
    parser.add_argument("--no-peers", action="store_true", help="TVM implementations only")
    parser.add_argument(
        "--mcpu", metavar="CPU", help="build for this LLVM CPU, e.g. znver3 (default: this one)"
    )
    common.add_output_options(parser, "layers")
    args = parser.parse_args(argv)
    target = target_for(parser, args.mcpu)
    default = QUICK_LAYERS if args.quick else LAYERS
    names = common.select(parser, args.layers or ",".join(default), LAYERS)
    cfg = common.QUICK if args.quick else common.FULL
    impls = [i for i in IMPLS if not (args.no_peers and i in PEERS or args.quick and i in SLOW)]
    layers = [LAYERS[name] for name in names]
    payload = run(layers, cfg, common.json_path(args), impls, args.quick, target=target)
    return 0 if payload["ok"] else 1


def target_for(parser, mcpu: str | None):
    """This machine's target, with ``-mcpu=mcpu`` when given (an unknown CPU: one line)."""
    if mcpu is None:
        return None
    cores = tvm_fuse.host_target().attrs.get("num-cores", 1)
    try:
        return as_target(f"llvm -mcpu={mcpu} -num-cores={cores}")
    except UserError:
        here = tvm.target.codegen.llvm_get_system_cpu()
        parser.error(f"--mcpu {mcpu}: LLVM does not know this CPU; e.g. znver3 (this one: {here})")


if __name__ == "__main__":
    sys.exit(main())
