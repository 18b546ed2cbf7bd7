"""The Relax backend's API: ``pipeline``, ``optimize``, ``build``, ``describe``.

``pipeline(target)`` is one ``tvm.transform.Pass`` (use it inside your own ``Sequential``):
``FoldConstant`` (layout ops on constants with NumPy first) -> ``RaiseMinMax`` -> ``ClipAsMinMax``
-> ``FoldBatchNorm`` -> ``ConvertLayoutNHWC`` -> ``DenseAsConv`` -> ``FuseConvBiasAct`` ->
``LowerFusedConv``.
``optimize`` binds the params and runs it; ``build`` then compiles with ``tvm.compile`` (Relax's
default pipeline, which leaves the fused kernels as they are: they are scheduled and opaque) and
returns its executable, to run with ``relax.VirtualMachine``.
Before ``tvm.compile``, ``build`` legalizes the stock ops left (refused convs, pooling, ...) and
gives them ``ScheduleFallback``'s parallel, vectorized schedule, which stock Relax does not.
``describe`` lists the fused kernels' task descriptions in the order ``main`` calls them.
``build(memory="tvm_fuse")`` places the activations in one arena at tvm_fuse's planner's offsets;
``memory_plan`` gives that plan's numbers.
"""

from __future__ import annotations

import warnings

import tvm
from tvm import relax

from ..spec import KernelSpec
from . import compat, kernel, records, tir_pipeline
from .clip import ClipAsMinMax, RaiseMinMax
from .dense import DenseAsConv
from .fallback import ScheduleFallback
from .fold_bn import FoldBatchNorm
from .fuse import FuseConvBiasAct, spec_of_function
from .layout import ConvertLayoutNHWC, FoldConstantTransforms
from .lower import LowerFusedConv
from .memory import ArenaPlan, memory_pipeline, plan_of, until_static_plan


def pipeline(target=None, algorithm="auto", precision="default") -> tvm.transform.Pass:
    """tvm_fuse's Relax passes as one pass; the kernels are chosen and the weights packed for
    ``target`` (None: the enclosing ``with target``, else this CPU). ``algorithm="direct"`` turns
    Winograd off; ``precision="high"`` allows F(2x2) only (``tvm_fuse.algorithm_options``)."""
    lower = LowerFusedConv(target, algorithm, precision)  # checks the options first
    return tvm.transform.Sequential(
        [
            FoldConstantTransforms(),
            relax.transform.FoldConstant(),
            RaiseMinMax(),
            ClipAsMinMax(),
            FoldBatchNorm(),
            ConvertLayoutNHWC(),
            DenseAsConv(target),
            FuseConvBiasAct(),
            lower,
        ],
        name="tvm_fuse.relax.pipeline",
    )


def bind_params(mod: tvm.IRModule, params: dict | None) -> tvm.IRModule:
    """``mod`` with ``params`` (name -> array) bound as constants of ``main``."""
    if not params:
        return mod
    return relax.transform.BindParams("main", dict(params))(mod)


def optimize(
    mod: tvm.IRModule,
    params: dict | None = None,
    target=None,
    algorithm="auto",
    precision="default",
) -> tvm.IRModule:
    """``mod`` with ``params`` bound, through :func:`pipeline` (options: see there)."""
    return pipeline(target, algorithm, precision)(bind_params(mod, params))


def build(
    mod: tvm.IRModule,
    params: dict | None = None,
    target=None,
    algorithm="auto",
    precision="default",
    memory: str = "tvm",
    tuning_records=None,
):
    """``tvm.compile`` of the optimized module for ``target`` (None: this CPU), the stock ops
    left in it legalized first and given the fallback schedule (``ScheduleFallback``).
    ``algorithm``, ``precision``: see :func:`pipeline`; ``memory``: "tvm" keeps Relax's storages,
    "tvm_fuse" places the activations in one arena (``relax.memory``): less memory (ResNet-18:
    -18 %), but measured 3-6 % slower on ResNet-18/50 (znver3), hence not the default; with
    ``tuning_records`` (a file of ``tvm_fuse.relax.tune``), the tuned kernels take its tiles."""
    target = compat.as_target(target)
    relax_pipeline = memory_pipeline(memory)  # a bad choice fails before the build
    lowered = lowered_for_compile(mod, params, target, algorithm, precision, tuning_records)
    _warn_without_noalias(lowered)
    return tvm.compile(
        lowered, target=target, relax_pipeline=relax_pipeline, tir_pipeline=tir_pipeline.NAME
    )


def _warn_without_noalias(mod: tvm.IRModule) -> None:
    """Name the PrimFuncs of ``mod`` that do not say their buffers never alias
    (``compat.NOALIAS``): with one of them in the module, apache-tvm compiles every PrimFunc
    without noalias parameters, tvm_fuse's fused convs included (the stem's conv measured 2.7x
    slower). TVMScript functions lack the attribute unless they set it; legalized ops have it."""
    lacking = sorted(
        gv.name_hint
        for gv, func in mod.functions_items()
        if isinstance(func, compat.PrimFunc) and not compat.has_flag(func, compat.NOALIAS)
    )
    if lacking:
        warnings.warn(
            f"tvm_fuse.relax.build: without the attribute '{compat.NOALIAS}' on PrimFunc(s) "
            f"{', '.join(lacking)}, apache-tvm compiles every kernel of the module without "
            "noalias (tvm_fuse's convs measured up to 2.7x slower); where a function's buffers "
            f'never alias, add T.func_attr({{"{compat.NOALIAS}": True}}) to it',
            stacklevel=3,
        )


def lowered_for_compile(
    mod: tvm.IRModule,
    params: dict | None,
    target,
    algorithm="auto",
    precision="default",
    tuning_records=None,
) -> tvm.IRModule:
    """What ``build`` hands ``tvm.compile``: optimized (the tuned kernels with the tiles of
    ``tuning_records``), stock ops legalized and scheduled."""
    optimized = optimize(mod, params, target, algorithm, precision)
    if tuning_records is not None:
        optimized = records.apply(optimized, tuning_records, target)
    lowered = relax.transform.LegalizeOps()(optimized)
    with target:
        return ScheduleFallback()(lowered)


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


def op_calls(func, op_name: str) -> list:
    """The calls of the op ``op_name`` (e.g. ``"relax.call_tir"``) that ``func``'s bindings make,
    in order."""
    return [
        b.value
        for block in func.body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == op_name
    ]


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


def memory_plan(
    mod: tvm.IRModule, params: dict | None = None, target=None
) -> ArenaPlan | None:
    """The arena plan ``tvm_fuse.relax.build(memory="tvm_fuse")`` makes for ``mod``'s ``main``
    (print it for Relax's storage bytes against the arena and the lower bound), or None."""
    target = compat.as_target(target)
    with target:
        planned = tvm.transform.Sequential(until_static_plan())(
            lowered_for_compile(mod, params, target)
        )
    return plan_of(planned)
