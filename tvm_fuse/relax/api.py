"""The Relax backend's API: ``pipeline``, ``optimize``, ``build``, ``describe``.

``pipeline(target)`` is one ``tvm.transform.Pass`` (use it inside your own ``Sequential``):
``FoldConstant`` (layout ops on constants with NumPy first) -> ``FoldBatchNorm`` ->
``ConvertLayoutNHWC`` -> ``FuseConvBiasAct`` -> ``LowerFusedConv``. ``optimize`` binds the params and runs it; ``build`` then compiles with
``tvm.compile`` (Relax's default pipeline, which leaves the fused kernels as they are: they are
scheduled and opaque) and returns its executable, to run with ``relax.VirtualMachine``.
Before ``tvm.compile``, ``build`` legalizes the stock ops left (refused convs, pooling, ...) and
gives them ``ScheduleFallback``'s parallel, vectorized schedule, which stock Relax does not.
``describe`` lists the fused kernels' task descriptions in the order ``main`` calls them.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..spec import KernelSpec
from . import compat, kernel, records
from .fallback import ScheduleFallback
from .fold_bn import FoldBatchNorm
from .fuse import FuseConvBiasAct, spec_of_function
from .layout import ConvertLayoutNHWC, FoldConstantTransforms
from .lower import LowerFusedConv


def pipeline(target=None) -> tvm.transform.Pass:
    """tvm_fuse's Relax passes as one pass; the kernels are chosen and the weights packed for
    ``target`` (None: the enclosing ``with target``, else this CPU)."""
    return tvm.transform.Sequential(
        [
            FoldConstantTransforms(),
            relax.transform.FoldConstant(),
            FoldBatchNorm(),
            ConvertLayoutNHWC(),
            FuseConvBiasAct(),
            LowerFusedConv(target),
        ],
        name="tvm_fuse.relax.pipeline",
    )


def bind_params(mod: tvm.IRModule, params: dict | None) -> tvm.IRModule:
    """``mod`` with ``params`` (name -> array) bound as constants of ``main``."""
    if not params:
        return mod
    return relax.transform.BindParams("main", dict(params))(mod)


def optimize(mod: tvm.IRModule, params: dict | None = None, target=None) -> tvm.IRModule:
    """``mod`` with ``params`` bound, through :func:`pipeline`."""
    return pipeline(target)(bind_params(mod, params))


def build(mod: tvm.IRModule, params: dict | None = None, target=None, tuning_records=None):
    """``tvm.compile`` of the optimized module for ``target`` (None: this CPU), the stock ops
    left in it legalized first and given the fallback schedule (``ScheduleFallback``); with
    ``tuning_records`` (a file of ``tvm_fuse.relax.tune``), the tuned kernels take its tiles."""
    target = compat.as_target(target)
    optimized = optimize(mod, params, target)
    if tuning_records is not None:
        optimized = records.apply(optimized, tuning_records, target)
    lowered = relax.transform.LegalizeOps()(optimized)
    with target:
        lowered = ScheduleFallback()(lowered)
    return tvm.compile(lowered, target=target)


def describe(mod: tvm.IRModule) -> list[KernelSpec]:
    """The spec of every fused kernel ``main`` calls (lowered or still a composite), in order."""
    main = mod["main"]
    specs = []
    for block in main.body.blocks:
        for binding in block.bindings:
            spec = _spec_of_call(mod, binding.value)
            if spec is not None:
                specs.append(spec)
    return specs


def _spec_of_call(mod, value):
    if not isinstance(value, relax.Call):
        return None
    callee = value.op
    if isinstance(callee, tvm.ir.Op) and callee.name == "relax.call_tir":
        callee = value.args[0]
    if not isinstance(callee, tvm.ir.GlobalVar):
        return None
    func = mod[callee]
    if isinstance(func, compat.PrimFunc):
        return kernel.spec_of(func)
    return spec_of_function(func)
