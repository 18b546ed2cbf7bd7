"""The package list: ``tvm_fuse`` and its subpackages, plus two top-level folders mapped into it.

``schedules/`` (the kernel half) is installed as ``tvm_fuse.schedules`` and ``benchmarks/`` as
``tvm_fuse.bench`` (so that ``tvm-fuse bench`` runs from an installed package). The metadata is
in ``pyproject.toml``; only this mapping needs code, so that a new subpackage is never left out.
"""

from setuptools import find_packages, setup

#: installed package name -> folder of the repository that holds it
MAPPED = {"tvm_fuse.schedules": "schedules", "tvm_fuse.bench": "benchmarks"}


def packages() -> list[str]:
    """Every package under ``tvm_fuse/`` and under each mapped folder."""
    found = find_packages(include=["tvm_fuse", "tvm_fuse.*"])
    for name, folder in MAPPED.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


if __name__ == "__main__":
    setup(packages=packages(), package_dir=MAPPED)
