"""``tvm-fuse explain``: what the graph half decided for a model, and why.

It runs ``tvm_fuse.optimize`` and reads the result: every fused kernel's task description (and
whether the fast x86 kernel or the generic fallback will implement it, from the strategy's own
``fast_path_refusal``, and the fast kernel's default loop nest, ``schedules.loop_nest``), the
``layout_transform`` ops left, the ``nn.conv2d`` and ``nn.batch_norm`` calls left unfused with
the reason, the other ops (compiled by stock TVM), and the memory plan's summary
(``tvm_fuse.memory.plan``) for the stock graph and for tvm_fuse's, and the weights each holds:
packing and Winograd change their size, which a deployment pays in memory.

Each reason is the pass's own: a conv's is the fusion pass's (``passes.fuse.conv_refusal``:
unsupported groups, dtype or layout, dynamic shapes), read from the optimized module; a
BatchNorm's is FoldBatchNorm's (``passes.fold_bn.fold_refusal``: several consumers, var +
epsilon <= 0, ...), read from the module as that pass sees it (:func:`fold_input`). Read-only:
it never changes the module.
"""

from __future__ import annotations

import collections
import ctypes
from dataclasses import dataclass, field

import tvm
from tvm import relay

from . import boundary_ops
from . import op as fused_op
from .ir_utils import count_ops, relay_functions, use_counts
from .memory import plan
from .memory.weights import fallback_bytes, weights_table
from .memory.liveness import tensor_bytes
from .api import bind_params, describe, optimize
from .passes.fold_bn import conv_chain, fold_refusal
from .passes.fuse import conv_refusal
from .schedules import loop_nest
from .spec import KernelSpec
from .strategy import fast_kernel, fast_path_refusal
from .target import as_target

_EXPLAINED = ("nn.conv2d", "nn.batch_norm", *boundary_ops.LAYOUT_TRANSFORM_OPS, fused_op.OP_NAME)


def _op_name(expr) -> str | None:
    if isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def _shape(expr) -> list:
    return [int(d) if isinstance(d, tvm.tir.IntImm) else "?" for d in expr.checked_type.shape]


def _source(expr) -> str:
    """Where a value comes from, in words."""
    if isinstance(expr, relay.Var):
        return f"graph input {expr.name_hint!r}"
    if isinstance(expr, relay.Constant):
        return "a constant"
    if isinstance(expr, relay.TupleGetItem):
        return f"output {expr.index} of {_source(expr.tuple_value)}"
    return _op_name(expr) or type(expr).__name__


@dataclass(frozen=True)
class Leftover:
    """An op the pipeline left as a stock op, and why."""

    op: str
    shape: tuple
    reason: str

    def __str__(self) -> str:
        return f"{self.op} (input {list(self.shape)}): {self.reason}"


# -- the reasons -----------------------------------------------------------------------------
def conv2d_reason(conv: relay.Call) -> str:
    """Why ``FuseConvBiasAct`` left this (type-checked) ``nn.conv2d`` alone: the pass's own
    reason (``passes.fuse.conv_refusal``)."""
    return conv_refusal(conv) or "fusable: FuseConvBiasAct did not run on this module"


def batch_norm_reason(bn: relay.Call, uses) -> str | None:
    """Why ``FoldBatchNorm`` leaves this (type-checked) ``nn.batch_norm``, or None if it folds
    it: the pass's own reason (``passes.fold_bn.fold_refusal``). ``uses`` are the use counts of
    the function it is in, before the pipeline (see :func:`fold_input`)."""
    if conv_chain(bn.args[0]) is None:
        return f"its input is {_source(bn.args[0])}, not a conv2d: nothing to fold it into"
    return fold_refusal(bn, uses)


def fold_input(mod, params=None) -> tvm.IRModule:
    """``mod`` as the pipeline's FoldBatchNorm sees it: ``params`` bound, types inferred."""
    return relay.transform.InferType()(bind_params(mod, params))


