"""Params for the pipeline: binding them as ``relay.build`` does, and saying when they are missing.

``tvm_fuse.pipeline(params=...)``, ``optimize`` and ``build`` bind params into ``main`` with
:func:`bind_main` before the passes (so BatchNorm folds into constants at once). It accepts what
stock ``relay.build`` accepts: a name that is no input of ``main`` (a framework export's unused
weights) is ignored with a warning. It refuses, with one :class:`~tvm_fuse.errors.UserError`
naming the param, a value whose shape or dtype is not that of the input it binds (stock TVM
fails later with a C++ backtrace).

Without params the passes still fold and fuse: the folded weights and biases are Relay
expressions of the unbound inputs, which ``relay.build(mod, params=...)``'s own FoldConstant
computes once it binds them. :func:`WarnComputedWeights` (the pipeline's last pass) warns once,
naming the inputs and the fix, where those expressions would instead run at every inference:
params that were bound but left some inputs out, or a PassContext ``opt_level`` below 2 (at
which ``relay.build`` does not run FoldConstant).
"""

from __future__ import annotations

import warnings

import numpy as np
import tvm
from tvm import relay

from . import op as fused_op
from .errors import UserError

#: relay.build runs FoldConstant from this opt_level on.
FOLD_CONSTANT_OPT_LEVEL = 2


def require_no_free_vars(main: relay.Function) -> None:
    """A UserError naming the free variables of ``main`` (TVM's own check is a traceback)."""
    free = relay.analysis.free_vars(main)
    if free:
        names = ", ".join(v.name_hint for v in free)
        raise UserError(
            f"tvm_fuse: 'main' uses free variables that are neither function inputs nor "
            f"params: {names}. Add them to the function's parameters or bind them."
        )


def bind_main(mod: tvm.IRModule, params) -> tvm.IRModule:
    """``mod`` with the ``params`` that name inputs of ``main`` bound as constants."""
    main = mod["main"]
    require_no_free_vars(main)
    if not params:
        return mod
    inputs = {p.name_hint: p for p in relay.transform.InferType()(mod)["main"].params}
    unknown = sorted(set(params) - set(inputs))
    if unknown:
        warnings.warn(
            f"tvm_fuse: params {unknown} name no input of 'main' and are ignored, as relay.build "
            f"ignores them (its inputs are: {', '.join(sorted(inputs))})",
            stacklevel=3,
        )
    known = {name: value for name, value in params.items() if name in inputs}
    for name, value in known.items():
        _check_value(name, value, inputs[name].checked_type)
    mod = tvm.IRModule(dict(mod.functions), mod.type_definitions)
    mod["main"] = relay.build_module.bind_params_by_name(main, known)
    return mod


def _check_value(name, value, expected: relay.TensorType) -> None:
    """A param's value must have its input's rank, static dims and dtype."""
    shape = tuple(int(d) for d in np.shape(value))
    dtype = str(value.dtype) if hasattr(value, "dtype") else str(np.asarray(value).dtype)
    dims = [int(d) if isinstance(d, tvm.tir.IntImm) else None for d in expected.shape]
    shape_ok = len(shape) == len(dims) and all(d in (None, s) for d, s in zip(dims, shape))
    if shape_ok and dtype == expected.dtype:
        return
    want = ", ".join("?" if d is None else str(d) for d in dims)
    raise UserError(
        f"tvm_fuse: param {name!r} has shape {shape} and dtype {dtype}, but input {name!r} of "
        f"'main' is ({want}) {expected.dtype}; give a value of that shape and dtype"
    )


def BindParams(params) -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass factory)
    """Bind ``params`` into ``main`` (see :func:`bind_main`), as the pipeline's first pass."""
    return tvm.transform.module_pass(
        lambda mod, _ctx: bind_main(mod, params), opt_level=0, name="tvm_fuse.BindParams"
    )


def computed_weight_inputs(mod: tvm.IRModule) -> tuple[int, list[str]]:
    """(number of fused calls, sorted input names) where a fused call's weight or bias is not a
    constant: it is computed from those inputs of ``main``."""
    calls, names = 0, set()

    def visit(node):
        nonlocal calls
        if not fused_op.is_fused_call(node):
            return
        args = fused_op.call_arguments(node)
        computed = [args[k] for k in ("weight", "bias") if k in args and not _is_constant(args[k])]
        calls += bool(computed)
        names.update(v.name_hint for arg in computed for v in relay.analysis.free_vars(arg))

    relay.analysis.post_order_visit(mod["main"], visit)
    return calls, sorted(names)


def _is_constant(expr) -> bool:
    return isinstance(expr, relay.Constant)


def WarnComputedWeights(bound: bool) -> tvm.transform.Pass:  # pylint: disable=invalid-name
    """Warn once if fused weights would be computed at every run (see the module docstring).

    ``bound``: params were bound before the passes, so the inputs left are run-time inputs."""

    def transform(mod, ctx):
        calls, names = computed_weight_inputs(mod)
        if not calls:
            return mod
        if bound:
            warnings.warn(
                f"tvm_fuse: the weights or biases of {calls} fused conv(s) are computed at every "
                f"run from the inputs {names}, which are not in params; pass them in params to "
                "compute them once at compile time",
                stacklevel=2,
            )
        elif ctx.opt_level < FOLD_CONSTANT_OPT_LEVEL:
            warnings.warn(
                f"tvm_fuse.pipeline: the weights or biases of {calls} fused conv(s) are "
                f"expressions of the unbound inputs {names}; relay.build folds them into "
                f"constants only at opt_level >= {FOLD_CONSTANT_OPT_LEVEL}, so at opt_level "
                f"{ctx.opt_level} they are computed at every run. Pass the params to "
                "tvm_fuse.pipeline(params=params), or build at opt_level >= "
                f"{FOLD_CONSTANT_OPT_LEVEL}",
                stacklevel=2,
            )
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.WarnComputedWeights")
