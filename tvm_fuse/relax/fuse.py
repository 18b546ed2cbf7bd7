"""FuseConvBiasAct (Relax): conv2d -> bias -> [residual add] -> activation as one composite.

Runs after ``ConvertLayoutNHWC``: it fuses NHWC/HWIO float32 convs (groups 1, static shapes) with
the element-wise ops after them into a composite function ``tvm_fuse.conv2d_nhwc_fused`` (Relax's
``FuseOpsByPattern``), whose ``tvm_fuse.spec`` attribute is the task description
(``KernelSpec`` as JSON); ``LowerFusedConv`` then replaces each call by the kernel. The chain::

    %c = R.nn.conv2d(%x, %w, data_layout="NHWC", kernel_layout="HWIO")
    %b = R.add(%c, B)            # optional: a constant of one value per output channel
    %r = R.add(%b, %s)           # optional: a residual of the output's shape (either operand)
    %y = act(%r)                 # optional: an activation of spec.ACTIVATIONS, Relax forms below

Refused (left to TVM's stock ops, the model still right): a conv output, bias sum or residual sum
with another consumer or returned by the function, a grouped conv that is not depthwise (groups
== Ci == Co: fused, for the depthwise kernel), another layout, a dtype other than float32, dynamic
shapes, a residual that broadcasts, ``clip`` with bounds other than 0 and 6.
ONNX's ``Clip(0, 6)`` arrives as ``R.minimum(R.maximum(x, 0), 6)`` once ``RaiseMinMax`` (``clip``)
has turned the importer's two ``call_tir`` back into ops: it is fused as ``relu6_max_first``, the
order that keeps the import's NaN -> 0; Relax's ``R.clip`` (``R.nn.relu6``) arrives as
``R.maximum(R.minimum(x, 6), 0)`` once ``ClipAsMinMax`` ran, or as itself: ``relu6``, NaN -> 6.
Other bounds are refused.
"""

from __future__ import annotations

import itertools

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from ..spec import ACTIVATIONS, KernelSpec
from . import compat

COMPOSITE = "tvm_fuse.conv2d_nhwc_fused"
SPEC_ATTR = "tvm_fuse.spec"


def _relu6(x):  # R.nn.relu6(x) is R.clip(x, 0, 6); ClipAsMinMax gives max(min(x, 6), 0)
    min_first = is_op("relax.maximum")(is_op("relax.minimum")(x, is_const()), is_const())
    return is_op("relax.clip")(x, wildcard(), wildcard()) | min_first


def _relu6_max_first(x):  # ONNX's Clip(x, 0, 6) as RaiseMinMax gives it
    return is_op("relax.minimum")(is_op("relax.maximum")(x, is_const()), is_const())


def _silu(x):
    sigmoid = is_op("relax.sigmoid")(x)
    return (
        is_op("relax.nn.silu")(x)
        | is_op("relax.multiply")(x, sigmoid)
        | is_op("relax.multiply")(sigmoid, x)
    )


#: The Relax form of each activation of ``spec.ACTIVATIONS`` (the same names), as a pattern
#: over the chain's output ``x``; ``alpha`` is read from the op's ``alpha`` attribute.
RELAX_ACTIVATIONS = {
    "none": None,
    "relu": lambda x: is_op("relax.nn.relu")(x),
    "relu6": _relu6,
    "relu6_max_first": _relu6_max_first,
    "leaky_relu": lambda x: is_op("relax.nn.leakyrelu")(x),
    "sigmoid": lambda x: is_op("relax.sigmoid")(x),
    "silu": _silu,
}
assert set(RELAX_ACTIVATIONS) == set(ACTIVATIONS), "every activation needs its Relax form"


def fusion_patterns() -> list:
    """The ``FusionPattern``s, longest chains first (FuseOpsByPattern tries them in order)."""
    patterns = []
    for activation, residual, bias in itertools.product(
        [a for a in RELAX_ACTIVATIONS if a != "none"] + ["none"], (True, False), (True, False)
    ):
        conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
        annotations = {"conv": conv}
        x = conv
        if bias:
            annotations["bias"] = is_const()
            x = is_op("relax.add")(x, annotations["bias"])
        if residual:
            annotations["residual"] = wildcard()
            x = is_op("relax.add")(x, annotations["residual"]) | is_op("relax.add")(
                annotations["residual"], x
            )
        if activation != "none":
            x = RELAX_ACTIVATIONS[activation](x)
        annotations["root"] = x
        patterns.append(relax.transform.FusionPattern(COMPOSITE, x, annotations, _check))
    return patterns


def _check(context) -> bool:
    return fusion_refusal(context) is None


def fusion_refusal(context) -> str | None:
    """Why a match of :func:`fusion_patterns` is not fused (a sentence), or None."""
    from tvm.relax.backend.utils import has_leaking_intermediate_variables

    conv = context.annotated_expr["conv"]
    attrs = conv.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts != ("NHWC", "HWIO", "NHWC"):
        return f"the conv's layouts {layouts} are not NHWC/HWIO"
    shapes = [compat.tensor_shape(e) for e in (conv.args[0], conv.args[1], conv)]
    if any(s is None for s in shapes):
        return "the conv's shapes are not static"
    if int(attrs.groups) != 1 and not is_depthwise(conv):
        return "the conv is grouped"
    dtypes = {compat.tensor_dtype(e) for e in (conv.args[0], conv.args[1], conv)}
    if dtypes != {"float32"}:
        return f"dtypes {sorted(dtypes)} are not float32"
    out_shape = shapes[2]
    bias = context.annotated_expr.get("bias")
    if bias is not None:
        value = compat.constant_value(bias)
        if value.size != out_shape[-1] or value.shape[-1:] != (out_shape[-1],):
            return f"the add after the conv is not a per-channel bias ({value.shape})"
    residual = context.annotated_expr.get("residual")
    if residual is not None and compat.tensor_shape(residual) != out_shape:
        return "the residual add broadcasts"
    if residual is not None and compat.tensor_dtype(residual) != "float32":
        return "the residual is not float32"
    root = context.annotated_expr["root"]
    bounds = _clip_bounds(root, context.matched_bindings)
    if bounds is not None and bounds != (0.0, 6.0):
        return f"clip{bounds} is not relu6"
    if has_leaking_intermediate_variables(context):
        return "an intermediate result of the chain has another consumer"
    return None


