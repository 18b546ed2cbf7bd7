"""Live ranges of the tensors a graph's kernels produce, independent of where the graph came from.

Sits between the front ends (``relay_kernels`` walks a fused Relay ``main``, ``graph_json`` a
built module's graph) and the planner. A front end feeds :class:`Schedule` the kernels in the
order the graph executor runs them; step ``k`` is the ``k``-th kernel. Each kernel output is one
:class:`Tensor`, live from the step that writes it to the last step that reads it, inclusive (a
kernel's inputs and outputs are live together: no kernel works in place).

What counts: every kernel output. Graph inputs, params and constants are not tensors here (the
executor gives them storage of their own, never shared). The graph's outputs are tensors, marked
``is_output`` and live until the last step, like TVM's graph plan keeps them; so the arena covers
everything the executor allocates for activations, which is what its own storage is compared to.
Reshape-only kernels are aliases, not steps: TVM's executor runs them as ``__nop`` on the input's
storage, so a use of the alias is a use of the aliased tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import tvm

Value = Optional[int]  # a tensor id from Schedule.kernel, or None: an input, param or constant


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of a dense tensor, as TVM's graph plan counts them (whole bytes per element)."""
    dt = tvm.runtime.DataType(dtype)
    return math.prod(shape) * ((dt.bits * dt.lanes + 7) // 8)


@dataclass(frozen=True)
class Tensor:
    """One kernel output and its inclusive live range ``[start, end]`` of steps."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    size: int  # bytes
    start: int
    end: int
    is_output: bool = False

    @property
    def live_range(self) -> tuple[int, int]:
        return self.start, self.end


@dataclass(frozen=True)
class Liveness:
    """The kernels in execution order and the tensors they produce."""

    steps: tuple[str, ...]
    tensors: tuple[Tensor, ...]


class Schedule:
    """Collects kernels one by one; :meth:`finish` turns them into a :class:`Liveness`."""

    def __init__(self):
        self._steps: list[str] = []
        self._tensors: list[dict] = []

    def kernel(self, name: str, inputs: Iterable[Value], outputs) -> list[int]:
        """Record the next kernel: it reads ``inputs`` and writes ``outputs``, a list of
        ``(shape, dtype)``. Returns the ids of the tensors it writes."""
        step = len(self._steps)
        self._steps.append(name)
        for value in inputs:
            if value is not None:
                self._tensors[value]["end"] = step
        ids = []
        for index, (shape, dtype) in enumerate(outputs):
            suffix = f":{index}" if len(outputs) > 1 else ""
            ids.append(len(self._tensors))
            shape = tuple(int(d) for d in shape)
            self._tensors.append(
                {
                    "name": f"{name}#{step}{suffix}",
                    "shape": shape,
                    "dtype": str(dtype),
                    "size": tensor_bytes(shape, str(dtype)),
                    "start": step,
                    "end": step,
                }
            )
        return ids

    def finish(self, outputs: Iterable[Value]) -> Liveness:
        """The liveness, with ``outputs`` (the graph's results) kept live until the last step."""
        results = {v for v in outputs if v is not None}
        last = len(self._steps) - 1
        tensors = []
        for i, t in enumerate(self._tensors):
            if i in results:
                t = {**t, "end": last}
            tensors.append(Tensor(**t, is_output=i in results))
        return Liveness(tuple(self._steps), tuple(tensors))
