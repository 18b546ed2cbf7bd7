"""The drop-in pass pipeline and the public ``optimize`` / ``build`` / ``describe``.

``pipeline()`` is an ordinary ``tvm.transform.Sequential`` of the passes ``passes()`` lists, from
FoldBatchNorm to UnpackBatchNorm. Params may be bound first (``pipeline(params=...)``,
``optimize``) or later by ``relay.build(mod, params=...)``: the passes fold and fuse either way
(``tvm_fuse.params``), and PackWeights packs the weights for the kernel the target will run at
any opt_level. ``optimize`` checks the module, so that user mistakes come back as one clear error
instead of a traceback from deep inside TVM. ``build`` then hands the module to stock
``relay.build``; the fused calls reach the kernel half through the strategy registered on import.
"""

from __future__ import annotations

import tvm
from tvm import relay

from . import dispatch
from . import op as fused_op
from . import strategy  # noqa: F401  (registers the kernels the fused calls build with)
from .algorithm_options import check_options
from .ir_utils import relay_functions
from .lowering import pass_context_like
from .memory.apply import apply_to_factory, check_mode as check_memory_mode
from .errors import UserError
from .params import BindParams, WarnComputedWeights, bind_main, require_no_free_vars
from .passes.algorithm import ChooseAlgorithm
from .passes.bias import FlattenChannelBias
from .passes.dense import DenseAsConv
from .passes.entry import ReadNCHWInput
from .passes.fold_bn import FoldBatchNorm
from .passes.fuse import FuseConvBiasAct
from .passes.layout import ConvertLayoutNHWC
from .passes.pack import PackWeights
from .passes.unpack_bn import UnpackBatchNorm
from .sizes import check_tensor_sizes
from .spec import KernelSpec
from .target import as_target

OPT_LEVEL = 3


def passes(target=None, algorithm="auto", precision="default") -> list[tvm.transform.Pass]:
    """The pipeline's passes in order (the demo prints the IR after each). ``target``: what
    ``ChooseAlgorithm`` and ``PackWeights`` decide for (default: the current target, else the
    host); ``algorithm``, ``precision``: see ``passes.algorithm``."""
    return [
        FoldBatchNorm(),
        ConvertLayoutNHWC(),
        relay.transform.FoldConstant(),
        DenseAsConv(target),
        FlattenChannelBias(),
        FuseConvBiasAct(),
        ChooseAlgorithm(target, algorithm, precision),
        PackWeights(target),
        ReadNCHWInput(),
        UnpackBatchNorm(),
    ]


def pipeline(params=None, target=None, algorithm="auto", precision="default") -> tvm.transform.Pass:
    """The tvm_fuse passes as one Sequential, for use inside any Relay flow.

    ``params`` (name -> array), if given, are bound into ``main`` first, as ``relay.build``
    binds them. Without them, BatchNorm folds into expressions of the unbound inputs that
    ``relay.build(mod, params=params)`` computes once it binds them. The weights are packed for
    ``target`` (default: ``tvm.target.Target.current()`` when it runs, else the host), so build
    for the same target.
    """
    first = [] if params is None else [BindParams(params)]
    steps = [
        *first,
        relay.transform.InferType(),
        *passes(target, algorithm, precision),
        WarnComputedWeights(params is not None),
    ]
    return tvm.transform.Sequential(steps, opt_level=0, name="tvm_fuse.pipeline")


def _pass_context() -> tvm.transform.PassContext:
    """The caller's PassContext, raised to opt_level 3 (ConvertLayout needs it) if lower."""
    current = tvm.transform.PassContext.current()
    if current.opt_level >= OPT_LEVEL:
        return current
    return pass_context_like(current, opt_level=OPT_LEVEL)


def _as_module(mod) -> tvm.IRModule:
    if isinstance(mod, relay.Function):
        require_no_free_vars(mod)  # before from_expr, which may type-check the function
        mod = tvm.IRModule.from_expr(mod)
    if not isinstance(mod, tvm.IRModule) or "main" not in [gv.name_hint for gv in mod.functions]:
        raise UserError(f"tvm_fuse: expected a Relay IRModule with a 'main' function, got {mod!r}")
    require_no_free_vars(mod["main"])  # before type checking, which refuses them with a traceback
    _check_types(mod)
    return mod