# -- reading the modules ----------------------------------------------------------------------
def _calls(func) -> list[relay.Call]:
    calls = []
    relay.analysis.post_order_visit(
        func, lambda node: calls.append(node) if isinstance(node, relay.Call) else None
    )
    return calls


def leftovers(mod: tvm.IRModule, optimized: tvm.IRModule) -> list[Leftover]:
    """Every ``nn.conv2d`` left in ``optimized`` and every ``nn.batch_norm`` FoldBatchNorm
    leaves in ``mod`` (a :func:`fold_input`), with the reason."""
    found = []
    for func in relay_functions(relay.transform.InferType()(optimized)).values():
        convs = [call for call in _calls(func) if _op_name(call) == "nn.conv2d"]
        found += [_leftover(conv, conv2d_reason(conv)) for conv in convs]
    return found + batch_norm_leftovers(mod)


def batch_norm_leftovers(mod: tvm.IRModule) -> list[Leftover]:
    """Every ``nn.batch_norm`` FoldBatchNorm leaves in ``mod`` (a :func:`fold_input`: the
    module as the pass sees it; shapes in its layout), with the pass's reason."""
    found = []
    for func in relay_functions(mod).values():
        uses = use_counts(func)
        bns = [call for call in _calls(func) if _op_name(call) == "nn.batch_norm"]
        reasons = [(bn, batch_norm_reason(bn, uses)) for bn in bns]
        found += [_leftover(bn, reason) for bn, reason in reasons if reason is not None]
    return found


def _leftover(call: relay.Call, reason: str) -> Leftover:
    return Leftover(call.op.name, tuple(_shape(call.args[0])), reason)


def layout_transforms(mod: tvm.IRModule) -> list[str]:
    """One line per layout transform left in an optimized module (``layout_transform`` and the
    boundary transposes of ``tvm_fuse.boundary_ops``)."""
    lines = []
    for func in relay_functions(relay.transform.InferType()(mod)).values():
        for call in _calls(func):
            if _op_name(call) == "layout_transform":
                layouts = f"{call.attrs.src_layout} -> {call.attrs.dst_layout}"
            elif _op_name(call) in boundary_ops.LAYOUTS:
                src, dst = boundary_ops.LAYOUTS[_op_name(call)]
                layouts = f"{src} -> {dst} ({_op_name(call)})"
            else:
                continue
            arg = call.args[0]
            lines.append(f"{layouts} {_shape(arg)} of {_source(arg)}")
    return lines


def kernel_path(spec: KernelSpec, target) -> str:
    """Which implementation the strategy picks for ``spec`` on ``target``, in words."""
    refusal = fast_path_refusal(spec, target)
    if refusal is None:
        reads = ", transposing its NCHW input as it pads it" if spec.data.layout == "NCHW" else ""
        return f"fast x86 kernel ({fast_kernel(spec).NAME}){reads}"
    return f"generic NHWC fallback ({refusal})"


def kernel_loops(spec: KernelSpec, target) -> str | None:
    """The loop nest the fast kernel runs for ``spec`` on ``target`` by default, in words (None
    where the generic fallback runs it): the kernel half's decisions (``schedules.loop_nest``)."""
    if fast_path_refusal(spec, target):
        return None
    cores = int(target.attrs.get("num-cores", 0))
    return loop_nest.describe(spec, cores)


def other_ops(mod: tvm.IRModule) -> collections.Counter:
    """Op name -> count of the ops this report does not explain one by one."""
    counts = count_ops(mod)
    return collections.Counter({k: v for k, v in counts.items() if k not in _EXPLAINED})


def memory_summary(mod, params, optimized) -> str:
    """The memory plan's summary, stock graph against tvm_fuse's."""
    stock, fused = plan(mod, params), plan(optimized)
    rows = [
        ("peak (planned arena)", stock.peak_bytes, fused.peak_bytes),
        ("lower bound", stock.lower_bound_bytes, fused.lower_bound_bytes),
        ("naive (no reuse)", stock.naive_bytes, fused.naive_bytes),
        ("buffers", len(stock.buffers), len(fused.buffers)),
    ]
    lines = [f"{'':<22}{'stock graph':>16}{'tvm_fuse':>16}"]
    lines += [f"{label:<22}{a:>16,}{b:>16,}" for label, a, b in rows]
    return "\n".join(lines) + "\n(bytes of the intermediate tensors the kernels write)"


