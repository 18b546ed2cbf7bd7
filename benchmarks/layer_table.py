"""The layer table of the benchmarks, and their ONNX models: no TVM.

``bench_layers`` times each layer as a Relay graph, ``bench_backends`` and the Relax backend's
``tvm_fuse.relax.bench`` as an ONNX conv -> BatchNorm -> ReLU (``ONNX_MODELS``, with ResNets and
a residual block); this module is their one list.
It holds ResNet's layers (stem, the 3x3 stages l1-l4, the strided seed and down convs),
ResNet-50 bottleneck 1x1 convs (``r50_*``) and MobileNet-v2-style layers (``mb_*``: 1x1
expansion and projection, a 3x3 depthwise conv).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from tvm_fuse import onnx_example


@dataclass(frozen=True)
class Layer:
    """One conv layer: ``cin -> cout`` channels on an ``hw x hw`` map, square kernel."""

    name: str
    cin: int
    cout: int
    hw: int
    kernel: int
    stride: int
    pad: int
    batch: int = 1
    groups: int = 1

    @property
    def out_hw(self) -> int:
        return (self.hw + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def gflop(self) -> float:
        """Multiply-adds count twice; BN and ReLU are not counted."""
        macs = self.batch * self.cout * self.out_hw**2 * self.cin // self.groups * self.kernel**2
        return 2 * macs / 1e9

    @property
    def winograd_applies(self) -> bool:
        """3x3, stride 1 or 2, groups=1: the convs tvm_fuse may compute with Winograd."""
        return self.kernel == 3 and self.stride in (1, 2) and self.groups == 1

    @property
    def data_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.cin, self.hw, self.hw)


LAYERS = {
    layer.name: layer
    for layer in [
        Layer("stem", 3, 64, 224, 7, 2, 3),
        Layer("l1", 64, 64, 56, 3, 1, 1),
        Layer("seed", 64, 128, 56, 3, 2, 1),
        Layer("l2", 128, 128, 28, 3, 1, 1),
        Layer("l3", 256, 256, 14, 3, 1, 1),
        Layer("l4", 512, 512, 7, 3, 1, 1),
        Layer("down", 64, 128, 56, 1, 2, 0),
        Layer("r50_reduce", 256, 64, 56, 1, 1, 0),
        Layer("r50_expand", 64, 256, 56, 1, 1, 0),
        Layer("r50_c4", 1024, 256, 14, 1, 1, 0),
        Layer("mb_expand", 24, 144, 56, 1, 1, 0),
        Layer("mb_dw", 144, 144, 56, 3, 1, 1, groups=144),
        Layer("mb_project", 144, 24, 56, 1, 1, 0),
        Layer("mb_last", 320, 1280, 7, 1, 1, 0),
    ]
}


def _onnx_layer(layer: Layer):
    return lambda path: onnx_example.conv_bn_act(
        path, layer.data_shape, layer.cout, layer.kernel, layer.stride, layer.pad,
        groups=layer.groups,
    )


#: Name -> writer of the ONNX model to a path: the residual block (64 channels, 56x56), ResNets
#: and MobileNet-v2 at 224x224 with BatchNorm kept, and each layer (the depthwise one too).
ONNX_MODELS = {
    "block": lambda path: onnx_example.residual_block(path, cin=64, channels=64, size=56),
    "resnet18": lambda path: onnx_example.resnet(path, 18),
    "resnet50": lambda path: onnx_example.resnet(path, 50),
    "mobilenet_v2": onnx_example.mobilenet_v2,
    **{f"layer:{n}": _onnx_layer(layer) for n, layer in LAYERS.items()},
}


def write_onnx_model(name: str, folder: Path) -> tuple[Path, np.ndarray]:
    """``ONNX_MODELS[name]`` written into ``folder``, and a seeded standard-normal input of its
    input's shape: what every backend of one run is timed on."""
    path = Path(ONNX_MODELS[name](Path(folder) / f"{name.replace(':', '_')}.onnx"))
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    x = np.random.default_rng(0).standard_normal([d.dim_value for d in dims]).astype("float32")
    return path, x
