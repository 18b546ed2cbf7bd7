"""FuseConvBiasAct: the fusion decision — conv2d chains become one ``tvm_fuse.conv2d_nhwc_fused``.

Where it sits: last pass of ``tvm_fuse.pipeline()``'s fusion, after ``FoldBatchNorm`` (which
turned BN into a bias) and ``ConvertLayoutNHWC`` (which made convs NHWC/HWIO). It matches::

    %0 = nn.conv2d(%x, %w, data_layout="NHWC", kernel_layout="HWIO")   # groups=1, float32
                                        # (or "HWOI", groups == Ci == Co: a depthwise conv)
    %1 = nn.bias_add(%0, %b, axis=3)   # or add(%0, <constant [C] or [1,1,1,C]>); optional
    %2 = add(%1, %r)                   # residual of the output's shape, either side; optional
    %3 = nn.relu(%2)                   # or any other activation of spec.ACTIVATIONS; optional
    =>  tvm_fuse.conv2d_nhwc_fused(%x, %w, %b, %r)    # its spec: bias, residual, relu

The chain grows one op per walk: :func:`fusion_pattern` matches a conv, or one op on a fused
call's output, and the walk (``DFPatternCallback.rewrite``, in C++, so deep graphs never recurse
in Python) replaces it with a fused call whose spec has grown (``KernelSpec.with_epilogue``).
Walks repeat until one grows nothing. A conv the kernel cannot take stays, for the reason
:func:`conv_refusal` gives (``tvm-fuse explain`` prints it); an op above a fused call is absorbed
by the first step rule (``STEPS``) that takes it, and each rule says in words why it does not.
An op is absorbed only when the fused call below it has no other consumer, so no value that
something else reads is fused away. A depthwise conv's HWOI weight enters the fused call as the
HWIO ``[Kh, Kw, 1, C]`` its spec describes (``groups`` = C). Refused: other layouts, grouped
convs, non-float32 tensors, dynamic shapes, addends that are neither per-channel nor of the
output's shape, activations not in the table (e.g. a clip other than (0, 6)).
"""

from __future__ import annotations

import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import CallPattern, DFPatternCallback, is_op, wildcard

from .. import op as fused_op
from ..ir_utils import is_primitive, relay_functions, static_shape, use_counts
from ..spec import ACTIVATIONS, KernelSpec


# -- the pattern --------------------------------------------------------------------------------
def fusion_pattern():
    """What one walk rewrites: a ``conv2d``, or one op applied to a fused call's output: a bias
    (``bias_add`` or ``add``), a residual ``add``, or an activation of ``spec.ACTIVATIONS``."""
    fused = CallPattern(is_op(fused_op.OP_NAME), None)
    steps = [is_op("nn.bias_add")(fused, wildcard()), is_op("add")(fused, wildcard())]
    steps += [_activation_pattern(r, fused) for r in ACTIVATIONS.values() if r.relay_op]
    pattern = is_op("nn.conv2d")(wildcard(), wildcard())
    for step in steps:  # add and multiply are commutative: the matcher tries both orders
        pattern = pattern | step
    return pattern


def _activation_pattern(activation, x):
    """The Relay form of one row of ``spec.ACTIVATIONS`` applied to ``x``."""
    applied = is_op(activation.relay_op)(x)
    return is_op("multiply")(x, applied) if activation.gated else applied


# -- the conv -----------------------------------------------------------------------------------
def conv_refusal(conv: relay.Call) -> str | None:
    """Why a type-checked ``nn.conv2d`` is not fused, or None when ``FuseConvBiasAct`` fuses it."""
    attrs = conv.attrs
    data, weight = (arg.checked_type for arg in conv.args)
    dtypes = sorted({data.dtype, weight.dtype, conv.checked_type.dtype})
    if dtypes != ["float32"]:
        return f"dtype {'/'.join(dtypes)}: the fused kernel is float32 only"
    groups = int(attrs.groups)
    depthwise = _is_depthwise(conv)
    if groups != 1 and not depthwise:
        ci, co = _channels(conv)
        return (
            f"groups={groups} with {ci} input and {co} output channels: the fused kernels take "
            "groups=1 or a depthwise conv (groups == input channels == output channels)"
        )
    layouts = (attrs.data_layout, attrs.kernel_layout)
    if layouts != ("NHWC", "HWOI" if depthwise else "HWIO"):
        return (
            f"layout {'/'.join(layouts)}: the fused kernel takes NHWC data and HWIO weights "
            "(HWOI for a depthwise conv)"
        )
    if static_shape(data) is None or static_shape(weight) is None:
        return "dynamic shape: the fused kernel needs static shapes"
    return None


