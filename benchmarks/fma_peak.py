"""The machine's fp32 FMA peak, measured with a register-resident FMA microkernel built by TVM.

The kernel is a TE reduction whose combiner is one fused multiply-add, ``acc = acc * v + v``,
over ``steps`` iterations, on ``accumulators`` independent vectors of the target's lane count
(8 fp32 on AVX2, 16 on AVX-512). Each accumulator starts from its own value (the reduction's
``init``) so LLVM cannot merge the chains; ``v`` is one vector register shared by all of them,
so the inner loop is nothing but ``accumulators`` independent ``vfmadd`` on registers, enough
of them to hide the FMA latency. The parallel variant runs one chunk per core.
With ``v = 0.5`` every accumulator converges to 1.0, which ``measure`` checks.

Run ``tvm-fuse bench peak`` (or ``python -m tvm_fuse.bench.fma_peak``) to print the peak on 1 core
and on all cores.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

from tvm_fuse.bench import common  # noqa: E402  (sets TVM_NUM_THREADS before tvm is imported)

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import te  # noqa: E402

import tvm_fuse  # noqa: E402

#: FLOP per cycle per core of 2 FMA pipes, by pipe width: 256-bit (Zen 3, and Zen 4, which
#: runs AVX-512 double-pumped) and 512-bit (Xeons with two AVX-512 FMA units).
TWO_PIPE_FLOP_PER_CYCLE = {"256-bit": 32, "512-bit": 64}


def vector_lanes(target) -> int:
    """fp32 SIMD lanes of ``target`` (8 on AVX2, 16 on AVX-512, 4 otherwise)."""
    with tvm.target.Target(target):
        return tvm.target.x86.get_simd_32bit_lanes()


def default_accumulators(lanes: int) -> int:
    """Vector registers minus a few for ``v`` and loop state: 12 of 16 ymm, 28 of 32 zmm."""
    return (32 if lanes >= 16 else 16) - 4


@functools.lru_cache(maxsize=None)
def fma_kernel(target: str, chunks: int, accumulators: int, lanes: int, steps: int):
    """Build the microkernel (once); ``chunks`` > 1 runs in parallel. Returns (module, flops)."""
    fma = te.comm_reducer(lambda acc, v: acc * v + v, lambda t: tvm.tir.const(0, t), name="fma")
    v = te.placeholder((lanes,), name="v")
    init = te.placeholder((chunks, accumulators, lanes), name="init")
    k = te.reduce_axis((0, steps), name="k")
    out = te.compute(
        (chunks, accumulators, lanes),
        lambda p, j, l: fma(v[l], axis=k, init=init[p, j, l]),
        name="out",
    )
    sched = te.create_schedule(out.op)
    p, j, l = sched[out].op.axis
    sched[out].reorder(p, k, j, l)
    sched[out].unroll(j)
    sched[out].vectorize(l)
    if chunks > 1:
        sched[out].parallel(p)
    module = tvm.build(sched, [v, init, out], target, name="fma_peak")
    return module, 2 * chunks * accumulators * lanes * steps


def fma_count(module) -> int:
    """Number of vector FMA instructions in the module's assembly."""
    return len(re.findall(r"\bvfn?m(?:add|sub)\d{3}ps\b", module.get_source("asm")))


class PeakRunner(common.Runner):
    """The microkernel on ``chunks`` cores, built for ``target``, as a benchmark ``Runner``.

    Timed in a case's rounds beside the implementations (``common.run_case``'s ``peak``), it
    gives the peak as the machine was in each round: on a shared machine the neighbours take a
    share of the FMA units that changes from minute to minute, and a kernel's % of a peak
    measured at another time says as much about them as about the kernel."""

    def __init__(self, target=None, chunks: int = 1, steps: int = 1 << 16):
        target = tvm_fuse.host_target() if target is None else tvm.target.Target(target)
        self.lanes = vector_lanes(target)
        self.accumulators = default_accumulators(self.lanes)
        self.module, self.flops = fma_kernel(
            str(target), chunks, self.accumulators, self.lanes, steps
        )
        dev = tvm.cpu()
        shape = (chunks, self.accumulators, self.lanes)
        init = np.linspace(0, 1, np.prod(shape), dtype="float32").reshape(shape)
        self.args = [
            tvm.nd.array(np.full((self.lanes,), 0.5, "float32"), dev),
            tvm.nd.array(init, dev),
            tvm.nd.empty(shape, "float32", dev),
        ]

    def evaluator(self, number: int, repeat: int = 1, min_repeat_ms: int = 0):
        return self.module.time_evaluator(
            self.module.entry_name, tvm.cpu(), number=number, repeat=repeat,
            min_repeat_ms=min_repeat_ms,
        )

    def output(self) -> np.ndarray:
        """The accumulators after one run: all 1.0, or the kernel is wrong (raises)."""
        self.module(*self.args)
        out = self.args[2].numpy()
        if not np.allclose(out, 1.0, atol=1e-3):
            raise RuntimeError("fma_peak: the microkernel did not converge to 1.0; wrong kernel")
        return out

    def timed(self, number: int) -> float:
        return self.evaluator(number)(*self.args).mean * 1e3

    def gflops(self, ms: float) -> float:
        """GFLOP/s of one run that took ``ms``."""
        return self.flops / (ms * 1e-3) / 1e9


