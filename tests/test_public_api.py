"""The public names stay what the README says once every submodule has been imported.

A submodule named like a public function (as ``tvm_fuse/pipeline.py`` once was) replaces that
function on the package when it is first imported; this test imports everything first (the
Relax backend's submodules only under apache-tvm: ``tests_relax`` imports them there).
"""

import importlib
import pkgutil

import tvm_fuse
import tvm_fuse.memory
from tvm_fuse import backend


def test_public_names_are_the_functions_after_every_import():
    for info in pkgutil.walk_packages(tvm_fuse.__path__, "tvm_fuse."):
        if not info.name.endswith("__main__") and backend.importable(info.name):
            importlib.import_module(info.name)
    names = ("pipeline", "optimize", "build", "describe", "host_target", "tune", "lowering_context")
    for name in names:
        assert callable(getattr(tvm_fuse, name)), name
        assert not isinstance(getattr(tvm_fuse, name), type(tvm_fuse)), name
    for name in ("plan", "liveness", "graph_storage"):
        assert not isinstance(getattr(tvm_fuse.memory, name), type(tvm_fuse)), name
