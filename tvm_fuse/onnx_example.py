"""A small ONNX model written with ``onnx.helper``, to try ``tvm-fuse compile`` / tvmc on.

``residual_block(path)`` writes a ResNet-style block, NCHW, float32, seeded weights::

    data [N,3,H,W] -> Conv 3x3 (+bias) -> BatchNormalization -> Relu  -> %r1
    %r1 -> Conv 3x3 (no bias) -> BatchNormalization -> Add(%r1) -> Relu -> MaxPool 2x2
        -> GlobalAveragePool -> Flatten -> Gemm (dense + bias) -> logits [N, classes]

It covers what the tvmc integration must carry: a conv with and without bias, BN, a residual
add, pooling and a dense layer. ``batch=None`` writes a dynamic batch dimension (``"N"``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def _initializers(rng, cin, channels, classes) -> list[onnx.TensorProto]:
    def tensor(name, shape, low=-0.5, high=0.5):
        value = rng.uniform(low, high, shape).astype("float32")
        return numpy_helper.from_array(value, name)

    tensors = [
        tensor("w1", (channels, cin, 3, 3)),
        tensor("b1", (channels,)),
        tensor("w2", (channels, channels, 3, 3), -0.2, 0.2),
        tensor("w3", (classes, channels)),
        tensor("b3", (classes,)),
    ]
    for i in (1, 2):
        tensors += [
            tensor(f"bn{i}_gamma", (channels,), 0.5, 1.5),
            tensor(f"bn{i}_beta", (channels,)),
            tensor(f"bn{i}_mean", (channels,)),
            tensor(f"bn{i}_var", (channels,), 0.5, 2.0),
        ]
    return tensors


def _nodes() -> list[onnx.NodeProto]:
    def bn(i, x, y):
        names = [f"bn{i}_{p}" for p in ("gamma", "beta", "mean", "var")]
        return helper.make_node("BatchNormalization", [x, *names], [y], epsilon=1e-5)

    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    return [
        helper.make_node("Conv", ["data", "w1", "b1"], ["c1"], **conv),
        bn(1, "c1", "n1"),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], **conv),
        bn(2, "c2", "n2"),
        helper.make_node("Add", ["n2", "r1"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]


def residual_block(
    path, batch: int | None = 1, cin=3, channels=16, size=16, classes=10, seed=0
) -> str:
    """Write the model to ``path`` (its input is ``data``, its output ``logits``); return path."""
    rng = np.random.default_rng(seed)
    n = "N" if batch is None else batch
    graph = helper.make_graph(
        _nodes(),
        "tvm_fuse_residual_block",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [n, cin, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [n, classes])],
        initializer=_initializers(rng, cin, channels, classes),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


#: ONNX activation nodes by the name a KernelSpec carries (``spec.ACTIVATIONS``)
ONNX_ACTIVATIONS = {
    "none": None,
    "relu": ("Relu", {}),
    "relu6": ("Clip", {}),  # min 0 and max 6 as inputs (opset 13)
    "leaky_relu": ("LeakyRelu", {"alpha": 0.1}),
    "sigmoid": ("Sigmoid", {}),
    "silu": ("Sigmoid", {}),  # x * Sigmoid(x)
}


def conv_bn_act(
    path,
    data_shape=(1, 64, 56, 56),
    channels=128,
    kernel=3,
    strides=2,
    padding=1,
    dilation=1,
    groups=1,
    conv_bias=False,
    activation="relu",
    epsilon=1e-5,
    seed=0,
    clip=(0.0, 6.0),
    opset=OPSET,
) -> str:
    """Write ``Conv -> BatchNormalization -> activation`` (NCHW, float32, seeded) to ``path``.

    The defaults are the seed example of ``docs/architecture.md``: ``[1,64,56,56] -> conv 3x3
    stride 2 pad 1 (128) -> BatchNorm -> ReLU``. Its input is ``data``, its output ``out``.
    ``relu6`` is ``Clip`` with the bounds ``clip``: inputs from opset 11, attributes before."""
    rng = np.random.default_rng(seed)
    cin = data_shape[1]

    def tensor(name, shape, low=-0.5, high=0.5):
        return numpy_helper.from_array(rng.uniform(low, high, shape).astype("float32"), name)

    inits = [tensor("w", (channels, cin // groups, kernel, kernel), -0.3, 0.3)]
    inits += [tensor("gamma", (channels,), 0.5, 1.5), tensor("beta", (channels,))]
    inits += [tensor("mean", (channels,)), tensor("var", (channels,), 0.5, 2.0)]
    conv_inputs = ["data", "w"]
    if conv_bias:
        inits.append(tensor("b", (channels,)))
        conv_inputs.append("b")
    conv = dict(kernel_shape=[kernel] * 2, pads=[padding] * 4, strides=[strides] * 2)
    nodes = [
        helper.make_node(
            "Conv", conv_inputs, ["c"], dilations=[dilation] * 2, group=groups, **conv
        ),
        helper.make_node(
            "BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], epsilon=epsilon
        ),
    ]
    nodes += _activation_nodes(activation, "n", "out", inits, clip, opset)
    graph = helper.make_graph(
        nodes,
        "tvm_fuse_conv_bn_act",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(data_shape))],
        [
            helper.make_tensor_value_info(
                "out", TensorProto.FLOAT, [data_shape[0], channels, "H", "W"]
            )
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def _activation_nodes(
    activation, x, y, inits, clip=(0.0, 6.0), opset=OPSET
) -> list[onnx.NodeProto]:
    if activation == "none":
        return [helper.make_node("Identity", [x], [y])]
    op, attrs = ONNX_ACTIVATIONS[activation]
    if activation == "relu6" and opset < 11:
        return [helper.make_node("Clip", [x], [y], min=float(clip[0]), max=float(clip[1]))]
    if activation == "relu6":
        inits += [numpy_helper.from_array(np.float32(v), n) for n, v in zip(("lo", "hi"), clip)]
        return [helper.make_node("Clip", [x, "lo", "hi"], [y])]
    if activation == "silu":
        return [helper.make_node(op, [x], ["gate"]), helper.make_node("Mul", [x, "gate"], [y])]
    return [helper.make_node(op, [x], [y], **attrs)]


def resnet18(path, batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0) -> str:
    """:func:`resnet` of depth 18."""
    return resnet(path, 18, batch, size, classes, seed)


#: blocks per stage and whether they are bottlenecks, by depth
RESNET_DEPTHS = {18: ((2, 2, 2, 2), False), 50: ((3, 4, 6, 3), True)}


def resnet(
    path, depth: int = 18, batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0
) -> str:
    """Write a ResNet-18 or -50 (v1, torchvision's layout) with random weights and random
    BatchNorm statistics to ``path``, BatchNormalization nodes kept (as an export without
    constant folding gives them), so that an importer hands the backend real BNs to fold. Input
    ``data`` ``[batch, 3, size, size]``, output ``logits``."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv_bn(x, name, cin, cout, k, stride, relu):
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(1.0 / (cin * k * k))
        inits.append(numpy_helper.from_array(w.astype("float32"), f"{name}_w"))
        stats = {
            "gamma": rng.uniform(0.5, 1.0, cout),
            "beta": rng.uniform(-0.2, 0.2, cout),
            "mean": rng.uniform(-0.2, 0.2, cout),
            "var": rng.uniform(0.5, 2.0, cout),
        }
        for key, value in stats.items():
            inits.append(numpy_helper.from_array(value.astype("float32"), f"{name}_{key}"))
        pads = [k // 2] * 4
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}_w"],
                [f"{name}_c"],
                kernel_shape=[k, k],
                strides=[stride] * 2,
                pads=pads,
            )
        )
        bn_inputs = [f"{name}_c"] + [f"{name}_{key}" for key in stats]
        nodes.append(helper.make_node("BatchNormalization", bn_inputs, [f"{name}_n"], epsilon=1e-5))
        if not relu:
            return f"{name}_n"
        nodes.append(helper.make_node("Relu", [f"{name}_n"], [f"{name}_r"]))
        return f"{name}_r"

    x = conv_bn("data", "stem", 3, 64, 7, 2, relu=True)
    nodes.append(
        helper.make_node(
            "MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4
        )
    )
    x, cin = "pool", 64
    blocks, bottleneck = RESNET_DEPTHS[depth]
    for stage, (width, count) in enumerate(zip((64, 128, 256, 512), blocks)):
        cout = width * 4 if bottleneck else width
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"s{stage}b{block}"
            if bottleneck:
                y = conv_bn(x, f"{name}_1", cin, width, 1, 1, relu=True)
                y = conv_bn(y, f"{name}_2", width, width, 3, stride, relu=True)
                y = conv_bn(y, f"{name}_3", width, cout, 1, 1, relu=False)
            else:
                y = conv_bn(x, f"{name}_1", cin, cout, 3, stride, relu=True)
                y = conv_bn(y, f"{name}_2", cout, cout, 3, 1, relu=False)
            shortcut = x
            if stride != 1 or cin != cout:
                shortcut = conv_bn(x, f"{name}_down", cin, cout, 1, stride, relu=False)
            nodes.append(helper.make_node("Add", [y, shortcut], [f"{name}_sum"]))
            nodes.append(helper.make_node("Relu", [f"{name}_sum"], [f"{name}_out"]))
            x, cin = f"{name}_out", cout
    fc_w = rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)
    inits.append(numpy_helper.from_array(fc_w.astype("float32"), "fc_w"))
    inits.append(numpy_helper.from_array(np.zeros(classes, "float32"), "fc_b"))
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        f"tvm_fuse_resnet{depth}",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)