def constant_bytes(mod: tvm.IRModule) -> int:
    """Bytes of the distinct constants of ``mod``'s Relay functions (a constant used twice
    counts once): the weights a build of it holds."""
    sizes = {}

    def visit(node):
        if isinstance(node, relay.Constant):
            address = ctypes.cast(node.data.handle, ctypes.c_void_p).value
            sizes[address] = tensor_bytes(node.data.shape, node.data.dtype)

    for func in relay_functions(mod).values():
        relay.analysis.post_order_visit(func, visit)
    return sum(sizes.values())


def weights_summary(bound: tvm.IRModule, optimized: tvm.IRModule, kernels) -> str:
    """The constants of the model (``bound``: its params bound) against those of tvm_fuse's
    ``optimized`` module, and how many of the latter only a non-finite fallback reads
    (``kernels``: the optimized module's specs; ``memory.weights``)."""
    fallback = fallback_bytes(kernels)
    return weights_table(constant_bytes(bound), constant_bytes(optimized), fallback)


# -- the report ------------------------------------------------------------------------------
@dataclass
class Explanation:
    """Everything ``tvm-fuse explain`` prints; ``str()`` is the report."""

    target: tvm.target.Target
    kernels: list[KernelSpec]
    paths: list[str]
    loops: list[str | None]  # the kernel half's loop nest of each kernel (``loop_nest``)
    transforms: list[str]
    leftovers: list[Leftover]
    others: collections.Counter = field(default_factory=collections.Counter)
    memory: str = "not computed"
    weights: str = "not computed"

    def __str__(self) -> str:
        out = [f"target: {self.target}", _title(f"fused kernels ({len(self.kernels)})")]
        for i, (spec, path, loops) in enumerate(zip(self.kernels, self.paths, self.loops), 1):
            out += [f"#{i}", str(spec), f"{'kernel:':<11}{path}"]
            out += [f"{'loops:':<11}{loops}"] if loops else []
            out.append("")
        out.append(_title(f"layout_transform ops left ({len(self.transforms)})"))
        out += self.transforms or ["none"]
        out.append(_title(f"conv2d / batch_norm left unfused ({len(self.leftovers)})"))
        out += [str(item) for item in self.leftovers] or ["none"]
        out.append(_title("other ops (compiled by stock TVM)"))
        out += [", ".join(f"{name} x{n}" for name, n in sorted(self.others.items())) or "none"]
        out.append(_title("memory plan"))
        out.append(self.memory)
        out.append(_title("weights"))
        out.append(self.weights)
        return "\n".join(out)


def _title(text: str) -> str:
    return f"\n== {text} " + "=" * max(0, 74 - len(text))


def explain(
    mod, params=None, target=None, memory: bool = True, algorithm="auto", precision="default"
) -> Explanation:
    """Optimize ``mod`` with ``params`` (and ``tvm_fuse.optimize``'s ``algorithm`` and
    ``precision``) and explain the result for ``target`` (default host)."""
    target = as_target(target)
    bound = fold_input(mod, params)
    optimized = optimize(bound, None, target, algorithm, precision)
    kernels = describe(optimized)
    return Explanation(
        target=target,
        kernels=kernels,
        paths=[kernel_path(spec, target) for spec in kernels],
        loops=[kernel_loops(spec, target) for spec in kernels],
        transforms=layout_transforms(optimized),
        leftovers=leftovers(bound, optimized),
        others=other_ops(optimized),
        memory=memory_summary(mod, params, optimized) if memory else "not computed",
        weights=weights_summary(bound, optimized, kernels),
    )
