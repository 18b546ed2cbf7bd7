"""ResNet-18 from PyTorch through ONNX: tvm_fuse.build equals ONNX Runtime and PyTorch.

The network is ``tvm_fuse.bench.bench_models.torch_resnet`` (relay.testing's pre-activation ResNet
v2 in PyTorch) with random weights and random BN statistics, exported with its
BatchNormalization nodes kept, so that ``from_onnx`` hands tvm_fuse real BNs to fold.
"""

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from tvm import relay  # noqa: E402

import tvm_fuse  # noqa: E402
from tvm_fuse import models, onnx_compat, testing  # noqa: E402

pytestmark = pytest.mark.llvm

OPSET = 13
SHAPE = (1, 3, 224, 224)


def export(net, data) -> "onnx.ModelProto":
    """``net`` as ONNX with BatchNormalization nodes kept (no constant folding into convs)."""
    buffer = io.BytesIO()
    torch.onnx.export(
        net,
        (torch.from_numpy(data),),
        buffer,
        input_names=["data"],
        output_names=["prob"],
        opset_version=OPSET,
        training=torch.onnx.TrainingMode.PRESERVE,
        do_constant_folding=False,
        dynamo=False,
    )
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.slow
def test_onnx_resnet18_matches_onnxruntime_and_pytorch():
    from tvm_fuse.bench.bench_models import torch_resnet  # pylint: disable=import-outside-toplevel

    _, params = models.zoo_workload("resnet-18")
    net = torch_resnet(18, params)
    data = np.random.default_rng(1).standard_normal(SHAPE).astype("float32")
    model = export(net, data)
    bn_nodes = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert len(bn_nodes) == 19

    with torch.no_grad():
        expected_torch = net(torch.from_numpy(data)).numpy()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected_ort,) = session.run(None, {"data": data})

    onnx_compat.install()  # any onnx: TVM's importer reads onnx.mapping
    mod, onnx_params = relay.frontend.from_onnx(model, shape={"data": SHAPE})
    # 21 convs and the classifier, a 1x1 conv (passes/dense.py)
    assert len(tvm_fuse.describe(tvm_fuse.optimize(mod, onnx_params))) == 22
    (got,) = testing.run(tvm_fuse.build(mod, onnx_params), {"data": data})
    testing.assert_close([got], [expected_ort], rtol=1e-4)
    testing.assert_close([got], [expected_torch], rtol=1e-4)
