"""``tvm_fuse.relax.bench``: its models come from the benchmarks' table, every timed run of
an interleaved round waits for idle CPUs first, and ``--profile`` times each kernel alone."""

import pytest

from tvm_fuse.bench import idle, layer_table
from tvm_fuse.relax import bench, compat
from tvm_fuse.schedules import winograd_tiling


def test_models_are_the_benchmarks_onnx_models():
    assert bench.MODELS is layer_table.ONNX_MODELS
    assert "layer:r50_expand" in bench.MODELS and "layer:mb_dw" in bench.MODELS  # depthwise


def test_each_timed_run_waits_for_idle_cpus(tmp_path, monkeypatch):
    events = []
    monkeypatch.setattr(idle, "settle", lambda: events.append("settle") or 0.0)
    result = bench.bench("layer:down", rounds=3, stock=True, folder=tmp_path)
    assert set(result["ms"]) == {"tvm_fuse.relax", "stock relax"}
    assert all(ms > 0 for ms in result["ms"].values())
    assert events == ["settle"] * 6  # 3 rounds x 2 builds
    assert result["busy_measurements"] == 0  # every wait ended on idle CPUs (0.0 s)
    assert result["max_rel_error"] <= 1e-4  # tvm_fuse agrees with stock Relax


def test_the_header_names_the_threads_the_runtime_uses(tmp_path, monkeypatch, capsys):
    """Not ``TVM_NUM_THREADS``: unset, TVM starts half the logical CPUs on x86 (one on a
    two-vCPU machine), so the header and the JSON report what the runtime runs on."""
    import json  # pylint: disable=import-outside-toplevel

    import tvm  # pylint: disable=import-outside-toplevel

    result = {"ms": {"tvm_fuse.relax": 2.0}, "tune_s": {}, "max_rel_error": 1e-7}
    monkeypatch.setattr(bench, "bench", lambda *args: dict(result))
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    path = tmp_path / "relax.json"
    bench.main(["--models", "layer:down", "--json", str(path)])
    threads = tvm.get_global_func("runtime.NumThreads")()
    assert json.loads(path.read_text())["machine"]["threads"] == threads
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    assert f"({cpu}, {threads} threads, load 0.50;" in capsys.readouterr().out


def test_profile_times_each_kernel_with_its_algorithm_flops_and_peak(tmp_path):
    """``--profile``: the three kernels of ``down`` (entry transpose, fused conv, exit
    transpose), the conv with its algorithm, FLOPs and % of a given peak; the time by algorithm."""
    mod, _ = bench.load("layer:down", tmp_path)
    peak = 100.0  # GFLOP/s: any figure; the percentages are checked against it
    prof = bench.profile(mod, compat.host_target(), top=10, peak_gflops=peak)
    kernels = prof["kernels"]
    assert len(kernels) == 3
    assert [k["ms"] for k in kernels] == sorted((k["ms"] for k in kernels), reverse=True)
    assert min(k["ms"] for k in kernels) > 0
    assert sum(k["share"] for k in kernels) == pytest.approx(1.0)
    (conv,) = [k for k in kernels if "algorithm" in k]
    assert conv["node"].startswith("tvm_fuse_conv2d_nhwc_fused")
    assert conv["shape"] == [1, 28, 28, 128]
    gflop = 2 * 28 * 28 * 128 * 64 / 1e9  # 64 -> 128 channels, 1x1 stride 2
    assert (conv["algorithm"], conv["gflop"]) == ("direct", pytest.approx(gflop))
    assert conv["pct_peak"] == pytest.approx(100 * gflop / (conv["ms"] * 1e-3) / peak)
    rows = {row["algorithm"]: row for row in prof["by_algorithm"]}
    assert (rows["direct"]["calls"], rows["other"]["calls"]) == (1, 2)
    assert rows["direct"]["ms_at_peak"] == pytest.approx(gflop / peak * 1e3)
    assert prof["kernel_sum_ms"] == pytest.approx(sum(k["ms"] for k in kernels))
    # the weights the calls read: the packed 1x1 weight [Co/16, 1, 1, Ci, 16] and the bias
    assert prof["weight_mb"] == pytest.approx((128 * 64 + 128) * 4 / 1e6)


def test_profile_counts_the_weights_a_run_reads(tmp_path, monkeypatch):
    """``seed`` (64 -> 128, 3x3 stride 2) as Winograd F(2x2): its weight stores 16 points, then
    the conv's 9 taps, which only the non-finite fallback reads; a run reads the points and the
    bias."""
    monkeypatch.setattr(winograd_tiling, "choose_winograd_tile", lambda *a, tiles=(2,), **k: 2)
    mod, _ = bench.load("layer:seed", tmp_path)
    prof = bench.profile(mod, compat.host_target(), top=10)
    (conv,) = [k for k in prof["kernels"] if "algorithm" in k]
    assert conv["algorithm"] == "winograd F(2x2)"
    assert prof["weight_mb"] == pytest.approx((16 * 64 * 128 + 128) * 4 / 1e6)


def test_models_are_named_like_the_relay_suites(monkeypatch, capsys):
    """``--models`` takes the names comma-separated, as the Relay suites' do, or space-separated;
    an unknown one is a parser error that lists the choices."""
    seen = []
    monkeypatch.setattr(bench, "bench", lambda model, *args: seen.append(model) or {})
    monkeypatch.setattr(bench, "_table", lambda *args: "")
    bench.main(["--models", "layer:down,block", "resnet18"])
    assert seen == ["layer:down", "block", "resnet18"]
    with pytest.raises(SystemExit):
        bench.main(["--models", "layer:down,resnet34"])
    err = capsys.readouterr().err
    assert "unknown names ['resnet34']" in err and "resnet50" in err


def test_profile_options_are_checked(capsys):
    for args in (["--profile", "-1"], ["--peak", "0"]):
        with pytest.raises(SystemExit):
            bench.main(["--models", "layer:down", *args])
        assert "error: --" in capsys.readouterr().err


def test_bench_adds_the_profile_when_asked(tmp_path):
    result = bench.bench("layer:down", rounds=1, stock=False, folder=tmp_path, profile_top=2)
    assert len(result["profile"]["kernels"]) == 2  # the two slowest of three
    assert sum(row["calls"] for row in result["profile"]["by_algorithm"]) == 3
    assert result["profile"]["end_to_end_ms"] == result["ms"]["tvm_fuse.relax"]  # set beside it
    assert "profile" not in bench.bench("layer:down", rounds=1, stock=False, folder=tmp_path)


def test_profile_subtracts_each_winograd_weights_taps_once(monkeypatch, rng):
    """One model weight in two convs: each call reads its own transformed weight (the transform
    is per call), so a run reads both weights' 16 points, each without its 9 fallback taps."""
    from helpers import module, tensor_var  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(winograd_tiling, "choose_winograd_tile", lambda *a, tiles=(2,), **k: 2)
    w = relax.const(rng.standard_normal((64, 64, 3, 3)).astype("float32"))

    def body(bb, x):
        y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w, padding=1)))
        return relax.op.nn.relu(relax.op.nn.conv2d(y, w, padding=1))

    mod = module([tensor_var("x", (1, 64, 14, 14))], body)
    prof = bench.profile(mod, compat.host_target(), top=10)
    convs = [k for k in prof["kernels"] if "algorithm" in k]
    assert [k["algorithm"] for k in convs] == ["winograd F(2x2)"] * 2
    assert prof["weight_mb"] == pytest.approx(2 * 16 * 64 * 64 * 4 / 1e6)
