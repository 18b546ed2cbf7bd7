"""The Relax suite: run it in the Relax venv (``.ci/relax-env DIR``), never with TVM 0.19.

It needs apache-tvm (``tvm.s_tir``) and must not need Relay; run as
``DIR/bin/python -m pytest tests_relax -q``. Builds are kept small; the whole-model test is
marked slow.
"""

import numpy as np
import pytest
import tvm

if not hasattr(tvm, "s_tir"):
    pytest.exit(
        f"tests_relax needs apache-tvm 0.27 (found TVM {tvm.__version__}): run it in the venv "
        "of .ci/relax-env",
        returncode=4,
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: whole-model tests")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def target():
    from tvm_fuse.relax import compat

    return compat.host_target()
