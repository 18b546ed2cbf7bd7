"""Small TE helpers the hand-written kernels share (TE and TOPI only: no AutoTVM, no Relay;
both backends import them)."""

from __future__ import annotations

from tvm import te, topi

try:  # TVM 0.19 (the Relay stack)
    from tvm.tir import Select
except ImportError:  # apache-tvm >= 0.26 (the Relax stack): TIR's expressions are in tvm.tirx
    from tvm.tirx import Select


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


def pad_rows_in_parallel(s: te.Schedule, pad: te.Tensor) -> None:
    """Compute the padded input ``pad`` (NHWC) whole, up front, in a parallel loop over its
    (N, H) rows: split by rows as the kernels split their output."""
    n, h, _, _ = s[pad].op.axis
    s[pad].parallel(s[pad].fuse(n, h))


def pad_for_tiles(data: te.Tensor, spec, wo_pad: int) -> tuple[te.Tensor, bool]:
    """The input a conv of ``spec`` (a ``KernelSpec``) computed on ``wo_pad >= Wo`` output
    columns reads, and whether it clamps its column index to ``Wo - 1``. The columns past Wo
    are computed and never stored: a conv that pads anyway pads its input for them too
    (``data_pad``); one that does not (1x1, "valid") reads column Wo-1 again for them, which
    spares the kernel a copy of every input row it reads (the copy cost the direct kernel's 1x1
    convs 5-10 %, strided ones more: they copy the columns they skip)."""
    top, left, bottom, right = spec.padding
    if not any(spec.padding):
        return data, wo_pad > spec.out_hw[1]
    w, kw = spec.data.shape[2], spec.kernel_size[1]
    sw, dw = spec.strides[1], spec.dilation[1]
    extra = max(0, (wo_pad - 1) * sw + (kw - 1) * dw + 1 - (w + left + right))
    pad_after = [0, bottom, right + extra, 0]
    return topi.nn.pad(data, [0, top, left, 0], pad_after, name="data_pad"), False