def is_depthwise(conv) -> bool:
    """Whether ``conv`` (an NHWC/HWIO ``relax.nn.conv2d`` of static shapes) is depthwise: groups
    == Ci == Co > 1, one filter per channel (HWIO weight ``[Kh, Kw, 1, C]``); any other grouped
    conv is not fused."""
    groups = int(conv.attrs.groups)
    data, weight = (compat.tensor_shape(e) for e in conv.args[:2])
    out = compat.tensor_shape(conv)
    if groups == 1 or None in (data, weight, out):
        return False
    return groups == data[-1] == out[-1] and weight[2] == 1


def _op_name(call) -> str:
    return call.op.name if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) else ""


def _clip_bounds(call, bindings):
    """(low, high) of ``clip(x, low, high)``, ``minimum(maximum(x, low), high)`` or
    ``maximum(minimum(x, high), low)`` (the inner call looked up in ``bindings``), else None."""
    if _op_name(call) == "relax.clip":
        return tuple(float(compat.prim_value(a)) for a in call.args[1:])
    if _op_name(call) in ("relax.minimum", "relax.maximum"):
        inner = bindings.get(call.args[0], call.args[0])
        bounds = float(compat.prim_value(inner.args[1])), float(compat.prim_value(call.args[1]))
        return bounds if _op_name(call) == "relax.minimum" else bounds[::-1]
    return None


# -- the composite's chain, read back ----------------------------------------------------------
class Chain:
    """The parameters of a composite function, by role, and its spec."""

    def __init__(self, func):
        bindings = [b for block in func.body.blocks for b in block.bindings]
        conv = next(b.value for b in bindings if _op_name(b.value) == "relax.nn.conv2d")
        self.data, self.weight = conv.args[0], conv.args[1]
        self.bias = self.residual = None
        self.activation, self.alpha = "none", 0.0
        current = next(b.var for b in bindings if b.value.same_as(conv))
        out_shape = compat.tensor_shape(conv)
        for binding in bindings:
            value, name = binding.value, _op_name(binding.value)
            if value.same_as(conv) or not _uses(value, current):
                continue
            if name == "relax.add":
                other = next(a for a in value.args if not a.same_as(current))
                # the first add of a per-channel operand is the bias (FuseConvBiasAct's pattern:
                # a constant); an output-shaped one is the residual (on a 1x1 map both are)
                first = self.bias is None and self.residual is None
                if first and compat.tensor_shape(other) != out_shape:
                    self.bias = other
                else:
                    self.residual = other
            elif name != "relax.sigmoid" or not _silu_gate(binding.var, bindings):
                self.activation = _activation_name(value)
                if name == "relax.nn.leakyrelu":
                    self.alpha = float(value.attrs.alpha)
            current = binding.var
        self.spec = KernelSpec.conv(
            compat.tensor_shape(self.data),
            compat.tensor_shape(self.weight),
            conv.attrs.strides,
            conv.attrs.padding,
            conv.attrs.dilation,
            groups=int(conv.attrs.groups),
        ).with_epilogue(
            self.bias is not None,
            self.residual is not None,
            activation=self.activation,
            alpha=self.alpha,
        )


def _uses(value, var) -> bool:
    args = value.args if isinstance(value, relax.Call) else ()
    return any(a.same_as(var) for a in args)


def _silu_gate(var, bindings) -> bool:
    """Whether the sigmoid bound to ``var`` is the gate of an ``x * sigmoid(x)``."""
    return any(_op_name(b.value) == "relax.multiply" and _uses(b.value, var) for b in bindings)


def _activation_name(value) -> str:
    name = _op_name(value)
    return {
        "relax.nn.relu": "relu",
        "relax.clip": "relu6",
        # the pair's outer op names it: max(min(x, 6), 0) is relu6, min(max(x, 0), 6) the other
        "relax.maximum": "relu6",
        "relax.minimum": "relu6_max_first",
        "relax.nn.leakyrelu": "leaky_relu",
        "relax.sigmoid": "sigmoid",
        "relax.nn.silu": "silu",
        "relax.multiply": "silu",
    }[name]


def spec_of_function(func) -> KernelSpec | None:
    """The spec a composite function carries (its ``tvm_fuse.spec``), or None."""
    attrs = func.attrs
    if attrs is None or SPEC_ATTR not in attrs:
        return None
    return KernelSpec.from_json(str(attrs[SPEC_ATTR]))


def FuseConvBiasAct() -> tvm.transform.Pass:  # pylint: disable=invalid-name  (TVM's pass style)
    """The pass: fuse every chain it can prove safe, each composite annotated with its spec."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.FuseConvBiasAct")
    def annotate(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            attrs = func.attrs if isinstance(func, relax.Function) else None
            if attrs is not None and str(attrs.get("Composite", "")) == COMPOSITE:
                mod[gv] = func.with_attr(SPEC_ATTR, Chain(func).spec.to_json())
        return mod

    fuse = relax.transform.FuseOpsByPattern(fusion_patterns(), bind_constants=False)
    return tvm.transform.Sequential([fuse, annotate], name="tvm_fuse.FuseConvBiasAct")
