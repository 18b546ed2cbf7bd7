"""The README's main job: the seed's worked example, taken through the pipeline step by step.

``[1,64,56,56] NCHW -> conv 3x3 stride 2 pad 1 (128) -> BatchNorm -> ReLU``. It prints the Relay
IR before and after each pass, the fused kernel's task description, the layout_transforms left,
the intermediate storage the graph executor allocates with and without tvm_fuse, and the result
checked against stock TVM. Run it as ``tvm-fuse demo`` or ``python -m tvm_fuse demo``.
"""

from __future__ import annotations

import time

import tvm
from tvm import relay

from . import examples, testing
from .memory import plan_graph, plan_storage
from .passes.layout import count_layout_transforms
from .pipeline import bind_params, build, describe, passes
from .target import host_target

TOLERANCE = 1e-4  # docs/architecture.md: max abs error <= 1e-4 * max |reference|


def _section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 76 - len(title)))


def _show_passes(mod, params):
    """Run the pipeline pass by pass, printing the IR after each; return the final module."""
    mod = relay.transform.InferType()(bind_params(mod, params))
    _section("Relay IR before tvm_fuse (params bound)")
    print(mod["main"])
    for step in passes():
        mod = relay.transform.InferType()(step(mod))
        _section(f"after {step.info.name}")
        print(mod["main"])
    return mod


def _as_compiled(mod, target):
    """``mod`` after relay.build's AlterOpLayout, where the kernel chooses its weight layout."""
    with target, tvm.transform.PassContext(opt_level=3):
        return relay.transform.AlterOpLayout()(mod)


def _show_storage(libs: dict) -> None:
    """Each build's activation storage with TVM's plan and with tvm_fuse's (the one
    ``tvm_fuse.build`` gives the executor), read from the built graph JSONs."""
    _section("memory: the graph executor's activation storage (kernel outputs)")
    print(f"{'':<50}{'tensors':>8}{'TVM plan B':>13}{'tvm_fuse B':>13}{'lower bd B':>13}")
    for label, lib in libs.items():
        graph_json = lib.get_graph_json()
        applied = plan_storage(graph_json)
        live = plan_graph(graph_json)
        print(
            f"{label:<50}{len(live.buffers):>8}{applied.tvm_bytes:>13,}"
            f"{applied.allocated_bytes:>13,}{live.lower_bound_bytes:>13,}"
        )
    stock, fused = (plan_storage(lib.get_graph_json()) for lib in list(libs.values())[-2:])
    print(
        f"tvm_fuse.build allocates {fused.allocated_bytes:,} B where stock TVM allocates "
        f"{stock.tvm_bytes:,} B; tvm_fuse's plan saves {fused.saved_bytes:,} B of it."
    )
    if not fused.saved_bytes:
        print(
            "On a graph this short TVM's plan is already as small as sharing whole buffers gets; "
            "deeper graphs gain (python -m tvm_fuse.memory resnet-50)."
        )


def main() -> int:
    """Print the demo; return 0 when tvm_fuse matches stock TVM, 1 otherwise."""
    target = host_target()
    print(f"target: {target}")
    mod, params = examples.seed_example()
    optimized = _show_passes(mod, params)

    _section("task description handed to the kernel")
    for spec in describe(optimized):
        print(spec)
    for spec in describe(_as_compiled(optimized, target)):
        print(f"(at build time the kernel asks for its weights as {spec.weight.describe('w')})")
    _section("layout")
    print(f"layout_transform ops left: {count_layout_transforms(optimized)} (graph entry and exit)")

    start = time.perf_counter()
    fused_lib = build(mod, params, target, memory="tvm")  # planned below, to show both
    fused_seconds = time.perf_counter() - start
    start = time.perf_counter()
    stock_lib = testing.build_stock(mod, params, target)
    stock_seconds = time.perf_counter() - start
    unfused_lib = testing.build_stock(mod, params, target, opt_level=0)
    _show_storage(
        {
            "unfused (stock, opt_level 0: one kernel per op)": unfused_lib,
            "stock relay.build (opt_level 3)": stock_lib,
            "tvm_fuse (optimize + relay.build)": fused_lib,
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
