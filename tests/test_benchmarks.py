"""Smoke tests of the benchmark harness: one tiny layer, TVM only, and the FMA microkernel.

Timings are never asserted (the machines are shared and noisy); the JSON layout, the
correctness checks and the FMA kernel's assembly are.
"""

import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from tvm_fuse.bench import bench_layers, bench_models, common, fma_peak  # common: thread env
from tvm_fuse.bench import kernel_profile, peers

import tvm  # noqa: E402
import tvm_fuse  # noqa: E402
from tvm_fuse import examples, strategy  # noqa: E402

TINY = bench_layers.Layer("tiny", 16, 16, 8, 3, 1, 1)
RESULT_KEYS = {"ms", "min_ms", "runs_ms", "build_s", "check", "error", "skipped"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "layers.json"
    impls = ("tvm_fuse", "tvm_fuse_direct", "tvm_nchwc")  # no peers, no NHWC: keep it fast
    payload = bench_layers.run([TINY], common.QUICK, path, impls, quick_peak=True, warm_up=False)
    return payload, json.loads(path.read_text())


def test_layer_json_has_every_implementation_and_ratio(tiny_run):
    payload, on_disk = tiny_run
    assert set(on_disk) == {"machine", "built_for", "timing", "fma_peak", "layers", "ok"}
    assert on_disk["built_for"] == str(tvm_fuse.host_target())
    (record,) = on_disk["layers"]
    assert record["layer"]["name"] == "tiny"
    assert record["gflop"] == pytest.approx(2 * 16 * 8 * 8 * 16 * 9 / 1e9)
    assert set(record["results"]) == {"tvm_fuse", "tvm_fuse_direct", "tvm_nchwc"}
    assert record["algorithm"] == "direct"  # 16 channels: too few for Winograd to pay
    peak = on_disk["fma_peak"]["gflops_all"]
    in_rounds = record["peak_gflops_in_rounds"]  # the FMA peak timed in the layer's rounds
    assert len(in_rounds) == common.QUICK.repeat and min(in_rounds) > 0
    for res in record["results"].values():
        assert RESULT_KEYS <= set(res)
        assert res["ms"] > 0 and res["build_s"] > 0 and res["gflops"] > 0
        best = 100 * record["gflop"] / (res["min_ms"] * 1e-3) / peak  # best run against best
        assert res["pct_peak_best"] == pytest.approx(best) and best >= res["pct_peak"]
        runs = zip(res["runs_ms"], in_rounds)
        rounds = [100 * record["gflop"] / (ms * 1e-3) / p for ms, p in runs]
        assert res["pct_peak_round"] == pytest.approx(statistics.median(rounds))
    assert set(record["ratios"]) == {
        "tvm_fuse/best_peer",
        "tvm_fuse/tvm_nchwc",
        "tvm_fuse/tvm_nhwc",
        "build tvm_fuse/tvm_nchwc",
    }
    assert record["ratios"]["tvm_fuse/tvm_nhwc"] is None  # not run
    ratios = [record["ratios"][k] for k in ("tvm_fuse/best_peer", "tvm_fuse/tvm_nchwc")]
    assert ratios[0] == ratios[1] > 0  # stock TVM is the only peer (tvm_fuse_direct is ours)
    assert record["ratios"]["build tvm_fuse/tvm_nchwc"] > 0
    assert payload["layers"][0]["best_peer"] == "tvm_nchwc"


def test_layer_outputs_match_stock_tvm(tiny_run):
    _, on_disk = tiny_run
    results = on_disk["layers"][0]["results"]
    assert results["tvm_nchwc"]["check"] is None  # the reference
    check = results["tvm_fuse"]["check"]
    assert check["ok"], check
    assert check["max_abs_ref"] > 0
    assert on_disk["ok"] is True


def test_layer_errors_are_measured_against_float64(tiny_run):
    _, on_disk = tiny_run
    for name, res in on_disk["layers"][0]["results"].items():
        assert 0 < res["err_f64"] < 1e-5, name  # float32 rounding, never exactly zero


def test_layer_times_tvm_fuses_conv_kernel_alone(tiny_run):
    """tvm_fuse's rows also give the fused conv kernel timed alone in the same rounds, with its
    % of the peak; the stock build has no such kernel."""
    _, on_disk = tiny_run
    record = on_disk["layers"][0]
    peak = on_disk["fma_peak"]["gflops_all"]
    for name in ("tvm_fuse", "tvm_fuse_direct"):
        res = record["results"][name]
        assert 0 < res["kernel_min_ms"] <= res["kernel_ms"], name
        pct = 100 * record["gflop"] / (res["kernel_ms"] * 1e-3) / peak
        assert res["kernel_pct_peak"] == pytest.approx(pct), name
        best = 100 * record["gflop"] / (res["kernel_min_ms"] * 1e-3) / peak
        assert res["kernel_pct_peak_best"] == pytest.approx(best), name
        in_rounds = zip(res["kernel_runs_ms"], record["peak_gflops_in_rounds"])
        rounds = [100 * record["gflop"] / (ms * 1e-3) / p for ms, p in in_rounds]
        assert res["kernel_pct_peak_round"] == pytest.approx(statistics.median(rounds)), name
    assert "kernel_ms" not in record["results"]["tvm_nchwc"]


def test_kernel_runner_times_the_one_fused_conv_of_a_build():
    """``KernelRunner`` finds the fused conv among the graph's kernels (not the boundary
    transposes), runs it on a real run's tensors, and refuses a name no kernel holds."""
    mod, params = examples.seed_example()
    data = np.random.default_rng(0).standard_normal((1, 64, 56, 56)).astype("float32")
    lib = common.build_fuse(mod, params, tvm_fuse.host_target())
    runner = common.TvmRunner(lib, {"data": data})
    kernel = bench_layers.fused_conv_kernel(runner)
    node = json.loads(runner.lib.get_graph_json())["nodes"][kernel.index]
    assert node["op"] == "tvm_op" and "tvm_fuse_conv2d_nhwc_fused" in node["name"]
    out = kernel.debug.debug_get_output(kernel.index).numpy()
    expected = runner.output().transpose(0, 2, 3, 1)  # the exit transpose's input: NHWC
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert kernel.timed(3) > 0
    with pytest.raises(common.Skip, match="0 kernels named no_such_kernel"):
        common.KernelRunner(runner, "no_such_kernel")


def test_float64_reference_of_a_depthwise_layer_matches_stock_tvm():
    """``reference_f64`` (NumPy) of a depthwise layer (the layer table's MobileNet-v2 ``mb_dw``
    is one) against stock TVM's float32 build and tvm_fuse's, which runs its depthwise kernel."""
    layer = bench_layers.Layer("tiny_dw", 8, 8, 6, 3, 1, 1, groups=8)
    arrays = bench_layers.layer_arrays(layer)
    mod, params = bench_layers.relay_layer(layer, arrays)
    target = tvm_fuse.host_target()
    exact = bench_layers.reference_f64(layer, arrays)
    for build in (common.build_stock, common.build_fuse):
        out = common.TvmRunner(build(mod, params, target), {"data": arrays["data"]}).output()
        assert common.relative_error(out, exact) < 1e-6, build.__name__
    assert common.algorithms_chosen(mod, params, target) == "depthwise"
    assert layer.gflop == pytest.approx(2 * 8 * 6 * 6 * 9 / 1e9)


def test_check_close_flags_a_wrong_output(capsys):
    ref = np.linspace(-1.0, 1.0, 64).reshape(4, 16)
    assert common.check_close("same", ref.astype("float32"), ref)["ok"]
    wrong = ref.copy()
    wrong[2, 3] += 1e-3
    assert not common.check_close("wrong", wrong, ref)["ok"]
    assert "CHECK FAILED wrong" in capsys.readouterr().out
    assert not common.check_close("shape", ref.T, ref)["ok"]


def test_layers_built_for_another_cpu_run_its_code_and_say_so(tmp_path):
    """--mcpu haswell: AVX2 code (8 lanes) on any x86 machine this project runs on."""
    impls = ("tvm_fuse", "tvm_nchwc")
    target = bench_layers.target_for(None, "haswell")
    payload = bench_layers.run(
        [TINY], common.QUICK, tmp_path / "l.json", impls, True, warm_up=False, target=target
    )
    assert "-mcpu=haswell" in payload["built_for"] and payload["fma_peak"]["lanes"] == 8
    assert payload["ok"] and payload["layers"][0]["results"]["tvm_fuse"]["check"]["ok"]


def test_an_unknown_cpu_is_one_line(capsys):
    with pytest.raises(SystemExit):
        bench_layers.main(["--mcpu", "pentium9", "--layers", "l2"])
    here = tvm.target.codegen.llvm_get_system_cpu()
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after argparse's usage
    want = f"error: --mcpu pentium9: LLVM does not know this CPU; e.g. znver3 (this one: {here})"
    assert error.endswith(want)


def test_fma_microkernel_is_fma_and_positive():
    target = common.tvm_fuse.host_target()
    lanes = fma_peak.vector_lanes(target)
    accumulators = fma_peak.default_accumulators(lanes)
    result = fma_peak.measure(target, chunks=1, steps=1 << 12, repeat=2)
    assert result["gflops"] > 0
    assert result["lanes"] == lanes
    assert result["fma_instructions"] >= accumulators  # every accumulator has its own FMA


class ScriptedPeak:
    """A stand-in for ``fma_peak.PeakRunner`` whose GFLOP/s in each round is scripted."""

    def __init__(self, gflops: list[float]):
        self.rounds = iter(gflops)

    def timed(self, number: int) -> float:
        return 1.0 / next(self.rounds)  # ms of a run that does 1 MFLOP

    def gflops(self, ms: float) -> float:
        return 1.0 / ms


def test_model_profile_names_shapes_shares_and_peak():
    """``bench_models --profile``: the slowest kernels, each with its output shape and share,
    the fused conv with its algorithm, FLOPs and % of the peak; the time by algorithm."""
    mod, params = examples.seed_example()
    data = np.random.default_rng(0).standard_normal((1, 64, 56, 56)).astype("float32")
    # the peak in each of the profile's rounds: a neighbour halves the machine in the second
    peak = ScriptedPeak([100.0, 50.0, 100.0])
    # the direct build (the cost model gives this stride-2 conv to Winograd where it pays)
    target, direct_only = tvm_fuse.host_target(), {"algorithm": "direct"}
    lib = tvm_fuse.build(mod, params, target, **direct_only)
    specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params, target, **direct_only))
    prof = bench_models.profile(mod, params, data, target, 10, peak, specs=specs, lib=lib)
    kernels = prof["kernels"]
    # every kernel (entry transpose, fused conv, exit transpose), slowest first; which is the
    # slowest depends on the machine's load, so only the order and the shares are asserted
    assert len(kernels) == 3
    assert [k["ms"] for k in kernels] == sorted((k["ms"] for k in kernels), reverse=True)
    assert min(k["ms"] for k in kernels) > 0
    assert sum(k["share"] for k in kernels) == pytest.approx(1.0)
    (conv,) = [k for k in kernels if "tvm_fuse_conv2d_nhwc_fused" in k["node"]]
    assert conv["shape"] == [1, 28, 28, 128]
    assert conv["share"] == pytest.approx(conv["ms"] / sum(k["ms"] for k in kernels))
    # the seed conv: 64 -> 128 channels, 3x3 stride 2, to 28x28
    gflop = 2 * 28 * 28 * 128 * 64 * 9 / 1e9
    assert conv["algorithm"] == "direct"
    assert conv["gflop"] == pytest.approx(gflop)
    assert prof["peak_gflops_in_rounds"] == [100.0, 50.0, 100.0]
    assert len(conv["runs_ms"]) == 3
    assert conv["ms"] == pytest.approx(statistics.median(conv["runs_ms"]))
    in_rounds = [100 * gflop / (ms * 1e-3) / g for ms, g in zip(conv["runs_ms"], [100, 50, 100])]
    assert conv["pct_peak"] == pytest.approx(statistics.median(in_rounds))
    assert all("algorithm" not in k for k in kernels if k is not conv)  # the transposes
    by_algorithm = {row["algorithm"]: row for row in prof["by_algorithm"]}
    assert set(by_algorithm) == {"direct", "other"}
    direct, other = by_algorithm["direct"], by_algorithm["other"]
    assert (direct["calls"], other["calls"]) == (1, 2)
    assert direct["ms"] == pytest.approx(conv["ms"])
    assert other["ms"] == pytest.approx(sum(k["ms"] for k in kernels) - conv["ms"])
    assert prof["kernel_sum_ms"] == pytest.approx(sum(k["ms"] for k in kernels))
    # the built module's weights: the packed conv weight [Co/16, 3, 3, Ci, 16] and the bias
    assert prof["weight_mb"] == pytest.approx((128 * 9 * 64 + 128) * 4 / 1e6)
    assert direct["ms_at_peak"] == pytest.approx(gflop / 100 * 1e3)  # the rounds' median peak
    assert "same round, 50-100 GFLOP/s" in kernel_profile.report("seed", prof, "warm")
    assert other["gflop"] is None and other["ms_at_peak"] is None