def measure(target=None, chunks: int = 1, steps: int = 1 << 18, repeat: int = 10) -> dict:
    """GFLOP/s of the microkernel on ``chunks`` cores: best and median of ``repeat`` runs."""
    runner = PeakRunner(target, chunks, steps)
    seconds = runner.evaluator(1, repeat, min_repeat_ms=10)(*runner.args).results
    runner.output()  # checks the result
    return {
        "cores": chunks,
        "lanes": runner.lanes,
        "accumulators": runner.accumulators,
        "fma_instructions": fma_count(runner.module),
        "gflops": runner.gflops(min(seconds) * 1e3),
        "gflops_median": runner.gflops(float(np.median(seconds)) * 1e3),
    }


def cpu_mhz() -> float | None:
    """The current clock of core 0 from /proc/cpuinfo (None where that file does not exist)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    found = re.search(r"cpu MHz\s*:\s*([\d.]+)", text)
    return float(found.group(1)) if found else None


def fma_peak(target=None, cores: int = common.THREADS, quick: bool = False) -> dict:
    """The FMA peak on 1 core and on ``cores`` cores, with a FLOP/cycle sanity figure.

    ``gflops_all`` is the figure the benchmarks divide by for "% of peak". Best of the repeats
    (other load on the machine only ever makes it lower).
    """
    steps, repeat = (1 << 14, 3) if quick else (1 << 16, 40)
    one = measure(target, chunks=1, steps=steps, repeat=repeat)
    every = measure(target, chunks=cores, steps=steps, repeat=repeat)
    mhz = cpu_mhz()
    return {
        "gflops_1core": one["gflops"],
        "gflops_all": every["gflops"],
        "cores": cores,
        "lanes": one["lanes"],
        "accumulators": one["accumulators"],
        "fma_instructions": one["fma_instructions"],
        "cpu_mhz": mhz,
        "flop_per_cycle_1core": one["gflops"] * 1e3 / mhz if mhz else None,
        "two_pipe_flop_per_cycle": TWO_PIPE_FLOP_PER_CYCLE,
        "runs": [one, every],
    }


def best_peak(*peaks: dict) -> dict:
    """Several ``fma_peak`` measurements as one: the best figure of each kind."""
    best = dict(peaks[0])
    for key in ("gflops_1core", "gflops_all", "flop_per_cycle_1core"):
        values = [p[key] for p in peaks if p[key] is not None]
        best[key] = max(values) if values else None
    best["runs"] = [run for p in peaks for run in p["runs"]]
    return best


def print_peak(peak: dict) -> None:
    per_cycle = peak["flop_per_cycle_1core"]
    pipes = ", ".join(f"{v} with {k}" for k, v in TWO_PIPE_FLOP_PER_CYCLE.items())
    sanity = (
        f"; {per_cycle:.1f} FLOP/cycle/core at the {peak['cpu_mhz']:.0f} MHz of /proc/cpuinfo "
        f"(2 FMA pipes give {pipes}; more means the core runs above that clock)"
        if per_cycle
        else ""
    )
    print(
        f"FMA peak (fp32, {peak['lanes']} lanes, {peak['accumulators']} accumulators): "
        f"{peak['gflops_1core']:.1f} GFLOP/s on 1 core, {peak['gflops_all']:.1f} GFLOP/s on "
        f"{peak['cores']} cores{sanity}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    common.add_output_options(parser, "peak")
    args = parser.parse_args(argv)
    peak = fma_peak(quick=args.quick)
    print_peak(peak)
    common.write_json(common.json_path(args), {"machine": common.machine_info(), "fma_peak": peak})
    return 0


if __name__ == "__main__":
    sys.exit(main())
