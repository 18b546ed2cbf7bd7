"""TVM's model zoo (``tvm.relay.testing``) by name, with parameters that really test BN folding.

Not a pass: the tests and ``benchmarks/zoo.py`` load whole networks from here. relay.testing
initializes every BatchNorm to the identity (gamma 1, beta 0, mean 0, var 1) and every bias to 0,
so a fold that forgot the shift or used the wrong epsilon would still agree with the reference.
``zoo_workload`` therefore redraws those parameters with a seeded RNG (var > 0, gamma around 1);
the weights stay relay.testing's Xavier draws.

``built_layout_transforms`` counts the ``layout_transform`` kernels a *built* module runs: the
graph-half promise is that only the graph's entry and exit transforms survive to run time.
"""

from __future__ import annotations

import json

import numpy as np
import tvm
from tvm.relay import testing

from . import boundary_ops

#: Name -> ``get_workload(batch_size)`` of relay.testing (NCHW, float32, 1000 classes).
ZOO = {
    "resnet-18": lambda batch: testing.resnet.get_workload(num_layers=18, batch_size=batch),
    "resnet-50": lambda batch: testing.resnet.get_workload(num_layers=50, batch_size=batch),
    "mobilenet": lambda batch: testing.mobilenet.get_workload(batch_size=batch),
    "vgg-11": lambda batch: testing.vgg.get_workload(num_layers=11, batch_size=batch),
    "squeezenet1.1": lambda batch: testing.squeezenet.get_workload(version="1.1", batch_size=batch),
    "inception_v3": lambda batch: testing.inception_v3.get_workload(batch_size=batch),
    "densenet-121": lambda batch: testing.densenet.get_workload(
        densenet_size=121, batch_size=batch
    ),
}

#: Param-name suffix -> how to redraw it, given ``rng`` and a length.
_REDRAW = {
    "_gamma": lambda rng, n: rng.uniform(0.5, 1.5, n),
    "_beta": lambda rng, n: rng.normal(0.0, 0.1, n),
    "_moving_mean": lambda rng, n: rng.normal(0.0, 0.1, n),
    "_moving_var": lambda rng, n: rng.uniform(0.5, 1.5, n),
    "_bias": lambda rng, n: rng.normal(0.0, 0.1, n),
}


def randomize_affine_params(params: dict, seed: int = 0) -> dict:
    """A copy of ``params`` with every 1-D BN statistic, gamma, beta and bias redrawn (seeded).

    Names are matched by relay.testing's suffixes (``_gamma``, ``_beta``, ``_moving_mean``,
    ``_moving_var``, ``_bias``), in sorted order so that the draws do not depend on dict order.
    """
    rng = np.random.default_rng(seed)
    out = dict(params)
    for name in sorted(params):
        shape = tuple(params[name].shape)
        for suffix, draw in _REDRAW.items():
            if name.endswith(suffix) and len(shape) == 1:
                out[name] = tvm.nd.array(draw(rng, shape[0]).astype("float32"))
    return out


def zoo_workload(name: str, batch_size: int = 1, seed: int = 0) -> tuple[tvm.IRModule, dict]:
    """``(mod, params)`` of relay.testing's model ``name`` with randomized BN and bias params."""
    if name not in ZOO:
        raise ValueError(f"tvm_fuse.models: unknown model {name!r}; known: {', '.join(ZOO)}")
    mod, params = ZOO[name](batch_size)
    return mod, randomize_affine_params(params, seed)


def built_layout_transforms(lib) -> list[str]:
    """Names of the graph nodes of a ``relay.build`` result whose kernel does a layout transform
    (``layout_transform`` or one of tvm_fuse's boundary transposes).

    A fused kernel's node name lists the ops fused into it (e.g.
    ``tvmgen_default_fused_layout_transform``), so a weight transform left at run time shows up.
    """
    nodes = json.loads(lib.get_graph_json())["nodes"]
    kinds = [name.replace(".", "_") for name in boundary_ops.LAYOUT_TRANSFORM_OPS]  # as in node names
    return [
        n["name"]
        for n in nodes
        if n["op"] == "tvm_op" and any(kind in n["name"] for kind in kinds)
    ]
