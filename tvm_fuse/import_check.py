"""Import each module first, in an interpreter of its own: the test suites' check that no module
depends on another having been imported before it (an import cycle, a name used before its
module is loaded).

One fresh interpreter per module pays for importing TVM each time (2.5 s; about 85 modules).
Instead one interpreter imports TVM (``preload``), then forks a child per module, which imports
it first among the package's modules and exits: the same check for tvm_fuse's modules, with TVM
loaded once. Only the standard library here, so both stacks' suites use it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Iterable, Mapping, Optional

#: The child's traceback, at most this many characters of its end.
MESSAGE_CHARS = 4000

_FORK_EACH = textwrap.dedent("""
    import importlib, json, os, sys, traceback

    preload, modules, report = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    importlib.import_module(preload)
    failures = {}
    for name in modules:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            status, message = 0, ""
            try:
                importlib.import_module(name)
            except BaseException:
                status, message = 1, traceback.format_exc()[-%(chars)d:]
            os.write(write, message.encode())
            os._exit(status)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            message = pipe.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
        if status:
            failures[name] = message or f"the child ended with wait status {status}"
    with open(report, "w") as out:
        json.dump(failures, out)
    """ % {"chars": MESSAGE_CHARS})


def import_each_first(
    modules: Iterable[str],
    preload: str = "tvm",
    env: Optional[Mapping[str, str]] = None,
    timeout_s: float = 600,
) -> dict[str, str]:
    """Import each of ``modules`` first in a child forked from an interpreter that imported only
    ``preload``; returns module -> traceback for those that failed (empty: all imported)."""
    with tempfile.TemporaryDirectory(prefix="tvm_fuse_imports_") as folder:
        report = Path(folder) / "failures.json"
        done = subprocess.run(
            [sys.executable, "-c", _FORK_EACH, preload, json.dumps(list(modules)), str(report)],
            env=dict(os.environ if env is None else env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0 or not report.exists():
            raise RuntimeError(f"import_each_first: the parent failed: {done.stderr[-2000:]}")
        return json.loads(report.read_text())