def _check_types(mod: tvm.IRModule) -> None:
    """One line naming the first type error of ``mod``, instead of TVM's diagnostics dump and
    traceback from deep inside the pipeline."""
    messages = []
    tvm.ir.diagnostics.override_renderer(
        lambda ctx: messages.extend(str(d.message) for d in ctx.diagnostics)
    )
    try:
        relay.transform.InferType()(mod)
    except tvm.error.DiagnosticError:
        first = " ".join((messages or ["(no message)"])[0].split()).rstrip(".")
        raise UserError(
            f"tvm_fuse: the model does not type-check: {first}; fix the model (relay.build "
            "refuses it too)"
        ) from None
    finally:
        tvm.ir.diagnostics.override_renderer(None)


def bind_params(mod, params) -> tvm.IRModule:
    """``mod`` with ``params`` bound as constants in ``main`` (``tvm_fuse.params.bind_main``)."""
    return bind_main(_as_module(mod), params)


def optimize(mod, params=None, target=None, algorithm="auto", precision="default") -> tvm.IRModule:
    """Bind ``params`` and run ``pipeline``: the graph half's decisions, as a Relay module whose
    weights are packed for ``target`` (default: the current target, else the host).
    ``algorithm="direct"`` turns Winograd off; ``precision="high"`` allows F(2x2) only."""
    mod = _as_module(mod)
    with _pass_context():
        return pipeline(params or {}, target, algorithm, precision)(mod)


def build(
    mod,
    params=None,
    target=None,
    tuning_records=None,
    memory="plan",
    algorithm="auto",
    precision="default",
    **kwargs,
):
    """``optimize`` then stock ``relay.build``; returns what ``relay.build`` returns.

    The result runs with ``tvm.contrib.graph_executor`` under the model's original input names
    and NCHW input shapes (the layout change is inside the graph). ``tuning_records``: an AutoTVM
    log (``tvm_fuse.tune``), validated as a whole first (``tuning.records.check_records``: a
    ``RecordsError`` for a corrupt or foreign log) and applied with ``apply_history_best``;
    kernels without a record use the analytic default. TopHub is never consulted
    (``dispatch.build_context``). ``memory="plan"`` gives the graph executor tvm_fuse's storage
    assignment where it is smaller than TVM's (``tvm_fuse.memory.apply``); ``"tvm"`` keeps TVM's.
    ``algorithm``: ``"auto"`` (3x3 convs of stride 1 or 2 run as Winograd where the cost model
    expects it to pay) or ``"direct"``; ``precision``: ``"default"`` or ``"high"`` (F(2x2) only).
    """
    check_memory_mode(memory)
    check_options(algorithm, precision)
    target = as_target(target)
    records = dispatch.checked_records(tuning_records, target)
    mod = optimize(mod, params, target, algorithm, precision)
    _require_static_inputs(mod)
    check_tensor_sizes(mod, "tvm_fuse.build")
    with _pass_context(), dispatch.build_context(records):
        return apply_to_factory(relay.build(mod, target=target, **kwargs), memory)


def _require_static_inputs(mod: tvm.IRModule) -> None:
    """The graph executor needs static shapes; say so instead of failing in its planner."""
    main = relay.transform.InferType()(mod)["main"]
    for param in main.params:
        shape = param.checked_type.shape
        if not all(isinstance(d, tvm.tir.IntImm) for d in shape):
            dims = ", ".join(str(d) if isinstance(d, tvm.tir.IntImm) else "?" for d in shape)
            raise UserError(
                f"tvm_fuse.build: input {param.name_hint!r} has a dynamic shape ({dims}); "
                "relay.build's graph executor needs static shapes. Give static input shapes, "
                "or compile tvm_fuse.optimize(mod, params) with relay.vm.compile."
            )


def describe(mod: tvm.IRModule) -> list[KernelSpec]:
    """The task description of every fused kernel in an optimized module, in execution order
    (a post-order walk, in C++: arguments first, and no Python recursion on deep graphs)."""
    mod = relay.transform.InferType()(_as_module(mod))
    calls: list = []
    for func in relay_functions(mod).values():
        relay.analysis.post_order_visit(
            func, lambda node: calls.append(node) if fused_op.is_fused_call(node) else None
        )
    return [fused_op.spec_of_call(call) for call in calls]
