"""The package under the Relax stack: it imports without Relay, each Relax module on its own."""

import importlib.util
import pkgutil
import subprocess
import sys
import textwrap

import pytest
import tvm

import tvm_fuse.relax
from tvm_fuse import backend, import_check
from tvm_fuse.relax import compat


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )


def test_this_stack_has_no_relay():
    assert importlib.util.find_spec("tvm.relay") is None
    assert backend.installed() == "relax"


def test_the_facade_and_its_spec_work_without_relay():
    done = _python("""
        import sys
        import tvm_fuse
        assert "tvm" not in sys.modules, "import tvm_fuse imported TVM"
        import tvm_fuse.relax
        assert "tvm" not in sys.modules, "import tvm_fuse.relax imported TVM"
        spec = tvm_fuse.KernelSpec.conv((1, 8, 8, 4), (3, 3, 4, 8), padding=(1, 1, 1, 1))
        assert spec.out.shape == (1, 8, 8, 8)
        assert callable(tvm_fuse.relax.build) and callable(tvm_fuse.relax.pipeline)
        assert "tvm.relay" not in sys.modules
        print("ok")
        """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


RELAX_MODULES = sorted(
    info.name for info in pkgutil.walk_packages(tvm_fuse.relax.__path__, "tvm_fuse.relax.")
)


@pytest.fixture(scope="module")
def import_failures() -> dict[str, str]:
    """Each module imported first in a child of an interpreter that has imported TVM only
    (``tvm_fuse.import_check``)."""
    return import_check.import_each_first(RELAX_MODULES)


@pytest.mark.parametrize("module", RELAX_MODULES)
def test_each_relax_module_imports_first_in_a_fresh_interpreter(module, import_failures):
    assert module not in import_failures, import_failures.get(module)


def test_public_names_are_the_functions():
    for name in tvm_fuse.relax.__all__:
        assert callable(getattr(tvm_fuse.relax, name)), name


def test_vector_width_comes_from_the_cpu_features(target):
    features = set(tvm.target.codegen.llvm_get_cpu_features(target))
    lanes = compat.simd_lanes(target)
    assert lanes == (16 if "avx512f" in features else 8 if "avx2" in features else 4)
    assert compat.simd_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})) == 8
    assert compat.simd_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})) == 16
