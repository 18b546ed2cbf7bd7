"""One backend of ``bench_backends``: builds an ONNX model with the installed TVM's backend, then
times it on request. Runs under either TVM stack (the Relay one, TVM 0.19, or the Relax one,
apache-tvm 0.27: ``tvm_fuse.backend.installed()`` says which), as a child process of
``bench_backends``, which runs one of each and makes them take turns.

    python -m tvm_fuse.bench.backend_worker MODEL.onnx INPUT.npy OUTPUT.npy

It writes the model's output for ``INPUT.npy`` to ``OUTPUT.npy`` and one JSON line
``{"backend", "cpu", "build_s"}``, then answers each line ``N`` read from stdin with
``{"ms": mean ms of N back-to-back runs}`` (TVM's ``time_evaluator``) until stdin closes.
JSON goes to the original stdout; anything TVM prints goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def _relay(path: str, x: np.ndarray):
    """Build with ``tvm_fuse.build`` (graph executor); return (run, time N runs)."""
    import tvm
    from tvm.contrib import graph_executor

    import tvm_fuse
    from tvm_fuse import user_inputs

    model = user_inputs.load_onnx(path)
    name = model.mod["main"].params[0].name_hint
    module = graph_executor.GraphModule(tvm_fuse.build(model.mod, model.params)["default"](tvm.cpu()))
    module.set_input(name, x)

    def run():
        module.run()
        return module.get_output(0).numpy()

    def timed(number):
        return module.module.time_evaluator("run", tvm.cpu(), number=number, repeat=1)().mean

    return run, timed


def _relax(path: str, x: np.ndarray):
    """Build with ``tvm_fuse.relax.build`` (Relax VM); return (run, time N runs)."""
    import tvm
    from tvm import relax

    import tvm_fuse.relax
    from tvm_fuse.relax import commands

    vm = relax.VirtualMachine(tvm_fuse.relax.build(commands.load(path)), tvm.cpu())
    data = tvm.runtime.tensor(x)

    def run():
        out = vm["main"](data)
        return (out if hasattr(out, "numpy") else out[0]).numpy()

    def timed(number):
        return vm.time_evaluator("main", tvm.cpu(), number=number, repeat=1)(data).mean

    return run, timed


def main(argv=None) -> int:
    model, input_path, output_path = argv or sys.argv[1:]
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # TVM's and tvm_fuse's own prints: away from the JSON channel
    sys.stdout = sys.stderr
    from tvm_fuse import backend

    import tvm

    x = np.load(input_path)
    start = time.perf_counter()
    run, timed = (_relay if backend.installed() == "relay" else _relax)(model, x)
    build_s = time.perf_counter() - start
    np.save(output_path, run())
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    print(json.dumps({"backend": backend.installed(), "cpu": cpu, "build_s": build_s}),
          file=answer, flush=True)
    for line in sys.stdin:
        print(json.dumps({"ms": timed(int(line)) * 1e3}), file=answer, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
