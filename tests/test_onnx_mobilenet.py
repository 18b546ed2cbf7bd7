"""MobileNet-v2 as ONNX (``onnx_example.mobilenet_v2``): every conv fused, the output equal to
ONNX Runtime's; and the ``bench onnx`` suite's record on a small model."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tvm_fuse
from tvm_fuse import onnx_example, testing
from tvm_fuse.bench import bench_onnx


@pytest.mark.slow
def test_mobilenet_v2_fuses_every_conv_and_matches_onnxruntime(tmp_path):
    path = onnx_example.mobilenet_v2(tmp_path / "mobilenet_v2.onnx")
    model = onnx.load(path)
    assert sum(n.op_type == "BatchNormalization" for n in model.graph.node) == 52
    data = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype("float32")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"data": data})

    mod, params = bench_onnx.relay_module(path, data.shape)
    specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    kinds = [(s.algorithm_name, s.activation) for s in specs]
    assert kinds.count(("depthwise", "relu6")) == 17  # one per inverted residual block
    assert len(specs) == 53  # every conv (17 depthwise, 35 direct) and the classifier
    (got,) = testing.run(tvm_fuse.build(mod, params), {"data": data})
    testing.assert_close([got], [expected], rtol=1e-4)


def test_bench_onnx_records_every_implementation_checked_against_onnxruntime(tmp_path):
    out = tmp_path / "onnx.json"
    args = ["--models", "block", "--quick", "--by-conv", "--json", str(out)]
    assert bench_onnx.main(args) == 0
    (record,) = json.loads(out.read_text())["models"]
    assert set(record["results"]) == {"tvm_fuse", "tvm_nchwc", "onnxruntime"}
    assert record["results"]["onnxruntime"]["check"] is None  # the reference
    for name in ("tvm_fuse", "tvm_nchwc"):
        assert record["results"][name]["check"]["ok"], name
    assert record["algorithms"].startswith("2 ")  # the block's two convs, as the model chose
    assert set(record["paired_ratios"]) == {"tvm_fuse/tvm_nchwc", "tvm_fuse/onnxruntime"}
    assert all(value > 0 for value in record["paired_ratios"].values())
    # --by-conv: both sides name the block's two 3x3 convs alike, so they share one row
    (conv,) = [row for row in record["by_conv"]["rows"] if "->" in row["label"]]  # the convs
    assert conv["label"] == "3x3/1 64->64 @56x56" and conv["count"] == 2
    assert conv["tvm_fuse_ms"] > 0 and conv["onnxruntime_ms"] > 0
    assert conv["ratio"] == conv["tvm_fuse_ms"] / conv["onnxruntime_ms"]


def test_bench_onnx_by_conv_without_onnx_runtime_says_it_is_skipped(tmp_path, capsys):
    out = tmp_path / "onnx.json"
    args = ["--models", "block", "--quick", "--no-peers", "--by-conv", "--json", str(out)]
    assert bench_onnx.main(args) == 0
    note = "--by-conv compares with ONNX Runtime, which this run does not time: skipped"
    assert note in capsys.readouterr().out
    (record,) = json.loads(out.read_text())["models"]
    assert "by_conv" not in record
