"""Shared pytest set-up: no TopHub downloads, a seeded RNG, and the markers."""

import os

os.environ.setdefault("TOPHUB_LOCATION", "NONE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: whole-model tests (several relay.build calls)")
    config.addinivalue_line("markers", "llvm: builds and runs code with LLVM (needs a host CPU)")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
