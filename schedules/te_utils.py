"""Small TE helpers the hand-written schedules share (TE only: no AutoTVM, no Relay)."""

from __future__ import annotations

from tvm import te


def tagged_stage(out: te.Tensor, tag: str) -> te.Tensor | None:
    """The stage tagged ``tag`` under ``out`` (``out`` included), or None."""
    stack, seen = [out.op], set()
    while stack:
        op = stack.pop()
        if op.tag == tag:
            return op.output(0)
        seen.add(op)
        stack += [t.op for t in op.input_tensors if t.op not in seen]
    return None


def find_tagged(out: te.Tensor, tag: str, kernel: str) -> te.Tensor:
    """The stage tagged ``tag`` under ``out`` (a kernel's conv stage); ``kernel`` names the
    kernel in the error when there is none."""
    found = tagged_stage(out, tag)
    if found is None:
        raise ValueError(f"{kernel}: no stage tagged {tag!r} under {out.op.name}")
    return found


def inline_all_but(s: te.Schedule, out: te.Tensor, conv: te.Tensor) -> None:
    """Inline every compute stage of ``s`` except the output, the conv and the input's padding
    (``data_pad``), which the schedules place themselves."""
    for stage in s.stages:
        keep = stage.op in (out.op, conv.op) or stage.op.name == "data_pad"
        if isinstance(stage.op, te.ComputeOp) and not keep:
            stage.compute_inline()
