"""``tvm_fuse.relax.bench``: its models come from the benchmarks' table, and every timed run of
an interleaved round waits for idle CPUs first."""

from tvm_fuse.bench import layer_table
from tvm_fuse.relax import bench


def test_models_are_the_benchmarks_onnx_models():
    assert bench.MODELS is layer_table.ONNX_MODELS
    assert "layer:r50_expand" in bench.MODELS and "layer:mb_dw" not in bench.MODELS  # depthwise


def test_each_timed_run_waits_for_idle_cpus(tmp_path, monkeypatch):
    events = []
    monkeypatch.setattr(bench, "settle", lambda: events.append("settle") or 0.0)
    result = bench.bench("layer:down", rounds=3, stock=True, folder=tmp_path)
    assert set(result["ms"]) == {"tvm_fuse.relax", "stock relax"}
    assert all(ms > 0 for ms in result["ms"].values())
    assert events == ["settle"] * 6  # 3 rounds x 2 builds
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
