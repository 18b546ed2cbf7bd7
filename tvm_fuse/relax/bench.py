"""Time the Relax backend against stock Relax on ONNX models (run in the Relax venv).

    python -m tvm_fuse.relax.bench [--models block resnet18 layer:l1 ...] [--rounds 3] [--stock]

Each model is written by ``tvm_fuse.onnx_example`` (``block``: the residual block at 64 channels
on 56x56; ``resnet18``: ResNet-18 at 224x224, BatchNorm kept; ``layer:NAME``: a conv -> BN ->
ReLU of the layer table, ``LAYERS``), imported with ``from_onnx``,
built by ``tvm_fuse.relax.build`` and, with ``--stock``, by ``tvm.compile`` of the imported module
(Relax's default pipeline: its convs are unscheduled loop nests). The runs are interleaved
(``rounds`` rounds of each); the median of each is printed in ms with the load average. Machines
are shared and noisy: compare ratios within one run. Speed is never asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from .. import onnx_example
from . import api, compat

#: The layer table of ``benchmarks/bench_layers.py`` (name: Cin, Co, size, kernel, stride, pad),
#: each as an ONNX conv -> BatchNorm -> ReLU.
LAYERS = {
    "stem": (3, 64, 224, 7, 2, 3),
    "l1": (64, 64, 56, 3, 1, 1),
    "seed": (64, 128, 56, 3, 2, 1),
    "l2": (128, 128, 28, 3, 1, 1),
    "l3": (256, 256, 14, 3, 1, 1),
    "l4": (512, 512, 7, 3, 1, 1),
    "down": (64, 128, 56, 1, 2, 0),
}


def layer_model(name):
    cin, cout, size, kernel, stride, pad = LAYERS[name]
    return lambda path: onnx_example.conv_bn_act(
        path, (1, cin, size, size), cout, kernel, stride, pad
    )


MODELS = {
    "block": lambda path: onnx_example.residual_block(path, cin=64, channels=64, size=56),
    "resnet18": onnx_example.resnet18,
    **{f"layer:{name}": layer_model(name) for name in LAYERS},
}


def _runner(exe, x):
    vm = relax.VirtualMachine(exe, tvm.cpu())
    data = tvm.runtime.tensor(x)
    vm["main"](data)  # warm up

    def once():
        start = time.perf_counter()
        vm["main"](data)
        return (time.perf_counter() - start) * 1e3

    return once


def bench(model: str, rounds: int, stock: bool, folder: Path) -> dict:
    path = MODELS[model](folder / f"{model.replace(':', '_')}.onnx")
    mod = from_onnx(onnx.load(path), keep_params_in_input=False)
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    x = np.random.default_rng(0).standard_normal([d.dim_value for d in dims]).astype("float32")
    target = compat.host_target()
    start = time.perf_counter()
    runners = {"tvm_fuse.relax": _runner(api.build(mod, target=target), x)}
    build_s = time.perf_counter() - start
    if stock:
        runners["stock relax"] = _runner(tvm.compile(mod, target=target), x)
    times = {name: [] for name in runners}
    for _ in range(rounds):
        for name, once in runners.items():
            times[name].append(once())
    return {"build_s": build_s, **{n: statistics.median(t) for n, t in times.items()}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--models", nargs="+", default=["block", "resnet18"], choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stock", action="store_true", help="also time stock Relax")
    args = parser.parse_args(argv)
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    threads = os.environ.get("TVM_NUM_THREADS", "all")
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            result = bench(model, args.rounds, args.stock, Path(folder))
            load = os.getloadavg()[0]
            times = ", ".join(f"{k} {v:.2f} ms" for k, v in result.items() if k != "build_s")
            print(
                f"{model}: {times} (build {result['build_s']:.1f} s; {cpu}, "
                f"TVM_NUM_THREADS={threads}, load {load:.2f})"
            )


if __name__ == "__main__":
    main()
