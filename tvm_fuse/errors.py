"""The error a user can cause: a bad file, shape, target or path, reported as one line.

``tvm-fuse`` prints a :class:`UserError` as ``tvm-fuse: error: <message>`` on stderr and exits
with status 2, without a traceback. Anything else that goes wrong is a bug and keeps its
traceback. The message names the file, op or shape and says what to do. The Python API raises it
too (a ``ValueError``, so that ``except ValueError`` still catches a bad argument).
"""


class UserError(ValueError):
    """A mistake in the command's input; ``str()`` is the whole one-line message."""

    exit_code = 2