def _channels(conv: relay.Call) -> tuple:
    """(Ci, Co) of a conv, each an int, or the shape expression when it is not static."""
    attrs = conv.attrs
    out_layout = attrs.out_layout or attrs.data_layout
    ci = conv.args[0].checked_type.shape[attrs.data_layout.index("C")]
    co = conv.checked_type.shape[out_layout.index("C")]
    return tuple(int(c) if isinstance(c, tvm.tir.IntImm) else c for c in (ci, co))


def _is_depthwise(conv: relay.Call) -> bool:
    """groups == Ci == Co > 1: one filter per channel (layouts aside)."""
    groups = int(conv.attrs.groups)
    return groups > 1 and all(c == groups for c in _channels(conv))


def _conv_spec(conv: relay.Call) -> KernelSpec:
    """The spec of a fusable conv, with no epilogue yet (a depthwise conv's HWOI weight
    ``[Kh, Kw, C, 1]`` read as the HWIO ``[Kh, Kw, 1, C]``: the same values in the same order)."""
    attrs = conv.attrs
    padding = [int(p) for p in attrs.padding]
    kh, kw, *_ = weight_shape = static_shape(conv.args[1].checked_type)
    groups = int(attrs.groups)
    if groups != 1:
        weight_shape = (kh, kw, 1, groups)
    return KernelSpec.conv(
        static_shape(conv.args[0].checked_type),
        weight_shape,
        attrs.strides,
        padding * 2 if len(padding) == 2 else padding,
        attrs.dilation,
        groups=groups,
    )


def _hwio_weight(weight: relay.Expr, spec: KernelSpec) -> relay.Expr:
    """The conv's weight as ``spec`` describes it: a depthwise HWOI weight reshaped to HWIO
    (in NumPy when it is a constant), any other weight as it is."""
    if not spec.depthwise:
        return weight
    if isinstance(weight, relay.Constant):
        return relay.const(weight.data.numpy().reshape(spec.weight.shape))
    return relay.reshape(weight, spec.weight.shape)


# -- the steps above it -------------------------------------------------------------------------
class _Step:
    """One op on a fused call's output: ``pre`` (as matched, type-checked), ``post`` (with its
    arguments rewritten), ``chain`` (the index of the fused argument) and ``below`` (that
    argument, as matched)."""

    def __init__(self, pre, post, chain, below):
        self.pre, self.post, self.chain, self.below = pre, post, chain, below

    @property
    def name(self) -> str:
        return self.pre.op.name

    def other(self) -> int:
        return 1 - self.chain


def _open_spec(fuser, step, fused, free, consumers=1):
    """The fused call's spec if it may absorb ``step``, else why not: its ``free`` fields are
    unset, and the node below ``step`` has ``consumers`` consumers, all inside the step."""
    spec = fused_op.spec_of_call(fused)
    taken = [name for name in free if getattr(spec, name) not in (None, "none")]
    if taken:
        return f"the kernel already has its {taken[0]}"
    readers = fuser.consumers(step.below)
    if readers != consumers:
        return f"the kernel's output feeds {readers} ops"
    return spec


def _grown(fused, spec, bias=None, residual=None, **fields):
    """``fused`` with its spec grown by a bias, a residual or an activation."""
    args = {"bias": None, "residual": None, **fused_op.call_arguments(fused)}
    args.update((k, v) for k, v in (("bias", bias), ("residual", residual)) if v is not None)
    spec = spec.with_epilogue(bias is not None, residual is not None, **fields)
    return fused_op.fused_call(spec, **args)


def _absorb_bias(fuser, step, fused):
    """``bias_add(x, b, axis=3)`` or ``add(x, b)``, ``b`` a [C] tensor or a [1,1,1,C] constant."""
    if step.name not in ("nn.bias_add", "add"):
        return f"{step.name} is not a bias"
    if step.name == "nn.bias_add" and int(step.pre.attrs.axis) not in (3, -1):
        return f"bias_add along axis {int(step.pre.attrs.axis)}, not the output channels"
    spec = _open_spec(fuser, step, fused, free=("bias", "activation"))
    if isinstance(spec, str):
        return spec
    ty = step.pre.args[step.other()].checked_type
    bias = _per_channel(step.post.args[step.other()], ty, spec.out_channels)
    if bias is None:
        return f"the addend {ty} is not a per-channel bias"
    return _grown(fused, spec, bias=bias)


def _per_channel(expr, ty, channels):
    """``expr`` (of type ``ty``) as a [C] bias, or None: a [C] tensor, or a constant of shape
    [1,1,1,C]."""
    shape = static_shape(ty)
    if ty.dtype != "float32" or shape is None:
        return None
    if shape == (channels,):
        return expr
    if isinstance(expr, relay.Constant) and shape == (1, 1, 1, channels):
        return relay.const(expr.data.numpy().reshape(channels))
    return None


