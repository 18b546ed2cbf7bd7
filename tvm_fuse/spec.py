"""KernelSpec: the task description the graph half hands to the kernel half.

It is the border between the two halves (``docs/architecture.md``). It says *what* one fused
kernel computes — tensors (shape, layout, dtype), conv parameters, the epilogue and the algorithm —
and nothing about *how*: no Relay, no loops. The fused op's attributes encode it
(``tvm_fuse.op.fused_call`` / ``spec_of_call``); the strategy hands it to the kernel's compute;
``schedules/`` reads its named fields. The weight's layout says how the weight arrives: ``HWIO``
(logical, as the graph half makes it) or a packed layout ending in ``{VL}o`` (VL output channels
innermost, Co zero-padded to whole vectors); the real Co is always the output's. It round-trips
through JSON so a task can be stored, compared and tuned. It refuses unknown activations and
algorithms.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Activation:
    """One activation the fused kernel applies to its accumulators: the formula a spec prints
    (``{x}`` is the pre-activation sum, ``{term}`` the same as a factor of a product), and the
    Relay form ``FuseConvBiasAct`` absorbs as it: ``relay_op`` applied to the chain's
    output, with the attribute values ``relay_attrs`` (``alpha`` read from ``alpha_attr``), or,
    when ``gated``, ``x * relay_op(x)``; a row without ``relay_op`` has no Relay form (the Relax
    backend fuses it). The kernels compute it in ``schedules/epilogue.py``."""

    formula: str
    relay_op: str = ""
    relay_attrs: dict = field(default_factory=dict)
    alpha_attr: str = ""
    gated: bool = False


#: The activations, by the name a spec carries: the one table the spec, the fusion pass and the
#: epilogue tests read.
ACTIVATIONS = {
    "none": Activation("{x}"),
    "relu": Activation("max(0, {x})", "nn.relu"),
    "relu6": Activation("max(min({x}, 6), 0)", "clip", {"a_min": 0.0, "a_max": 6.0}),
    # the other order, as Relax imports ONNX's Clip(0, 6): NaN -> 0 where relu6 gives 6
    "relu6_max_first": Activation("min(max({x}, 0), 6)"),
    "leaky_relu": Activation(
        "leaky_relu({x}, alpha={alpha:g})", "nn.leaky_relu", alpha_attr="alpha"
    ),
    "sigmoid": Activation("sigmoid({x})", "sigmoid"),
    "silu": Activation("{term} * sigmoid({x})", "sigmoid", gated=True),
}


#: How a fused kernel computes the conv: "direct" (any conv), "winograd" (3x3, stride 1 or 2).
ALGORITHMS = ("direct", "winograd")
#: The layouts a fused kernel reads its data in: NHWC, or the NCHW tensor the graph's entry
#: transpose would have made it from (the kernel transposes as it reads: ``with_nchw_data``).
DATA_LAYOUTS = ("NHWC", "NCHW")

_LANES = re.compile(r"(\d+)o$")


def layout_lanes(layout: str) -> int | None:
    """VL of a weight layout whose innermost axis is VL output channels (``OHWI8o`` -> 8), or
    None for a layout without one (``HWIO``). The one parser of the vector width."""
    match = _LANES.search(layout)
    return int(match.group(1)) if match else None


def conv_output_hw(
    in_hw: tuple[int, int],
    kernel_size: tuple[int, int],
    strides: tuple[int, int],
    padding: tuple[int, int, int, int],
    dilation: tuple[int, int],
) -> tuple[int, int]:
    """(Ho, Wo) of a conv of an ``in_hw`` map; ``padding`` is (top, left, bottom, right)."""
    (h, w), (kh, kw), (sh, sw), (dh, dw) = in_hw, kernel_size, strides, dilation
    top, left, bottom, right = padding
    ho = (h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
    wo = (w + left + right - ((kw - 1) * dw + 1)) // sw + 1
    return ho, wo


@dataclass(frozen=True)
class TensorSpec:
    """One tensor at the kernel's interface."""

    shape: tuple[int, ...]
    layout: str
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    def describe(self, name: str) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"{name} [{dims}]  {self.layout}  {self.dtype}".rstrip()


