"""KernelSpec: the task description the graph half hands to the kernel half.

This is the border between the halves (``docs/architecture.md``). It says *what* one fused
kernel computes — tensors (shape, layout, dtype), conv parameters and the epilogue — and nothing
about *how*: no Relay, no loops.
``tvm_fuse.op`` converts it to and from the fused op's attributes; ``schedules/`` reads it to
choose tiles. It round-trips through JSON so a task can be stored, compared and tuned.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

#: Activations the fused kernel can apply to its accumulators, with the formula it prints.
ACTIVATIONS = {
    "none": "{x}",
    "relu": "max(0, {x})",
    "relu6": "min(max(0, {x}), 6)",
    "leaky_relu": "leaky_relu({x}, alpha={alpha:g})",
    "sigmoid": "sigmoid({x})",
    "silu": "{x} * sigmoid({x})",
}


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
    after the bias (a ResNet shortcut), or None.
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

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"KernelSpec: unknown activation {self.activation!r}; "
                f"supported: {', '.join(ACTIVATIONS)}"
            )
        for name in ("strides", "padding", "dilation"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "alpha", float(self.alpha))

    # -- what it computes -------------------------------------------------------------------
    @property
    def ops(self) -> tuple[str, ...]:
        """The chain of ops fused into this kernel, in order."""
        chain = ["conv2d"]
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
        return "out = " + ACTIVATIONS[self.activation].format(x=x, alpha=self.alpha)

    @property
    def kernel_size(self) -> tuple[int, int]:
        layout, shape = self.weight.layout, self.weight.shape
        return shape[layout.index("H")], shape[layout.index("W")]

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
        return 2 * out_elems * kh * kw * self.in_channels

    # -- printing and serialisation ---------------------------------------------------------
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
                f"dilation {same(self.dilation)}",
            ),
            ("epilogue", self.epilogue),
        ]
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
