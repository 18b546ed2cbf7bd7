"""Public names of a package that load on first use (PEP 562), so that importing it stays cheap.

``tvm-fuse --help`` imports ``tvm_fuse``, ``tvm_fuse.tuning`` and the command-line modules; none
of them may import TVM (three seconds) at import time. A package lists which submodule defines
each public name and gets a module ``__getattr__`` that imports it when the name is first read.
"""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_exports(package: str, exports: dict[str, str], before: Callable[[], None] = None):
    """``(__getattr__, __dir__)`` for ``package`` whose name ``n`` lives in ``exports[n]``.

    ``before()`` runs before the first public name loads (e.g. to register the fused op).
    A name that is not exported but is a submodule (``tvm_fuse.tuning``) is imported too.
    """

    def __getattr__(name: str):
        if name in exports:
            if before is not None:
                before()
            return getattr(importlib.import_module(f".{exports[name]}", package), name)
        if not name.startswith("_"):
            try:
                return importlib.import_module(f".{name}", package)
            except ModuleNotFoundError as err:
                if err.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(importlib.import_module(package).__dict__) | set(exports))

    return __getattr__, __dir__
