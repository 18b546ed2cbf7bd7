"""The AutoTVM dispatch context of tvm_fuse's builds: tuning records in, TopHub out.

``relay.build`` and AutoTVM's task extraction download TopHub's pre-tuned logs whenever the
current dispatch context is AutoTVM's root fallback. tvm_fuse never wants them (its kernel has
no TopHub entry, and a build must not reach for the network), so every build of ours runs inside
:func:`build_context`: an ``ApplyHistoryBest`` over the build's checked tuning records, or over
none. Configs it lacks come from the enclosing context as usual. The caller's ``os.environ``
(``TOPHUB_LOCATION``) is never touched. The same context adds tvm_fuse's TIR pass to the
lowering (``tvm_fuse.lowering``: the weight prefetch the kernels ask for).

The core does not validate logs itself: the tuning layer registers its checker here
(:func:`set_records_checker`), so that ``pipeline`` never imports ``tuning``.
"""

from __future__ import annotations

import contextlib
from typing import Callable

from tvm import autotvm

from . import lowering

#: ``checker(path, target) -> records``: set by ``tvm_fuse.tuning`` when it is imported.
_records_checker: Callable | None = None


def set_records_checker(checker: Callable) -> None:
    """Register how a tuning log is validated and read (``tuning.records.records_to_apply``)."""
    global _records_checker  # pylint: disable=global-statement  (one hook, set once)
    _records_checker = checker


def checked_records(path, target) -> list | None:
    """The records of the log at ``path`` to apply, validated for ``target`` by the registered
    checker (None for no log)."""
    if path is None:
        return None
    if _records_checker is None:
        raise RuntimeError("tvm_fuse: tuning records need tvm_fuse.tuning; import tvm_fuse first")
    return _records_checker(path, target)


@contextlib.contextmanager
def build_context(records=None):
    """The context to build in: ``records`` (already checked) applied, TopHub off, and the
    current PassContext with tvm_fuse's lower pass (``lowering.lowering_context``)."""
    with lowering.lowering_context(), autotvm.task.ApplyHistoryBest(records or []) as dispatch:
        yield dispatch
