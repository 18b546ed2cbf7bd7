"""The conv-by-conv comparison's naming and grouping (``benchmarks/conv_compare.py``)."""

import pytest

from tvm_fuse.bench import conv_compare
from tvm_fuse.spec import KernelSpec


def test_a_fused_kernel_and_an_onnx_runtime_conv_of_one_shape_share_a_label():
    # ResNet-18's stride-2 3x3 conv: 64 -> 128 channels, 56x56 -> 28x28, padding 1
    spec = KernelSpec.conv((1, 56, 56, 64), (3, 3, 64, 128), (2, 2), (1, 1, 1, 1), (1, 1))
    inputs, output = [[1, 64, 56, 56], [128, 64, 3, 3]], [1, 128, 28, 28]
    onnx = conv_compare.ort_node_label("FusedConv", inputs, output)
    assert conv_compare.spec_label(spec) == onnx == "3x3/2 64->128 @28x28"


@pytest.mark.parametrize(
    "op, inputs, output, label",
    [
        ("Conv", [[1, 3, 224, 224], [64, 3, 7, 7], [64]], [1, 64, 112, 112],
         "7x7/2 3->64 @112x112"),
        ("Conv", [[1, 256, 56, 56], [64, 256, 1, 1]], [1, 64, 56, 56], "1x1/1 256->64 @56x56"),
        ("MaxPool", [[1, 64, 112, 112]], [1, 64, 56, 56], "MaxPool"),
    ],
)
def test_onnx_runtime_nodes_are_named_by_conv_shape_or_op(op, inputs, output, label):
    assert conv_compare.ort_node_label(op, inputs, output) == label


def test_compare_sums_each_label_on_both_sides_and_leaves_one_sided_rows_unpaired():
    fuse = [
        {"label": "3x3/1 64->64 @56x56", "algorithm": "winograd F(4x4)", "ms": 0.25},
        {"label": "3x3/1 64->64 @56x56", "algorithm": "winograd F(4x4)", "ms": 0.35},
        {"label": "nn_max_pool2d", "algorithm": "other", "ms": 0.02},
    ]
    ort = [
        {"label": "3x3/1 64->64 @56x56", "ms": 0.7},
        {"label": "3x3/1 64->64 @56x56", "ms": 0.5},
        {"label": "MaxPool", "ms": 0.03},
    ]
    rows = {row["label"]: row for row in conv_compare.compare(fuse, ort)}
    conv = rows["3x3/1 64->64 @56x56"]
    assert conv["count"] == 2 and conv["algorithms"] == "winograd F(4x4)"
    assert conv["tvm_fuse_ms"] == pytest.approx(0.6)
    assert conv["onnxruntime_ms"] == pytest.approx(1.2)
    assert conv["ratio"] == pytest.approx(0.5)
    assert rows["MaxPool"]["tvm_fuse_ms"] is None and rows["MaxPool"]["ratio"] is None
    assert rows["nn_max_pool2d"]["onnxruntime_ms"] is None
    # slowest on ONNX Runtime first, its one-sided rows after
    assert [row["label"] for row in conv_compare.compare(fuse, ort)][:2] == [
        "3x3/1 64->64 @56x56",
        "MaxPool",
    ]


def test_kernel_names_lose_tvms_common_prefix():
    assert conv_compare.kernel_name("tvmgen_default_fused_nn_max_pool2d") == "nn_max_pool2d"
