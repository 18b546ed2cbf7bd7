"""Progress of long ``tvm-fuse`` work: one line per stage, with its elapsed seconds.

    with progress.stage("building for llvm -mcpu=znver3"):
        ...
    # stderr:  building for llvm -mcpu=znver3 ... 12.3 s

The line is started before the stage runs (so a user sees what is taking time) and ended with
the seconds when it finishes; a stage that fails ends its line so that the error that follows
is a line of its own. Written to stderr, so stdout keeps only the command's result.
"""

from __future__ import annotations

import contextlib
import sys
import time


class Progress:
    """Stage lines on ``stream`` (stderr by default); ``quiet`` prints nothing."""

    #: A stage line is started but not ended (an interruption starts its own line then).
    line_open = False

    def __init__(self, stream=None, quiet: bool = False):
        self.stream = stream
        self.quiet = quiet

    def _write(self, text: str) -> None:
        if not self.quiet:
            stream = self.stream or sys.stderr
            stream.write(text)
            stream.flush()
            Progress.line_open = not text.endswith("\n")

    @contextlib.contextmanager
    def stage(self, what: str):
        """Time the ``with`` block as the stage ``what``."""
        self._write(f"{what} ...")
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self._write(" failed\n")
            raise
        self._write(f" {time.perf_counter() - start:.1f} s\n")
