"""The README's main job: the seed's worked example, taken through the pipeline step by step.

``[1,64,56,56] NCHW -> conv 3x3 stride 2 pad 1 (128) -> BatchNorm -> ReLU``. It prints the Relay
IR before and after each pass, the fused kernel's task description, the layout_transforms left,
the intermediate storage the graph executor allocates with and without tvm_fuse, and the result
checked against stock TVM. Run it as ``tvm-fuse demo`` or ``python -m tvm_fuse demo``.
"""

from __future__ import annotations

import time

from tvm import relay

from . import examples, testing
from .memory import graph_storage
from .passes.layout import count_layout_transforms
from .pipeline import bind_params, build, describe, passes
from .target import host_target

TOLERANCE = testing.MODEL_RTOL  # max abs error <= 1e-4 * max |reference|


def _section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 76 - len(title)))


def _show_passes(mod, params, target):
    """Run the pipeline pass by pass, printing the IR after each; return the final module."""
    mod = relay.transform.InferType()(bind_params(mod, params))
    _section("Relay IR before tvm_fuse (params bound)")
    print(mod["main"])
    for step in passes(target):
        mod = relay.transform.InferType()(step(mod))
        _section(f"after {step.info.name}")
        print(mod["main"])
    return mod


def _show_storage(libs: dict) -> None:
    """The tensors each build's kernels write (not graph outputs) and the storage behind them."""
    _section("memory: the graph executor's intermediate tensors and storage")
    for label, lib in libs.items():
        storage = graph_storage(lib.get_graph_json(), lib.get_params().keys())
        tensors = storage.intermediates()
        print(
            f"{label}: {len(tensors)} intermediate tensors, "
            f"{sum(t.nbytes for t in tensors):,} bytes before reuse; "
            f"storage allocated for intermediates + output: {storage.activation_bytes:,} bytes"
        )
        for tensor in tensors:
            print(f"    {tensor.name:<58} {str(tensor.shape):<20} {tensor.nbytes:>9,} B")


def main() -> int:
    """Print the demo; return 0 when tvm_fuse matches stock TVM, 1 otherwise."""
    target = host_target()
    print(f"target: {target}")
    mod, params = examples.seed_example()
    optimized = _show_passes(mod, params, target)

    _section("task description handed to the kernel")
    for spec in describe(optimized):
        print(spec)
    _section("layout")
    print(f"layout_transform ops left: {count_layout_transforms(optimized)} (graph entry and exit)")

    start = time.perf_counter()
    fused_lib = build(mod, params, target)
    fused_seconds = time.perf_counter() - start
    start = time.perf_counter()
    stock_lib = testing.build_stock(mod, params, target)
    stock_seconds = time.perf_counter() - start
    unfused_lib = testing.build_stock(mod, params, target, opt_level=0)
    _show_storage(
        {
            "unfused (stock, opt_level 0: one kernel per op)": unfused_lib,
            "stock relay.build (opt_level 3)": stock_lib,
            "tvm_fuse.build": fused_lib,
        }
    )

    _section("result against stock TVM")
    inputs = examples.random_inputs(mod, params)
    (got,), (ref,) = testing.run(fused_lib, inputs), testing.run(stock_lib, inputs)
    error = testing.relative_error(got, ref)
    verdict = "OK" if error <= TOLERANCE else "MISMATCH"
    print(f"build time: tvm_fuse {fused_seconds:.2f} s, stock {stock_seconds:.2f} s")
    print(f"output {got.shape}: max |tvm_fuse - stock| / max |stock| = {error:.2e}  {verdict}")
    return 0 if verdict == "OK" else 1
