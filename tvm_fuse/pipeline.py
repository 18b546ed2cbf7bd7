"""The drop-in pass pipeline and the public ``optimize`` / ``build`` / ``describe`` (DESIGN.md §3).

``pipeline()`` is an ordinary ``tvm.transform.Sequential``: FoldBatchNorm, ConvertLayoutNHWC,
FoldConstant, FuseConvBiasAct. ``optimize`` binds the params first (the passes only fold
constants) and checks the module, so that user mistakes come back as one clear error instead of
a traceback from deep inside TVM. ``build`` then hands the module to stock ``relay.build``; the
fused calls reach the kernel half through the strategy registered on import.
"""

from __future__ import annotations

import tvm
from tvm import relay

from . import op as fused_op
from . import strategy  # noqa: F401  (registers the kernels the fused calls build with)
from .passes.fold_bn import FoldBatchNorm
from .passes.fuse import FuseConvBiasAct
from .passes.layout import ConvertLayoutNHWC
from .spec import KernelSpec
from .target import as_target
from .tuning.records import apply_records, check_records

OPT_LEVEL = 3


def passes() -> list[tvm.transform.Pass]:
    """The pipeline's passes in order (the demo prints the IR after each)."""
    return [FoldBatchNorm(), ConvertLayoutNHWC(), relay.transform.FoldConstant(), FuseConvBiasAct()]


def pipeline() -> tvm.transform.Pass:
    """The tvm_fuse passes as one Sequential, for use inside any Relay flow."""
    return tvm.transform.Sequential(
        [relay.transform.InferType(), *passes()], opt_level=0, name="tvm_fuse.pipeline"
    )


def _pass_context() -> tvm.transform.PassContext:
    """The caller's PassContext, raised to opt_level 3 (ConvertLayout needs it) if lower."""
    current = tvm.transform.PassContext.current()
    if current.opt_level >= OPT_LEVEL:
        return current
    return tvm.transform.PassContext(
        opt_level=OPT_LEVEL,
        required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        instruments=list(current.instruments),
        config=dict(current.config),
    )


def _as_module(mod) -> tvm.IRModule:
    if isinstance(mod, relay.Function):
        return tvm.IRModule.from_expr(mod)
    if not isinstance(mod, tvm.IRModule) or "main" not in [gv.name_hint for gv in mod.functions]:
        raise TypeError(f"tvm_fuse: expected a Relay IRModule with a 'main' function, got {mod!r}")
    return mod


def bind_params(mod: tvm.IRModule, params) -> tvm.IRModule:
    """``mod`` with ``params`` bound as constants in ``main``; unknown names are an error."""
    mod = _as_module(mod)
    main = mod["main"]
    free = relay.analysis.free_vars(main)
    if free:
        names = ", ".join(v.name_hint for v in free)
        raise ValueError(
            f"tvm_fuse: 'main' uses free variables that are neither function inputs nor "
            f"params: {names}. Add them to the function's parameters or bind them."
        )
    if not params:
        return mod
    inputs = {p.name_hint for p in main.params}
    unknown = sorted(set(params) - inputs)
    if unknown:
        raise ValueError(
            f"tvm_fuse: params {unknown} are not inputs of 'main' "
            f"(its inputs are: {', '.join(sorted(inputs))})"
        )
    mod = tvm.IRModule(dict(mod.functions), mod.type_definitions)
    mod["main"] = relay.build_module.bind_params_by_name(main, dict(params))
    return mod


def optimize(mod, params=None) -> tvm.IRModule:
    """Bind ``params`` and run ``pipeline()``: the graph half's decisions, as a Relay module."""
    mod = bind_params(mod, params)
    with _pass_context():
        return pipeline()(mod)


def build(mod, params=None, target=None, tuning_records=None, **kwargs):
    """``optimize`` then stock ``relay.build``; returns what ``relay.build`` returns.

    The result runs with ``tvm.contrib.graph_executor`` under the model's original input names
    and NCHW input shapes (the layout change is inside the graph). ``tuning_records``: an AutoTVM
    log (``tvm_fuse.tune``), validated as a whole first (``tuning.records.check_records``: a
    ``RecordsError`` for a corrupt or foreign log) and applied with ``apply_history_best``;
    kernels without a record use the analytic default.
    """
    target = as_target(target)
    records = check_records(tuning_records, target) if tuning_records is not None else None
    mod = optimize(mod, params)
    _require_static_inputs(mod)
    with _pass_context(), apply_records(records):
        return relay.build(mod, target=target, **kwargs)


def _require_static_inputs(mod: tvm.IRModule) -> None:
    """The graph executor needs static shapes; say so instead of failing in its planner."""
    main = relay.transform.InferType()(mod)["main"]
    for param in main.params:
        shape = param.checked_type.shape
        if not all(isinstance(d, tvm.tir.IntImm) for d in shape):
            dims = ", ".join(str(d) if isinstance(d, tvm.tir.IntImm) else "?" for d in shape)
            raise ValueError(
                f"tvm_fuse.build: input {param.name_hint!r} has a dynamic shape ({dims}); "
                "relay.build's graph executor needs static shapes. Give static input shapes, "
                "or compile tvm_fuse.optimize(mod, params) with relay.vm.compile."
            )


class _FusedCallCollector(relay.ExprVisitor):
    def __init__(self):
        super().__init__()
        self.specs: list[KernelSpec] = []

    def visit_call(self, call):
        super().visit_call(call)  # arguments first: specs come out in execution order
        if fused_op.is_fused_call(call):
            self.specs.append(fused_op.spec_from_call(call))


def describe(mod: tvm.IRModule) -> list[KernelSpec]:
    """The task description of every fused kernel in an optimized module, in execution order."""
    mod = relay.transform.InferType()(_as_module(mod))
    collector = _FusedCallCollector()
    for _, func in mod.functions.items():
        if isinstance(func, relay.Function):
            collector.visit(func)
    return collector.specs
