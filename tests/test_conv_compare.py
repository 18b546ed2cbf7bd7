"""The conv-by-conv comparison's naming and grouping (``benchmarks/conv_compare.py``)."""

import pytest

from tvm_fuse.bench import conv_compare
from tvm_fuse.spec import KernelSpec


def test_a_fused_kernel_and_an_onnx_runtime_conv_of_one_shape_share_label_and_key():
    # ResNet-18's stride-2 3x3 conv: 64 -> 128 channels, 56x56 -> 28x28, padding 1
    spec = KernelSpec.conv((1, 56, 56, 64), (3, 3, 64, 128), (2, 2), (1, 1, 1, 1), (1, 1))
    inputs, output = [[1, 64, 56, 56], [128, 64, 3, 3]], [1, 128, 28, 28]
    onnx = conv_compare.ort_node_names("FusedConv", inputs, output)
    assert conv_compare.spec_names(spec) == onnx
    assert onnx[0] == "3x3/2 64->128 @28x28"


def test_onnx_runtimes_padded_channels_match_the_real_ones_by_key():
    # MobileNet-v2's 96 -> 24 projection, which ONNX Runtime's blocked conv records as 96 -> 32
    spec = KernelSpec.conv((1, 56, 56, 96), (1, 1, 96, 24), (1, 1), (0, 0, 0, 0), (1, 1))
    label, key = conv_compare.spec_names(spec)
    padded = conv_compare.ort_node_names("Conv", [[1, 96, 56, 56], [32, 96, 1, 1]], [1, 32, 56, 56])
    assert label == "1x1/1 96->24 @56x56" and padded[0] == "1x1/1 96->32 @56x56"
    assert padded[1] == key
    # a conv whose channels differ by a whole block keeps its own key
    wider = conv_compare.ort_node_names("Conv", [[1, 96, 56, 56], [48, 96, 1, 1]], [1, 48, 56, 56])
    assert wider[1] != key


@pytest.mark.parametrize(
    "op, inputs, output, label",
    [
        ("Conv", [[1, 3, 224, 224], [64, 3, 7, 7], [64]], [1, 64, 112, 112],
         "7x7/2 3->64 @112x112"),
        ("Conv", [[1, 256, 56, 56], [64, 256, 1, 1]], [1, 64, 56, 56], "1x1/1 256->64 @56x56"),
        # depthwise: the weight holds one input channel per group
        ("Conv", [[1, 144, 56, 56], [144, 1, 3, 3]], [1, 144, 28, 28], "3x3/2 144->144 @28x28"),
        ("MaxPool", [[1, 64, 112, 112]], [1, 64, 56, 56], "MaxPool"),
    ],
)
def test_onnx_runtime_nodes_are_named_by_conv_shape_or_op(op, inputs, output, label):
    assert conv_compare.ort_node_names(op, inputs, output)[0] == label


def _row(label, ms, algorithm=None):
    key = conv_compare.conv_names((3, 3), 1, 64, 64, (56, 56))[1] if "->" in label else label
    row = {"label": label, "key": key, "ms": ms}
    return row if algorithm is None else row | {"algorithm": algorithm}


def test_compare_sums_each_key_on_both_sides_and_leaves_one_sided_rows_unpaired():
    fuse = [
        _row("3x3/1 64->64 @56x56", 0.25, "winograd F(4x4)"),
        _row("3x3/1 64->64 @56x56", 0.35, "winograd F(4x4)"),
        _row("nn_max_pool2d", 0.02, "other"),
    ]
    ort = [_row("3x3/1 64->64 @56x56", 0.7), _row("3x3/1 64->64 @56x56", 0.5)]
    ort.append(_row("MaxPool", 0.03))
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


def test_a_row_shows_tvm_fuses_label_where_onnx_runtime_padded_the_channels():
    spec = KernelSpec.conv((1, 56, 56, 96), (1, 1, 96, 24), (1, 1), (0, 0, 0, 0), (1, 1))
    label, key = conv_compare.spec_names(spec)
    padded_label, _ = conv_compare.ort_node_names(
        "Conv", [[1, 96, 56, 56], [32, 96, 1, 1]], [1, 32, 56, 56]
    )
    fuse = [{"label": label, "key": key, "ms": 0.1, "algorithm": "direct"}]
    ort = [{"label": padded_label, "key": key, "ms": 0.2}]
    (row,) = conv_compare.compare(fuse, ort)
    assert row["label"] == "1x1/1 96->24 @56x56" and row["ratio"] == pytest.approx(0.5)


def test_kernel_names_lose_tvms_common_prefix():
    assert conv_compare.kernel_name("tvmgen_default_fused_nn_max_pool2d") == "nn_max_pool2d"


def test_by_kind_sums_the_paired_rows_by_what_tvm_fuse_runs():
    rows = [
        {"label": "1x1/1 256->64 @56x56", "count": 2, "tvm_fuse_ms": 0.4, "onnxruntime_ms": 0.5,
         "ratio": 0.8, "algorithms": "direct"},
        {"label": "1x1/2 256->512 @28x28", "count": 1, "tvm_fuse_ms": 0.2, "onnxruntime_ms": 0.3,
         "ratio": 0.67, "algorithms": "direct"},
        {"label": "3x3/1 64->64 @56x56", "count": 3, "tvm_fuse_ms": 0.9, "onnxruntime_ms": 2.0,
         "ratio": 0.45, "algorithms": "winograd F(4x4)"},
        {"label": "7x7/2 3->64 @112x112", "count": 1, "tvm_fuse_ms": 0.8, "onnxruntime_ms": 0.75,
         "ratio": 1.07, "algorithms": "direct"},
        {"label": "3x3/1 144->144 @56x56", "count": 1, "tvm_fuse_ms": 0.08, "onnxruntime_ms": 0.1,
         "ratio": 0.8, "algorithms": "depthwise"},
        {"label": "MaxPool", "count": 1, "tvm_fuse_ms": None, "onnxruntime_ms": 0.1,
         "ratio": None, "algorithms": ""},
        {"label": "nn_max_pool2d", "count": 1, "tvm_fuse_ms": 0.09, "onnxruntime_ms": None,
         "ratio": None, "algorithms": "other"},
    ]
    kinds = {k["kind"]: k for k in conv_compare.by_kind(rows)}
    assert set(kinds) == {"1x1", "winograd", "direct 7x7", "depthwise", "other"}
    assert kinds["1x1"]["count"] == 3
    assert kinds["1x1"]["tvm_fuse_ms"] == pytest.approx(0.6)
    assert kinds["1x1"]["ratio"] == pytest.approx(0.6 / 0.8)
    assert kinds["winograd"]["ratio"] == pytest.approx(0.45)
    assert kinds["other"]["tvm_fuse_ms"] == pytest.approx(0.09)
    assert kinds["other"]["onnxruntime_ms"] == pytest.approx(0.1)
    assert kinds["other"]["ratio"] is None
    assert conv_compare.by_kind(rows)[0]["kind"] == "winograd"  # the most ONNX Runtime time first
