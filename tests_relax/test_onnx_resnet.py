"""ResNet-18 and ResNet-50 (ONNX, BatchNorm kept) through the Relax backend equal ONNX Runtime."""

import numpy as np
import onnx
import pytest
from tvm.relax.frontend.onnx import from_onnx

import tvm_fuse.relax as tfr
from helpers import op_names, run, transposes
from reference import assert_close
from tvm_fuse import onnx_example

ort = pytest.importorskip("onnxruntime")

#: depth: (convs = BatchNorms, residual adds)
DEPTHS = {18: (20, 8), 50: (53, 16)}


@pytest.mark.slow
@pytest.mark.parametrize("depth", sorted(DEPTHS))
def test_onnx_resnet_matches_onnxruntime(depth, tmp_path, target):
    convs, blocks = DEPTHS[depth]
    path = onnx_example.resnet(tmp_path / f"resnet{depth}.onnx", depth)
    model = onnx.load(path)
    assert sum(n.op_type == "BatchNormalization" for n in model.graph.node) == convs
    mod = from_onnx(model, keep_params_in_input=False)
    optimized = tfr.optimize(mod, target=target)
    specs = tfr.describe(optimized)
    # every conv, its BN folded, fused; then the classifier as a 1x1 conv with its bias
    assert len(specs) == convs + 1
    classifier = specs[-1]
    assert classifier.ops == ("conv2d", "bias") and classifier.out.shape == (1, 1, 1, 1000)
    assert sum(s.residual is not None for s in specs) == blocks  # one per block
    names = op_names(optimized)
    assert len(transposes(names)) == 2
    stock_ops = {"relax.nn.conv2d", "relax.nn.batch_norm", "relax.nn.relu", "relax.matmul"}
    assert not stock_ops & set(names)
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype("float32")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = session.run(None, {"data": x})[0]
    assert_close(run(tfr.build(mod, target=target), x), want)
