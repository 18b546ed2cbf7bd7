"""The ``--input-shapes`` text (tvmc's syntax), parsed whole: ``"data:[1,3,224,224] mask:[1,10]"``.

tvmc's own parser picks out whatever matches and ignores the rest, so ``"x:[1,8] junk;;"`` or a
typo in a second entry passes silently. Here the whole text must be entries separated by spaces
(tvmc's entry pattern: names with ``/``, ``:`` and ``.``, spaces allowed inside the brackets),
each input named once. No TVM import: it runs while the command line is parsed. Dimensions are
ints; one that is not positive is dynamic and is refused later, with the input's name.
"""

from __future__ import annotations

import argparse
import re

#: One ``name:[d1,d2,...]`` entry, as tvmc's ``shape_parser`` matches it.
ENTRY = r"(?:\w+/)?[:\w.]+:\s*\[\s*-?\d+(?:\s*,\s*-?\d+)*\s*\]"
WHOLE = re.compile(rf"\s*{ENTRY}(?:\s+{ENTRY})*\s*")
EXAMPLE = '"data:[1,3,224,224] mask:[1,10]"'


def parse_input_shapes(text: str) -> dict[str, list[int]]:
    """Input name -> dims; an ``argparse.ArgumentTypeError`` unless all of ``text`` parses."""
    if not WHOLE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of input shapes; write them as {EXAMPLE} (name:[dims], "
            "separated by spaces)"
        )
    shapes: dict[str, list[int]] = {}
    for entry in re.findall(ENTRY, text):
        name, dims = re.sub(r"\s", "", entry).rsplit(":", 1)
        if name in shapes:
            raise argparse.ArgumentTypeError(f"{text!r} gives the input {name!r} twice")
        shapes[name] = [int(d) for d in dims.strip("[]").split(",")]
    return shapes