@dataclass(frozen=True)
class KernelSpec:
    """The task description of one fused conv2d + bias + [residual add] + activation kernel.

    ``padding`` is four-sided: (top, left, bottom, right), as Relay's conv2d stores it.
    ``bias`` is None for a conv whose chain carries no bias; ``residual`` is the tensor added
    after the bias (a ResNet shortcut), or None. ``algorithm`` is "direct" or "winograd";
    ``winograd_tile`` is m of F(m x m, 3 x 3) for "winograd", else 0. ``groups`` is 1, or C for a
    depthwise conv (groups == Ci == Co: one filter per channel; its HWIO weight is ``[Kh, Kw,
    1, C]``); other grouped convs are not fused. ``finite_weight`` says the graph half saw the
    weight's values, a constant with no NaN or Inf, so a kernel may take 0 x weight as 0 (the
    padding's products); ``PackWeights`` sets it where a kernel reads it (the depthwise one).
    Grow or change a spec with ``dataclasses.replace``.
    """

    data: TensorSpec
    weight: TensorSpec
    out: TensorSpec
    bias: TensorSpec | None = None
    residual: TensorSpec | None = None
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    activation: str = "none"
    alpha: float = 0.0
    algorithm: str = "direct"
    winograd_tile: int = 0
    groups: int = 1
    finite_weight: bool = False

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"KernelSpec: unknown activation {self.activation!r}; "
                f"supported: {', '.join(ACTIVATIONS)}"
            )
        if self.data.layout not in DATA_LAYOUTS:
            raise ValueError(
                f"KernelSpec: data layout {self.data.layout!r}; "
                f"supported: {', '.join(DATA_LAYOUTS)}"
            )
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"KernelSpec: unknown algorithm {self.algorithm!r}; "
                f"supported: {', '.join(ALGORITHMS)}"
            )
        for name in ("strides", "padding", "dilation"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "winograd_tile", int(self.winograd_tile))
        object.__setattr__(self, "groups", int(self.groups))
        object.__setattr__(self, "finite_weight", bool(self.finite_weight))
        if self.groups != 1 and not self.depthwise:
            raise ValueError(
                f"KernelSpec: groups={self.groups} with {self.in_channels} input and "
                f"{self.out_channels} output channels; a fused kernel is a plain conv (groups=1) "
                "or a depthwise one (groups == input channels == output channels)"
            )
        if (self.algorithm == "winograd") != (self.winograd_tile > 0):
            raise ValueError(
                f"KernelSpec: winograd_tile {self.winograd_tile} does not fit algorithm "
                f"{self.algorithm!r} (m > 0 exactly for winograd)"
            )

    @classmethod
    def conv(
        cls,
        data_shape,
        weight_shape,
        strides=(1, 1),
        padding=(0, 0, 0, 0),
        dilation=(1, 1),
        dtype: str = "float32",
        groups: int = 1,
    ) -> KernelSpec:
        """The spec of a bare conv of NHWC data and an HWIO weight (no epilogue): ``[Kh, Kw,
        Ci/groups, Co]``, so ``[Kh, Kw, 1, C]`` for a depthwise conv (``groups`` = C)."""
        data_shape, weight_shape = (tuple(int(d) for d in s) for s in (data_shape, weight_shape))
        kh, kw, _, co = weight_shape
        ho, wo = conv_output_hw(data_shape[1:3], (kh, kw), strides, tuple(padding), dilation)
        return cls(
            data=TensorSpec(data_shape, "NHWC", dtype),
            weight=TensorSpec(weight_shape, "HWIO", dtype),
            out=TensorSpec((data_shape[0], ho, wo, co), "NHWC", dtype),
            strides=strides,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )

    @classmethod
    def dense(cls, n: int, k: int, m: int, dtype: str = "float32") -> KernelSpec:
        """The spec of a dense layer ``x [N, K] . W [K, M]`` as both backends' ``DenseAsConv``
        rewrite it: a 1x1 conv of a 1 x N map of K channels into M."""
        return cls.conv((1, 1, n, k), (1, 1, k, m), dtype=dtype)

    def with_epilogue(self, bias: bool = False, residual: bool = False, **fields) -> KernelSpec:
        """This spec grown by a [Co] bias and/or an output-shaped residual (when True), with
        other ``fields`` (activation, alpha) replaced."""
        if bias:
            fields["bias"] = TensorSpec((self.out_channels,), "C", self.out.dtype)
        if residual:
            fields["residual"] = self.out
        return dataclasses.replace(self, **fields)

    def with_nchw_data(self) -> KernelSpec:
        """This spec reading its NHWC data from the NCHW tensor it is the transpose of."""
        n, h, w, c = self.data.shape
        return dataclasses.replace(self, data=TensorSpec((n, c, h, w), "NCHW", self.data.dtype))

    # -- what it computes -------------------------------------------------------------------
    @property
    def ops(self) -> tuple[str, ...]:
        """The chain of ops fused into this kernel, in order."""
        chain = ["depthwise_conv2d" if self.depthwise else "conv2d"]
        if self.bias is not None:
            chain.append("bias")
        if self.residual is not None:
            chain.append("add")
        if self.activation != "none":
            chain.append(self.activation)
        return tuple(chain)

    @property
    def epilogue(self) -> str:
        """The epilogue as a formula over the accumulator ``acc``."""
        x = "acc"
        if self.bias is not None:
            x += " + b"
        if self.residual is not None:
            x += " + r"
        term = f"({x})" if " " in x else x  # x as a factor of a product
        formula = ACTIVATIONS[self.activation].formula
        return "out = " + formula.format(x=x, term=term, alpha=self.alpha)

    @property
    def argument_names(self) -> tuple[str, ...]:
        """The fused call's arguments, in order: data, weight, then bias and residual if any."""
        optional = (name for name in ("bias", "residual") if getattr(self, name) is not None)
        return ("data", "weight", *optional)

    @property
    def kernel_size(self) -> tuple[int, int]:
        """(Kh, Kw); 3 x 3 for Winograd, whose weight is in the transformed domain."""
        if self.algorithm == "winograd":
            return 3, 3
        layout, shape = self.weight.layout, self.weight.shape
        return shape[layout.index("H")], shape[layout.index("W")]

    @property
    def lanes(self) -> int | None:
        """VL of a packed weight (its layout's ``{VL}o``), None for a logical HWIO weight."""
        return layout_lanes(self.weight.layout)

    @property
    def depthwise(self) -> bool:
        """One filter per channel: groups == Ci == Co (> 1)."""
        return 1 < self.groups == self.in_channels == self.out_channels

    @property
    def out_hw(self) -> tuple[int, int]:
        return self.out.shape[1], self.out.shape[2]

    @property
    def in_channels(self) -> int:
        return self.data.shape[self.data.layout.index("C")]

    @property
    def out_channels(self) -> int:
        return self.out.shape[self.out.layout.index("C")]

    @property
    def flops(self) -> int:
        """Multiply-adds count twice; the epilogue is not counted."""
        kh, kw = self.kernel_size
        out_elems = 1
        for d in self.out.shape:
            out_elems *= d
        return 2 * out_elems * kh * kw * self.in_channels // self.groups

    # -- printing and serialisation ---------------------------------------------------------
    @property
    def algorithm_name(self) -> str:
        """"direct", "depthwise" (direct, one filter per channel), or "winograd F(m x m)" with
        its tile (as tables and reports print it)."""
        if self.depthwise:
            return "depthwise"
        m = self.winograd_tile
        return f"{self.algorithm} F({m}x{m})" if self.algorithm == "winograd" else self.algorithm

    def __str__(self) -> str:
        def same(values):
            return str(values[0]) if len(set(values)) == 1 else str(values)

        lines = [
            ("op", " + ".join(self.ops)),
            ("input", self.data.describe("A")),
            ("weight", self.weight.describe("w")),
        ]
        if self.bias is not None:
            lines.append(("bias", self.bias.describe("b")))
        if self.residual is not None:
            lines.append(("residual", self.residual.describe("r")))
        lines += [
            ("output", self.out.describe("out")),
            (
                "conv",
                f"stride {same(self.strides)}, padding {same(self.padding)}, "
                f"dilation {same(self.dilation)}"
                + (f", groups {self.groups}" if self.groups != 1 else ""),
            ),
            ("epilogue", self.epilogue),
        ]
        if self.algorithm != "direct":
            lines.append(("algorithm", self.algorithm_name))
        return "\n".join(f"{key + ':':<11}{value}" for key, value in lines)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, fields: dict) -> KernelSpec:
        fields = dict(fields)
        for name in ("data", "weight", "out", "bias", "residual"):
            if fields.get(name) is not None:
                fields[name] = TensorSpec(**fields[name])
        return cls(**fields)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> KernelSpec:
        return cls.from_dict(json.loads(text))
