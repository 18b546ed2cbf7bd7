"""The file a command writes: checked before any work, then written whole or not at all.

Shared by both backends' commands (the Relay backend's tvmc package, the Relax backend's
library), so this module imports no TVM. :func:`check_output` refuses, in one line, an ``-o`` that
is a directory, the model itself (also through a link), or an existing file the command did not
write (unless ``--force``); :func:`scratch_dir` is where the result is built before one rename
moves it into place, so an error or an interruption leaves the old file as it was.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from . import interrupts
from .errors import UserError


def check_output(
    output,
    model,
    *,
    kind: str,
    example: str,
    is_kind: Callable[[Path], bool],
    force: bool | None = False,
) -> Path:
    """``output`` if writing there destroys nothing: it is not a directory, not the model itself
    (also through a symlink or hard link), and an existing file there is ``kind`` (``is_kind``)
    or ``force`` (None: the command has no --force); else a UserError. ``example``: a file name
    the messages suggest, such as ``model.tar``."""
    output, model = Path(output), Path(model)
    if output.is_dir():
        raise UserError(f"{output}: is a directory; give -o a file name such as {example}")
    if output.exists() and model.exists() and os.path.samefile(output, model):
        suffix = Path(example).suffix
        raise UserError(
            f"{output}: is the model {model} itself; give -o another path, such as "
            f"{model.stem}-tvm_fuse{suffix}"
        )
    if output.exists() and not force and not is_kind(output):
        fix = "remove it first" if force is None else "add --force to replace it"
        raise UserError(f"{output}: exists and is not {kind}; give -o another path, or {fix}")
    return output


def scratch_dir(output) -> tempfile.TemporaryDirectory:
    """A temporary directory beside ``output``, where the result is built before it is moved
    into place (a rename on the same file system); a UserError if nothing can be written there.
    Removed on an interruption too (``interrupts.remove_on_exit``).
    """
    output = Path(output)
    parent = output.parent
    try:
        scratch = tempfile.TemporaryDirectory(prefix=".tvm_fuse-", dir=parent)
    except OSError as err:
        reason = err.strerror or str(err)
        raise UserError(
            f"{output}: cannot write there ({parent}: {reason}); choose a writable -o path"
        ) from None
    interrupts.remove_on_exit(scratch.name)
    return scratch
