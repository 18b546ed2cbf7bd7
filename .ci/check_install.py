"""Check an installed tvm_fuse: it is the copy inside the venv given, and every module imports.

    python .ci/check_install.py VENV      (run from outside the checkout)
"""

import importlib
import pkgutil
import sys
from pathlib import Path


def main(venv: str) -> int:
    import tvm_fuse  # pylint: disable=import-outside-toplevel

    where = Path(tvm_fuse.__file__).resolve()
    if not where.is_relative_to(Path(venv).resolve()):
        print(f"check_install: imported {where}, not the copy installed in {venv}")
        return 1
    from tvm_fuse import backend  # pylint: disable=import-outside-toplevel

    names = ["tvm_fuse"] + [
        info.name
        for info in pkgutil.walk_packages(tvm_fuse.__path__, "tvm_fuse.")
        if not info.name.endswith("__main__")  # those run a command
        and backend.importable(info.name)  # tvm_fuse.relax.* needs apache-tvm
    ]
    for name in names:
        importlib.import_module(name)
    packages = sorted(n for n in names if hasattr(sys.modules[n], "__path__"))
    print(f"check_install: {len(names)} modules from {where.parent}; packages: {packages}")
    for needed in ("tvm_fuse.tuning", "tvm_fuse.schedules", "tvm_fuse.bench", "tvm_fuse.relax"):
        if needed not in packages:
            print(f"check_install: {needed} is not installed")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
