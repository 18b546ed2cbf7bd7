"""A small ONNX model written with ``onnx.helper``, to try ``tvm-fuse compile`` / tvmc on.

``residual_block(path)`` writes a ResNet-style block, NCHW, float32, seeded weights::

    data [N,3,H,W] -> Conv 3x3 (+bias) -> BatchNormalization -> Relu  -> %r1
    %r1 -> Conv 3x3 (no bias) -> BatchNormalization -> Add(%r1) -> Relu -> MaxPool 2x2
        -> GlobalAveragePool -> Flatten -> Gemm (dense + bias) -> logits [N, classes]

It covers what the tvmc integration must carry: a conv with and without bias, BN, a residual
add, pooling and a dense layer. ``batch=None`` writes a dynamic batch dimension (``"N"``).
``conv_bn_act`` writes one conv layer, ``resnet`` a ResNet-18/50 and ``mobilenet_v2`` a
MobileNet-v2, all with random weights and BatchNorm kept (the benchmarks' models).
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


class _Network:
    """The nodes and initializers of a conv net being written: conv + BatchNormalization
    (+ activation) layers with random weights and random BN statistics, BN kept (as an export
    without constant folding gives them), so that an importer hands the backend real BNs."""

    #: The initializers every ReLU6 (``Clip``) of a network reads its bounds from.
    CLIP_BOUNDS = (("clip_min", 0.0), ("clip_max", 6.0))

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.clips = False  # whether CLIP_BOUNDS are read

    def conv_bn(self, x, name, cin, cout, k, stride, activation="relu", groups=1) -> str:
        """``x -> Conv k x k (same padding) -> BN -> activation`` ("relu", "relu6", "none")."""
        per_group = cin // groups
        w = self.rng.standard_normal((cout, per_group, k, k)) * np.sqrt(1.0 / (per_group * k * k))
        self.inits.append(numpy_helper.from_array(w.astype("float32"), f"{name}_w"))
        stats = {
            "gamma": self.rng.uniform(0.5, 1.0, cout),
            "beta": self.rng.uniform(-0.2, 0.2, cout),
            "mean": self.rng.uniform(-0.2, 0.2, cout),
            "var": self.rng.uniform(0.5, 2.0, cout),
        }
        for key, value in stats.items():
            self.inits.append(numpy_helper.from_array(value.astype("float32"), f"{name}_{key}"))
        conv = dict(kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4)
        if groups != 1:
            conv["group"] = groups
        self.nodes.append(helper.make_node("Conv", [x, f"{name}_w"], [f"{name}_c"], **conv))
        bn_inputs = [f"{name}_c"] + [f"{name}_{key}" for key in stats]
        self.nodes.append(
            helper.make_node("BatchNormalization", bn_inputs, [f"{name}_n"], epsilon=1e-5)
        )
        if activation == "none":
            return f"{name}_n"
        if activation == "relu":
            self.nodes.append(helper.make_node("Relu", [f"{name}_n"], [f"{name}_a"]))
        else:  # relu6
            bounds = [bound for bound, _ in self.CLIP_BOUNDS]
            self.nodes.append(helper.make_node("Clip", [f"{name}_n", *bounds], [f"{name}_a"]))
            self.clips = True
        return f"{name}_a"

    def add(self, a, b, name) -> str:
        self.nodes.append(helper.make_node("Add", [a, b], [name]))
        return name

    def save(self, path, x, cin, title, batch, size, classes) -> str:
        """Append global average pooling and the classifier to ``x`` and write the model."""
        fc_w = self.rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)
        self.inits.append(numpy_helper.from_array(fc_w.astype("float32"), "fc_w"))
        self.inits.append(numpy_helper.from_array(np.zeros(classes, "float32"), "fc_b"))
        if self.clips:
            self.inits += [numpy_helper.from_array(np.float32(v), n) for n, v in self.CLIP_BOUNDS]
        self.nodes += [
            helper.make_node("GlobalAveragePool", [x], ["gap"]),
            helper.make_node("Flatten", ["gap"], ["flat"]),
            helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
        ]
        graph = helper.make_graph(
            self.nodes,
            title,
            [helper.make_tensor_value_info("data", TensorProto.FLOAT, [batch, 3, size, size])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        onnx.checker.check_model(model)
        onnx.save(model, str(path))
        return str(path)


def resnet(
    path, depth: int = 18, batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0
) -> str:
    """Write a ResNet-18 or -50 (v1, torchvision's layout) with random weights and random
    BatchNorm statistics to ``path``, BatchNormalization nodes kept (as an export without
    constant folding gives them), so that an importer hands the backend real BNs to fold. Input
    ``data`` ``[batch, 3, size, size]``, output ``logits``."""
    net = _Network(seed)
    x = net.conv_bn("data", "stem", 3, 64, 7, 2)
    net.nodes.append(
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
                y = net.conv_bn(x, f"{name}_1", cin, width, 1, 1)
                y = net.conv_bn(y, f"{name}_2", width, width, 3, stride)
                y = net.conv_bn(y, f"{name}_3", width, cout, 1, 1, "none")
            else:
                y = net.conv_bn(x, f"{name}_1", cin, cout, 3, stride)
                y = net.conv_bn(y, f"{name}_2", cout, cout, 3, 1, "none")
            shortcut = x
            if stride != 1 or cin != cout:
                shortcut = net.conv_bn(x, f"{name}_down", cin, cout, 1, stride, "none")
            total = net.add(y, shortcut, f"{name}_sum")
            net.nodes.append(helper.make_node("Relu", [total], [f"{name}_out"]))
            x, cin = f"{name}_out", cout
    return net.save(path, x, cin, f"tvm_fuse_resnet{depth}", batch, size, classes)


#: MobileNet-v2's inverted residual stages: (expansion t, output channels c, blocks n, stride s).
MOBILENET_V2_STAGES = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(
    path, batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0
) -> str:
    """Write a MobileNet-v2 (torchvision's layout, width 1.0) with random weights and random
    BatchNorm statistics to ``path``, BN kept: a 3x3 stem, the inverted residual blocks (1x1
    expand -> 3x3 depthwise -> 1x1 linear project, a residual add where the shape allows),
    ReLU6 as ONNX ``Clip(0, 6)``, a 1x1 conv to 1280 channels, then the classifier. Input
    ``data`` ``[batch, 3, size, size]``, output ``logits``."""
    net = _Network(seed)
    x, cin = net.conv_bn("data", "stem", 3, 32, 3, 2, "relu6"), 32
    for stage, (expand, cout, count, first_stride) in enumerate(MOBILENET_V2_STAGES):
        for block in range(count):
            name, stride = f"s{stage}b{block}", first_stride if block == 0 else 1
            hidden = cin * expand
            y = x if expand == 1 else net.conv_bn(x, f"{name}_exp", cin, hidden, 1, 1, "relu6")
            y = net.conv_bn(y, f"{name}_dw", hidden, hidden, 3, stride, "relu6", groups=hidden)
            y = net.conv_bn(y, f"{name}_proj", hidden, cout, 1, 1, "none")
            x = net.add(y, x, f"{name}_sum") if stride == 1 and cin == cout else y
            cin = cout
    x = net.conv_bn(x, "last", cin, 1280, 1, 1, "relu6")
    return net.save(path, x, 1280, "tvm_fuse_mobilenet_v2", batch, size, classes)
