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
