"""Winograd F(2x2) and F(4x4) against the direct kernel on the 3x3 layers.

Each layer of ``bench_layers`` that Winograd applies to (l1, l2, l3, l4: 3x3, stride 1; seed:
3x3, stride 2, the polyphase form) is run
as conv + bias + ReLU, batch 1, fp32, NHWC, BN folded into the weight and bias in float64: the
direct kernel (``conv2d_nhwc_fused.x86``, the one ``tvm_fuse.build`` picks for these layers
today, on its compile-time packed weight) and the Winograd kernel (``conv2d_nhwc_winograd.x86``
on its compile-time transformed weight), each with its analytic default tiles, both as TE
kernels called directly (no graph executor). Timing is interleaved round-robin
(``common.time_interleaved``); GFLOP/s counts the direct conv's FLOPs for every kernel (a
GFLOP/s-equivalent), and each output's error is measured against a float64 NumPy reference.

    python -m tvm_fuse.bench.bench_winograd [--layers l1,l2] [--quick] [--results DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from tvm_fuse.bench import common  # noqa: E402  (first: thread environment)
from tvm_fuse.bench.bench_layers import BN_EPS, layer_arrays  # noqa: E402
from tvm_fuse.bench.layer_table import LAYERS, Layer  # noqa: E402

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import te  # noqa: E402
from tvm.topi.testing import conv2d_nhwc_python  # noqa: E402

import tvm_fuse  # noqa: E402
from tvm_fuse import strategy  # noqa: E402
from tvm_fuse.schedules import conv2d_nhwc_fused, packing, winograd, winograd_weights  # noqa: E402
from tvm_fuse.spec import KernelSpec  # noqa: E402

#: The layers of the layer benchmark Winograd applies to (3x3, stride 1 or 2, groups 1).
WINOGRAD_LAYERS = [name for name, layer in LAYERS.items() if layer.winograd_applies]
KERNELS = ("direct", "winograd_f2", "winograd_f4")
REFERENCE = "float64"


def folded_nhwc(layer: Layer) -> dict[str, np.ndarray]:
    """The layer's input (NHWC), BN-folded weight (HWIO) and bias, float32 (folded in float64)."""
    arrays = {k: v.astype("float64") for k, v in layer_arrays(layer).items()}
    scale = arrays["gamma"] / np.sqrt(arrays["var"] + BN_EPS)
    weight = arrays["weight"] * scale[:, None, None, None]
    bias = arrays["beta"] - arrays["mean"] * scale
    return {
        "data": np.ascontiguousarray(arrays["data"].transpose(0, 2, 3, 1), "float32"),
        "weight": np.ascontiguousarray(weight.transpose(2, 3, 1, 0), "float32"),
        "bias": bias.astype("float32"),
    }


def reference(layer: Layer, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """relu(conv + bias) of the float32 inputs in float64."""
    pad = (layer.pad,) * 4
    data = inputs["data"].astype("float64")
    conv = conv2d_nhwc_python(data, inputs["weight"], layer.stride, pad)
    return np.maximum(conv + inputs["bias"], 0)


class KernelRunner(common.Runner):
    """A built TE kernel called on fixed arguments; timed by TVM's ``time_evaluator``."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def output(self) -> np.ndarray:
        self.func(*self.args)
        return self.args[-1].numpy()

    def timed(self, number: int) -> float:
        evaluator = self.func.time_evaluator(self.func.entry_name, tvm.cpu(), number=number)
        return evaluator(*self.args).mean * 1e3


def kernel_runner(kernel: str, layer: Layer, inputs: dict[str, np.ndarray], target):
    """Build ``kernel`` for ``layer`` (its weight transformed as the graph half would)."""
    lanes = strategy.simd_lanes(target)
    pad = (layer.pad,) * 4
    strides = (layer.stride,) * 2
    spec = KernelSpec.conv(inputs["data"].shape, inputs["weight"].shape, strides, pad)
    spec = spec.with_epilogue(bias=True, activation="relu")
    if kernel == "direct":
        module, weight = conv2d_nhwc_fused, packing.pack_hwio(inputs["weight"], lanes)
        spec = dataclasses.replace(spec, weight=packing.packed_weight(spec, lanes))
    else:
        m = int(kernel[-1])
        weight = winograd_weights.transform_hwio(inputs["weight"], m, lanes, layer.stride)
        module = winograd
        spec = winograd_weights.winograd_spec(spec, m, lanes)
    arrays = [inputs["data"], weight, inputs["bias"]]
    holders = [te.placeholder(a.shape, name=f"arg{i}") for i, a in enumerate(arrays)]
    with target:
        out = module.compute(spec, *holders, None)
        func = tvm.build(module.schedule([out]), holders + [out], target)
    args = [tvm.nd.array(a) for a in arrays] + [tvm.nd.empty(out.shape, "float32")]
    return KernelRunner(func, args)


def bench_layer(layer: Layer, target, cfg: common.TimingConfig, kernels=KERNELS) -> dict:
    inputs = folded_nhwc(layer)
    want = reference(layer, inputs)
    preps = {REFERENCE: lambda: common.CallableRunner(lambda: want)}
    for kernel in kernels:
        preps[kernel] = lambda kernel=kernel: kernel_runner(kernel, layer, inputs, target)
    results = common.run_case(preps, reference=REFERENCE, cfg=cfg)
    del results[REFERENCE]
    return results


def layer_rows(layer: Layer, results: dict[str, common.Result]) -> list[list]:
    direct = results.get("direct")
    rows = []
    for name, res in results.items():
        err = res.check["max_abs_err"] / res.check["max_abs_ref"] if res.check else None
        speedup = common.ratio(direct.ms, res.ms) if direct else None
        gflops = layer.gflop / (res.ms * 1e-3) if res.ms else None
        rows.append(
            [layer.name, name, res.ms, gflops, speedup, f"{err:.1e}" if err else None, res.build_s]
        )
    return rows


def run(layers: list[Layer], cfg: common.TimingConfig, json_path=None, kernels=KERNELS) -> dict:
    target = tvm_fuse.host_target()
    records, rows, ok = [], [], True
    for layer in layers:
        print(f"layer {layer.name}: {layer}")
        results = bench_layer(layer, target, cfg, kernels)
        ok = ok and common.all_checks_ok(results)
        rows += layer_rows(layer, results)
        records.append(
            {"layer": vars(layer), **{k: r.to_dict(layer.gflop) for k, r in results.items()}}
        )
    common.print_table(
        ["layer", "kernel", "ms", "GFLOP/s eq.", "x direct", "err/max|ref|", "build s"],
        rows,
        title=f"\nconv+bias+ReLU, batch 1, fp32, {common.THREADS} threads, "
        "interleaved medians; error against float64",
    )
    payload = {"machine": common.machine_info(), "timing": vars(cfg), "layers": records, "ok": ok}
    common.finish(payload, json_path)
    return payload


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(WINOGRAD_LAYERS), help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="few short repeats")
    common.add_output_options(parser, "winograd")
    args = parser.parse_args(argv)
    layers = [LAYERS[name] for name in common.select(parser, args.layers, WINOGRAD_LAYERS)]
    payload = run(layers, common.QUICK if args.quick else common.FULL, common.json_path(args))
    return 0 if payload["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
