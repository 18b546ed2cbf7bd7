"""A PrimFunc that takes its tensors at an offset of a storage, for ``PlaceInArena``.

The Relax VM gives a tensor placed at offset ``k`` of a storage as the storage's pointer plus a
``byte_offset`` of ``k``; a PrimFunc whose buffers have the default element offset 0 refuses
such an argument. Declaring the buffers with ``offset_factor`` (the arena's alignment in
elements) makes the offset a variable that the function adds to its indices; the computation
and the schedule are unchanged. The declaration is rewritten in the function's TVMScript, which
apache-tvm 0.27 prints and parses back losslessly (its Python API has no TIR buffer mutator).
"""

from __future__ import annotations

import re

import tvm

_DTYPE = re.compile(r'"([a-z]+[0-9]*(?:x[0-9]+)?)"')


def at_any_offset(func, alignment: int):
    """``func`` with each buffer parameter taking an offset that is a multiple of
    ``alignment`` bytes (left as it is when it already declares an ``offset_factor``)."""
    lines = func.script().splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("def "))
    lines[at] = _with_offset_factors(lines[at], alignment)
    return tvm.script.from_source("\n".join(lines))


def _with_offset_factors(signature: str, alignment: int) -> str:
    out, pos = [], 0
    while True:
        start = signature.find("T.Buffer(", pos)
        if start < 0:
            out.append(signature[pos:])
            return "".join(out)
        end = _closing(signature, start + len("T.Buffer"))
        declaration = signature[start:end]
        out.append(signature[pos:start])
        if "offset_factor" not in declaration:
            dtype = tvm.runtime.DataType(_DTYPE.search(declaration).group(1))
            factor = max(1, alignment * 8 // (dtype.bits * dtype.lanes))
            declaration += f", offset_factor={factor}"
        out.append(declaration)
        pos = end


def _closing(text: str, opening: int) -> int:
    """The index of the parenthesis closing the one at ``opening``."""
    depth = 0
    for i in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"tvm_fuse.relax.offsets: unbalanced parentheses in {text!r}")
