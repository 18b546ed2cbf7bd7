"""A model's kernels timed one by one, summed by algorithm: plain Python, no TVM.

Both backends' profiles use it: ``bench_models --profile`` (Relay, TVM's debug executor) and
``tvm_fuse.relax.bench --profile`` (each PrimFunc built and timed alone), which runs where Relay
cannot be imported. A kernel is a dict with ``ms`` and, for a fused conv, ``algorithm`` and
``gflop`` (the direct conv's multiply-adds counted twice, for every algorithm).

Kernels timed one by one run with their weights warm in cache; a whole model larger than the
cache reads every weight from memory on each run. ``whole_model`` puts the two side by side.
"""

from __future__ import annotations

import statistics


def pct_of_peak(gflop: float, ms: float, peak_gflops: float | None) -> float | None:
    """``gflop`` done in ``ms`` as % of ``peak_gflops`` (None without a peak)."""
    return 100 * gflop / (ms * 1e-3) / peak_gflops if peak_gflops else None


def pct_in_rounds(gflop: float, runs_ms, peaks) -> float | None:
    """The median over rounds of ``gflop`` done in each round's run (``runs_ms``) as % of the
    FMA peak measured in the same round (``peaks``, GFLOP/s); None without the peak's rounds."""
    if not peaks:
        return None
    return statistics.median(pct_of_peak(gflop, ms, peak) for ms, peak in zip(runs_ms, peaks))


def with_shares(kernels: list[dict]) -> list[dict]:
    """``kernels`` slowest first, each with its ``share`` of their summed time."""
    total = sum(k["ms"] for k in kernels)
    for kernel in kernels:
        kernel["share"] = kernel["ms"] / total
    return sorted(kernels, key=lambda k: -k["ms"])


def kernel_summary(kernels: list[dict], peak_gflops: float | None) -> list[dict]:
    """The kernels' time by algorithm ("other": the kernels that are no fused conv): calls, ms,
    share, GFLOP, GFLOP/s, % of the FMA peak, and ``ms_at_peak``, what the convs would take at
    the peak. A Winograd conv does fewer multiply-adds than it is credited with, so it can pass
    100 %; the direct convs' ``ms_at_peak`` is as fast as they can get without fewer FLOPs."""
    total = sum(k["ms"] for k in kernels)
    groups: dict = {}
    for kernel in kernels:
        group = groups.setdefault(kernel.get("algorithm", "other"), [0, 0.0, 0.0])
        group[0] += 1
        group[1] += kernel["ms"]
        group[2] += kernel.get("gflop", 0.0)
    rows = []
    for algorithm, (calls, ms, gflop) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        has_flops = algorithm != "other"
        at_peak = gflop / peak_gflops * 1e3 if has_flops and peak_gflops else None
        rows.append(
            {
                "algorithm": algorithm,
                "calls": calls,
                "ms": ms,
                "share": ms / total,
                "gflop": gflop if has_flops else None,
                "gflops": gflop / (ms * 1e-3) if has_flops else None,
                "pct_peak": pct_of_peak(gflop, ms, peak_gflops) if has_flops else None,
                "ms_at_peak": at_peak,
            }
        )
    return rows


def profile(kernels: list[dict], top: int, peak_gflops: float | None, weight_bytes: int) -> dict:
    """The profile of ``kernels``: the ``top`` slowest with their shares, the time by algorithm
    (``kernel_summary``), ``kernel_sum_ms`` (every kernel's time summed) and ``weight_bytes``,
    the weights a whole run reads once."""
    kernels = with_shares(kernels)
    return {
        "kernels": kernels[:top],
        "by_algorithm": kernel_summary(kernels, peak_gflops),
        "kernel_sum_ms": sum(k["ms"] for k in kernels),
        "weight_mb": weight_bytes / 1e6,
    }


def whole_model(prof: dict, end_to_end_ms: float) -> dict:
    """``prof`` beside the model run whole in ``end_to_end_ms``: the ``gap_ms`` between that and
    the kernels' warm sum, and ``gap_gbps``, the bandwidth at which reading the weights takes
    the gap (None without a gap). Where the weights exceed the cache the gap is mostly that
    reading, so a ``gap_gbps`` near the machine's memory bandwidth says the model waits on its
    weights."""
    gap_ms = end_to_end_ms - prof["kernel_sum_ms"]
    gbps = prof["weight_mb"] / gap_ms if gap_ms > 0 else None  # MB per ms: GB/s
    return prof | {"end_to_end_ms": end_to_end_ms, "gap_ms": gap_ms, "gap_gbps": gbps}


def report(model: str, prof: dict, how: str) -> str:
    """The text of a profile (``kernels`` and ``by_algorithm``): the time by algorithm, then
    the slowest kernels; ``how`` says how they were timed."""

    def num(value, spec):
        return "-" if value is None else format(value, spec)

    peaks = prof.get("peak_gflops_in_rounds")
    if peaks:
        how += f"; % of the FMA peak of the same round, {min(peaks):.0f}-{max(peaks):.0f} GFLOP/s"
    lines = [
        f"{model}: tvm_fuse's kernels one by one ({how}), by algorithm",
        f"  {'algorithm':<16} {'calls':>5} {'ms':>8} {'share':>6} {'GFLOP':>7} {'GFLOP/s':>8}"
        f" {'% peak':>7} {'ms at peak':>10}",
    ]
    for row in prof["by_algorithm"]:
        lines.append(
            f"  {row['algorithm']:<16} {row['calls']:5d} {row['ms']:8.3f} {row['share']:6.1%}"
            f" {num(row['gflop'], '7.3f'):>7} {num(row['gflops'], '8.1f'):>8}"
            f" {num(row['pct_peak'], '7.1f'):>7} {num(row['ms_at_peak'], '10.3f'):>10}"
        )
    lines.append(f"{model}: the slowest kernels")
    lines.append(f"  {'algorithm':<16} {'ms':>8} {'share':>6} {'% peak':>7}  output  kernel")
    for kernel in prof["kernels"]:
        shape = "x".join(map(str, kernel["shape"]))
        lines.append(
            f"  {kernel.get('algorithm', ''):<16} {kernel['ms']:8.3f} {kernel['share']:6.1%}"
            f" {num(kernel.get('pct_peak'), '7.1f'):>7}  {shape}  {kernel['node']}"
        )
    if "end_to_end_ms" in prof:
        lines.append(
            f"{model}: whole model {prof['end_to_end_ms']:.2f} ms, kernels one by one"
            f" {prof['kernel_sum_ms']:.2f} ms, gap {prof['gap_ms']:.2f} ms; its"
            f" {prof['weight_mb']:.1f} MB of weights read in the gap:"
            f" {num(prof['gap_gbps'], '.1f')} GB/s"
        )
    return "\n".join(lines)
