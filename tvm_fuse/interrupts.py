"""Ctrl-C, SIGTERM and SIGHUP in the ``tvm-fuse`` command: one line, nothing left behind.

A signal often lands while TVM is in C++ or in a Python callback called from C++ (a pass, a
strategy); a ``KeyboardInterrupt`` raised there is swallowed by ctypes and TVM fails later with an
unrelated error, or the signal waits until a long C++ call returns. So the command does not raise:
a watcher thread, woken through ``signal.set_wakeup_fd`` even while the main thread is in C++,
stops the worker processes the command started (AutoTVM builders, the local RPC tracker and
server), removes the scratch paths registered with :func:`remove_on_exit` and the command's
private temporary folder (``TMPDIR`` for the process and its children), prints one line and exits
with 128 + the signal number (130 for Ctrl-C). A finished output is never touched: outputs are
moved into place by one rename at the end.

Installed by the command line only (:func:`install`, from the package's import when the process is
``tvm-fuse`` or ``python -m tvm_fuse``, so that Ctrl-C while TVM is still importing is one line
too); the Python API keeps Python's own behaviour. SIGKILL cannot be caught: it may leave the
scratch folder (named ``.tvm_fuse-*``) and the temporary folder (``tvm_fuse-tmp-*``) behind.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading

from .progress import Progress

SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
COMMANDS = ("tvm-fuse", "tvm_fuse")

_paths: list[str] = []
_notes: list = []
_exiting = threading.Lock()
_installed = threading.Event()


def is_command_line() -> bool:
    """True in the ``tvm-fuse`` console script and in ``python -m tvm_fuse``."""
    orig = list(getattr(sys, "orig_argv", []))
    as_module = any(orig[i : i + 2] == ["-m", "tvm_fuse"] for i in range(len(orig)))
    return as_module or os.path.basename(sys.argv[0] if sys.argv else "") == "tvm-fuse"


def remove_on_exit(path) -> None:
    """Remove ``path`` (a scratch file or folder) if the command is interrupted."""
    _paths.append(str(path))


def note(describe) -> None:
    """Add ``describe()`` (e.g. how many tuning records were kept) to the interruption line."""
    _notes.append(describe)


def install() -> None:
    """Handle SIGINT, SIGTERM and SIGHUP as described above; give the process a private TMPDIR."""
    if _installed.is_set() or threading.current_thread() is not threading.main_thread():
        return  # installed already, or not possible (signals belong to the main thread)
    _installed.set()
    root = tempfile.mkdtemp(prefix="tvm_fuse-tmp-")
    tempfile.tempdir = os.environ["TMPDIR"] = root
    remove_on_exit(root)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    read, write = os.pipe()
    os.set_blocking(write, False)
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read,), name="tvm_fuse-signals", daemon=True).start()


def _watch(read: int) -> None:
    while True:
        for signum in os.read(read, 16):
            if signum in SIGNALS:
                _exit(signum)


def _on_signal(signum, _frame) -> None:
    _exit(signum)


def _exit(signum: int) -> None:
    if not _exiting.acquire(blocking=False):
        return  # the other thread is exiting already
    _stop_children()
    for _ in range(2):  # twice: the main thread may still be writing while we remove
        for path in _paths:
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else _unlink(path)
    notes = "".join(f"; {describe()}" for describe in _notes)
    start = "\n" if Progress.line_open else ""
    os.write(2, f"{start}tvm-fuse: interrupted ({SIGNALS[signum]}){notes}\n".encode())
    os._exit(128 + signum)


def _stop_children() -> None:
    try:
        import psutil  # pylint: disable=import-outside-toplevel  (a TVM dependency)

        for child in psutil.Process().children(recursive=True):
            child.kill()
    except Exception:  # noqa: BLE001  pylint: disable=broad-except  (gone already: fine)
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