def test_model_profile_counts_the_weights_a_run_reads(monkeypatch):
    """A Winograd F(2x2) weight stores 16 points, then the conv's 9 taps, which only the
    non-finite fallback reads: a run reads the points and the bias."""
    monkeypatch.setattr(strategy, "winograd_tile", lambda spec, target, tiles=None: 2)
    ci, co = 16, 32  # Co a whole number of vectors at 8 and 16 lanes: no padding
    mod, params = examples.conv_bn_act(data_shape=(1, ci, 8, 8), channels=co)
    data = np.random.default_rng(0).standard_normal((1, ci, 8, 8)).astype("float32")
    target = tvm_fuse.host_target()
    lib = tvm_fuse.build(mod, params, target)
    specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params, target))
    assert [(s.algorithm, s.winograd_tile) for s in specs] == [("winograd", 2)]
    stored = sum(v.numpy().nbytes for v in lib.get_params().values())
    assert stored == ((16 + 9) * ci * co + co) * 4
    prof = bench_models.profile(mod, params, data, target, top=3, specs=specs, lib=lib)
    assert prof["weight_mb"] == pytest.approx((16 * ci * co + co) * 4 / 1e6)


def test_model_profile_reuses_the_timed_build(monkeypatch):
    """``bench_models`` profiles the module it timed: the preparer hands its build over, and
    ``profile`` given it builds nothing."""
    mod, params = examples.seed_example()
    data = np.random.default_rng(0).standard_normal((1, 64, 56, 56)).astype("float32")
    target, built = tvm_fuse.host_target(), {}
    preps = peers.implementations(mod, params, data, target, None, ("tvm_fuse",), built)
    runner = preps["tvm_fuse"]()
    assert set(built) == {"tvm_fuse"}

    def no_second_build(*_args, **_kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(bench_models.tvm_fuse, "build", no_second_build)
    prof = bench_models.profile(mod, params, data, target, top=3, lib=built["tvm_fuse"])
    assert len(prof["kernels"]) == 3
    assert runner.output().shape == (1, 128, 28, 28)


def test_kernel_summary_groups_by_algorithm_with_time_at_peak():
    kernels = [
        {"ms": 2.0, "algorithm": "direct", "gflop": 0.2},
        {"ms": 1.0, "algorithm": "direct", "gflop": 0.1},
        {"ms": 1.0, "algorithm": "winograd F(2x2)", "gflop": 0.2},
        {"ms": 0.5},  # a transpose
    ]
    rows = kernel_profile.kernel_summary(kernels, peak_gflops=150.0)
    assert [r["algorithm"] for r in rows] == ["direct", "winograd F(2x2)", "other"]  # by time
    direct, winograd, other = rows
    assert (direct["calls"], direct["ms"], direct["gflop"]) == (2, 3.0, pytest.approx(0.3))
    assert direct["pct_peak"] == pytest.approx(100 * 0.3 / 3e-3 / 150)  # 66.7 %
    assert direct["ms_at_peak"] == pytest.approx(2.0)
    assert winograd["pct_peak"] == pytest.approx(100 * 0.2 / 1e-3 / 150)  # above 100: fewer MACs
    assert winograd["gflops"] == pytest.approx(200.0)
    assert other["share"] == pytest.approx(0.5 / 4.5)
    assert kernel_profile.kernel_summary(kernels, None)[0]["ms_at_peak"] is None


def test_whole_model_sets_the_run_beside_its_kernels_and_weights():
    kernels = [
        {"node": "conv", "shape": [1, 8], "ms": 2.0, "algorithm": "direct", "gflop": 0.2},
        {"node": "transpose", "shape": [8, 1], "ms": 1.0},
        {"node": "pool", "shape": [1, 1], "ms": 0.5},
    ]
    prof = kernel_profile.profile(kernels, top=1, peak_gflops=None, weight_bytes=40_000_000)
    assert [k["ms"] for k in prof["kernels"]] == [2.0]  # the top one, of all three
    assert (prof["kernel_sum_ms"], prof["weight_mb"]) == (3.5, 40.0)
    whole = kernel_profile.whole_model(prof, end_to_end_ms=5.5)
    assert whole["gap_ms"] == pytest.approx(2.0)
    assert whole["gap_gbps"] == pytest.approx(40e6 / 2e-3 / 1e9)  # 20 GB/s
    assert whole["kernels"] == prof["kernels"] and "end_to_end_ms" not in prof
    faster = kernel_profile.whole_model(prof, end_to_end_ms=3.0)  # no gap: no bandwidth
    assert faster["gap_ms"] == pytest.approx(-0.5) and faster["gap_gbps"] is None
    line = kernel_profile.report("net", whole, "warm").splitlines()[-1]
    assert line == (
        "net: whole model 5.50 ms, kernels one by one 3.50 ms, gap 2.00 ms; its 40.0 MB of"
        " weights read in the gap: 20.0 GB/s"
    )
    assert "whole model" not in kernel_profile.report("net", prof, "warm")


def test_profile_report_lists_each_algorithm_and_the_slowest_kernels():
    kernels = kernel_profile.with_shares(
        [
            {"node": "conv_a", "shape": [1, 7, 7, 8], "ms": 1.0}
            | {"algorithm": "direct", "gflop": 0.1},
            {"node": "transpose", "shape": [1, 8, 7, 7], "ms": 3.0},
        ]
    )
    prof = {"kernels": kernels, "by_algorithm": kernel_profile.kernel_summary(kernels, 200.0)}
    lines = kernel_profile.report("net", prof, "warm").splitlines()
    assert lines[0] == "net: tvm_fuse's kernels one by one (warm), by algorithm"
    split = lines.index("net: the slowest kernels")
    by_algorithm = [line.split() for line in lines[2:split]]  # slowest algorithm first
    # algorithm, calls, ms, share, GFLOP, GFLOP/s, % peak, ms at peak
    assert by_algorithm == [
        ["other", "1", "3.000", "75.0%", "-", "-", "-", "-"],
        ["direct", "1", "1.000", "25.0%", "0.100", "100.0", "50.0", "0.500"],
    ]
    slowest = lines[split + 2 :]
    assert [line.split()[-1] for line in slowest] == ["transpose", "conv_a"]  # slowest first


def test_a_bad_thread_count_is_one_line():
    env = {**os.environ, "TVM_FUSE_BENCH_THREADS": "two"}
    run = subprocess.run(
        [sys.executable, "-c", "import tvm_fuse.bench.common"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert run.stderr.strip() == "TVM_FUSE_BENCH_THREADS='two': set it to a whole number >= 1"


def test_winograd_bench_takes_the_layers_winograd_applies_to():
    from tvm_fuse.bench import bench_winograd  # pylint: disable=import-outside-toplevel

    # the 3x3 layers of stride 1 and 2, not the depthwise mb_dw
    assert bench_winograd.WINOGRAD_LAYERS == ["l1", "seed", "l2", "l3", "l4"]


def test_backends_bench_runs_each_backend_in_a_process_of_its_own(tmp_path, monkeypatch):
    """``bench_backends`` with this interpreter standing in for the Relax venv's: in each of two
    draws, fresh workers build the model, answer timing requests and match ONNX Runtime; the
    JSON pools both draws' rounds and keeps each draw's median."""
    pytest.importorskip("onnxruntime")
    from tvm_fuse import onnx_example  # pylint: disable=import-outside-toplevel
    from tvm_fuse.bench import bench_backends  # pylint: disable=import-outside-toplevel

    tiny = lambda path: onnx_example.conv_bn_act(path, (1, 16, 8, 8), 16, 3, 1, 1)  # noqa: E731
    monkeypatch.setitem(bench_backends.MODELS, "tiny", tiny)
    path = tmp_path / "backends.json"
    argv = ["--relax-python", sys.executable, "--models", "tiny", "--quick", "--rounds", "3",
            "--processes", "2", "--json", str(path)]
    assert bench_backends.main(argv) == 0
    payload = json.loads(path.read_text())
    assert payload["timing"]["repeat"] == 3 and payload["timing"]["processes"] == 2
    record = payload["models"]["tiny"]
    assert record["ok"]
    for label in (bench_backends.RELAY, bench_backends.RELAX):
        result = record["results"][label]
        assert result["check"]["ok"] and result["check"]["max_abs_err"] <= 1e-4 * result[
            "check"]["max_abs_ref"]
        assert result["backend"] == "relay" and len(result["process_compile_s"]) == 2
        assert result["compile_s"] == pytest.approx(sum(result["process_compile_s"]) / 2)
        runs = result["runs_ms"]
        assert len(runs) == 6 and min(runs) > 0
        assert result["process_ms"] == [sorted(runs[:3])[1], sorted(runs[3:])[1]]
    assert record["ratios"]["relax/relay time"] > 0
    relax, relay = (record["results"][label]["runs_ms"] for label in (bench_backends.RELAX,
                                                                     bench_backends.RELAY))
    per_round = sorted(a / b for a, b in zip(relax, relay))
    assert record["ratios"]["relax/relay time per round"] == pytest.approx(
        (per_round[2] + per_round[3]) / 2)
    per_process = record["ratios"]["relax/relay time per process"]
    assert per_process == pytest.approx(
        [sorted(a / b for a, b in zip(relax[i:i + 3], relay[i:i + 3]))[1] for i in (0, 3)])


def test_paired_ratio_is_the_median_of_the_ratios_within_a_round():
    a = common.Timing([2.0, 9.0, 3.0], number=1)
    b = common.Timing([1.0, 3.0, 6.0], number=1)
    assert common.paired_ratio(a, b) == 2.0  # rounds: 2.0, 3.0, 0.5
    assert common.ratio(a.median_ms, b.median_ms) == 1.0
    assert common.paired_ratio(a, None) is None


def test_backends_bench_names_a_missing_relax_python(capsys):
    from tvm_fuse.bench import bench_backends  # pylint: disable=import-outside-toplevel

    with pytest.raises(SystemExit):
        bench_backends.main(["--relax-python", "/nonexistent/bin/python"])
    assert "--relax-python /nonexistent/bin/python: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("option, value, message", [
    ("--rounds", "0", "give at least 1 round"), ("--rounds", "-1", "give at least 1 round"),
    ("--processes", "0", "give at least 1 process"),
])
def test_backends_bench_refuses_fewer_than_one_round_or_process(capsys, option, value, message):
    from tvm_fuse.bench import bench_backends  # pylint: disable=import-outside-toplevel

    with pytest.raises(SystemExit):
        bench_backends.main(["--relax-python", sys.executable, option, value])
    assert f"{option} {value}: {message}" in capsys.readouterr().err


class _Fixed(common.Runner):
    def timed(self, number: int) -> float:
        return 1.0


class _Rounds(common.Runner):
    """A runner whose runs take the given ms, one per round (and 1.0 to calibrate)."""

    def __init__(self, *ms, flops=0.0):
        self.ms, self.flops = iter(ms), flops

    def output(self) -> np.ndarray:
        return np.ones(2, "float32")

    def timed(self, number: int) -> float:
        return next(self.ms, 1.0)

    def gflops(self, ms: float) -> float:
        return self.flops / (ms * 1e-3) / 1e9


def test_percent_of_peak_is_taken_against_the_peak_of_the_same_round(monkeypatch):
    """A neighbour who halves the machine in rounds 2 and 3 halves the peak's GFLOP/s too: the
    kernel ran at 25 % of the peak in every round, which pct_peak_round says and the median run
    against the best peak (pct_peak) does not."""
    from tvm_fuse.bench import idle  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(idle, "settle", lambda: 0.0)
    config = common.TimingConfig(warmup=0, number=1, repeat=3, min_repeat_ms=0)
    # calibrate's first run, then one run per round; the peak does 1e9 FLOP: 1 ms is 1000 GFLOP/s
    peak = _Rounds(1.0, 1.0, 2.0, 2.0, flops=1e9)
    conv = _Rounds(1.0, 2.0, 4.0, 4.0)  # 0.5 GFLOP: 250 GFLOP/s, then 125 twice
    results = common.run_case({"ref": lambda: conv}, "ref", config, peak=peak)
    assert results["ref"].peak_runs == [1000.0, 500.0, 500.0]
    record = common.case_record({"tvm_fuse": results["ref"]}, (), gflop=0.5, peak_gflops=1000.0)
    res = record["results"]["tvm_fuse"]
    assert res["pct_peak_round"] == pytest.approx(25.0)  # 250 of 1000, 125 of 500 twice
    assert res["pct_peak"] == pytest.approx(12.5)  # the median run, 4 ms, against the best peak
    assert record["peak_gflops_in_rounds"] == [1000.0, 500.0, 500.0]


@pytest.mark.parametrize("busy_calls", [0, 2])
def test_a_suite_says_when_other_processes_kept_the_cpus_busy(monkeypatch, capsys, busy_calls):
    """Measurements that start on CPUs which never became idle (``settle`` gave up) are counted
    and named in one line: TVM's pinned threads make such times unreliable."""
    from tvm_fuse.bench import idle  # pylint: disable=import-outside-toplevel

    waits = iter([idle.SETTLE_MAX_S] * busy_calls + [0.0] * 10)
    monkeypatch.setattr(idle, "settle", lambda: next(waits))
    config = common.TimingConfig(warmup=0, number=1, repeat=3, min_repeat_ms=0)
    timings = common.time_interleaved({"a": _Fixed(), "b": _Fixed()}, config)
    assert timings["a"].runs_ms == [1.0, 1.0, 1.0]
    # the first round's two measurements, one of each: the count goes in each one's results
    assert [timings[n].busy_runs for n in "ab"] == [busy_calls // 2] * 2
    result = common.Result("a", timing=timings["a"]).to_dict()
    assert result["busy_runs"] == busy_calls // 2
    lines = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    if busy_calls:
        assert lines == [
            f"  warning: other processes kept the CPUs busy before {busy_calls} of 6 "
            "measurements; TVM's times are unreliable beside them (README, Threads: use fewer "
            "threads than cores, TVM_FUSE_BENCH_THREADS)"
        ]
    else:
        assert not lines


def test_settle_waits_for_a_spinning_thread_to_stop():
    """The pause before each measurement lasts until the CPUs are idle: a thread spinning for
    0.3 s (as TVM's workers do after their last task) is waited for, up to ``max_s``."""
    import threading  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel

    def spin():
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass

    thread = threading.Thread(target=spin)
    thread.start()
    waited = common.settle(max_s=1.5)
    thread.join()
    assert 0.3 <= waited <= 1.5 + 0.2