def _absorb_residual(fuser, step, fused):
    """``add(x, r)`` or ``add(r, x)``, ``r`` of the output's shape (a ResNet shortcut)."""
    if step.name != "add":
        return f"{step.name} is not a residual add"
    spec = _open_spec(fuser, step, fused, free=("residual", "activation"))
    if isinstance(spec, str):
        return spec
    ty = step.pre.args[step.other()].checked_type
    if static_shape(ty) != spec.out.shape or ty.dtype != spec.out.dtype:
        return f"the addend {ty} is not of the output's type"
    return _grown(fused, spec, residual=step.post.args[step.other()])


def _absorb_activation(fuser, step, fused):
    """An activation of ``spec.ACTIVATIONS``: ``relu(x)``, ``clip(x, 0, 6)``, ``x * sigmoid(x)``
    (whose gate must feed nothing else), ..."""
    name = _activation_of(step)
    if name is None:
        return f"{step.name} with these attributes is not an activation of the kernel"
    row = ACTIVATIONS[name]
    if row.gated and fuser.consumers(step.pre.args[step.other()]) != 1:
        return f"the {row.relay_op} gate feeds other ops too"
    spec = _open_spec(fuser, step, fused, free=("activation",), consumers=1 + row.gated)
    if isinstance(spec, str):
        return spec
    alpha = float(getattr(step.pre.attrs, row.alpha_attr)) if row.alpha_attr else 0.0
    return _grown(fused, spec, activation=name, alpha=alpha)


def _activation_of(step) -> str | None:
    """The name of the activation ``step`` applies to the chain, or None."""
    for name, row in ACTIVATIONS.items():
        if not row.relay_op:
            continue
        if row.gated:
            if step.name == "multiply" and _is_gate(step.pre.args[step.other()], row, step.below):
                return name
        elif step.name == row.relay_op and _attrs_match(step.pre, row.relay_attrs):
            return name
    return None


def _is_gate(expr, row, x) -> bool:
    """Whether ``expr`` is ``row.relay_op(x)``."""
    is_call = isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op)
    return is_call and expr.op.name == row.relay_op and expr.args[0].same_as(x)


def _attrs_match(call, wanted: dict) -> bool:
    def number(value):
        return float(value.value if hasattr(value, "value") else value)

    return all(number(getattr(call.attrs, k)) == v for k, v in wanted.items())


#: The rules an op above the conv may be absorbed by, tried in order; each returns the grown
#: fused call or, as a string, why it does not take the op.
STEPS = (_absorb_bias, _absorb_residual, _absorb_activation)


# -- the rewrite --------------------------------------------------------------------------------
class _ChainFuser(DFPatternCallback):
    """One walk over one type-checked function: each conv becomes a fused call, each op on a
    fused call's output is absorbed when a rule of ``STEPS`` takes it. ``grown`` counts them."""

    def __init__(self, func):
        super().__init__(require_type=False, rewrite_once=True)
        self.pattern = fusion_pattern()
        self.func = func
        self.grown = 0
        self._counts = None

    def consumers(self, node) -> int:
        """How many ops of the function read ``node`` (counted once, when first asked)."""
        if self._counts is None:
            self._counts = use_counts(self.func)
        return self._counts[node]

    def callback(self, pre, post, node_map):
        grown = self.grow(pre, post)
        if isinstance(grown, str):
            return post
        self.grown += 1
        return grown

    def grow(self, pre, post):
        """The fused call that replaces ``pre``, or why there is none."""
        if pre.op.name == "nn.conv2d":
            refusal = conv_refusal(pre)
            if refusal:
                return refusal
            spec = _conv_spec(pre)
            data, weight = post.args
            return fused_op.fused_call(spec, data, _hwio_weight(weight, spec))
        refusal = "no argument is a fused call"
        for chain in _fused_arguments(pre):
            step = _Step(pre, post, chain, pre.args[chain])
            for rule in STEPS:
                refusal = rule(self, step, post.args[chain])
                if not isinstance(refusal, str):
                    return refusal
        return refusal


def _fused_arguments(call) -> list[int]:
    """Indices of ``call``'s arguments that are fused calls (``bias_add``: its data only)."""
    indices = (0,) if call.op.name == "nn.bias_add" else range(len(call.args))
    return [i for i in indices if fused_op.is_fused_call(call.args[i])]


def FuseConvBiasAct() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM pass style)
    """Fuse ``conv2d (NHWC) -> [bias] -> [residual] -> [activation]`` chains into one call."""

    def transform(mod, _ctx):
        grown = True
        while grown:  # one walk per step of the longest chain, and one that finds nothing
            mod, grown = relay.transform.InferType()(mod), 0
            for gvar, func in relay_functions(mod).items():
                fuser = _ChainFuser(func)
                rewritten = fuser.rewrite(func) if not is_primitive(func) else func
                if fuser.grown:
                    mod.update_func(gvar, rewritten)
                    grown += fuser.grown
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.FuseConvBiasAct")
