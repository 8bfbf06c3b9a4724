"""Settings for the whole test suite.

``kaio.compile`` writes its disk cache under ``~/.cache/kaio`` by default; the suite must never
touch the user's home, so every run gets a fresh temporary cache directory, set before any test
module is imported (some compile at import time) and removed at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest

import kaio

_cache_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _cache_dir
    _cache_dir = tempfile.mkdtemp(prefix="kaio-test-cache-")
    os.environ["KAIO_CACHE_DIR"] = _cache_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    if _cache_dir is not None:
        shutil.rmtree(_cache_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def dev() -> kaio.Device:
    """The simulator device (one per process: ``kaio.Device("sim")`` is a registry entry)."""
    return kaio.Device("sim")


@pytest.fixture
def rng() -> np.random.Generator:
    """Fresh random inputs every run; the seed is printed so a failure can be replayed."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    return np.random.default_rng(seed)
