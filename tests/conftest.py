"""Settings for the whole test suite.

``kaio.compile`` writes its disk cache under ``~/.cache/kaio`` by default; the suite must never
touch the user's home, so every run gets a fresh temporary cache directory, set before any test
module is imported (some compile at import time) and removed at the end.

The Hopper tests (``HOPPER_FILES``, and any test marked ``schedule_seeds``) run on the
simulator's seeded adversarial schedule, where warps leave lockstep (``KAIO_SIM_SCHEDULE_SEED``,
set per test), once under each of ``KAIO_TEST_SCHEDULE_SEEDS`` (default "0,1,2": three seeds in
CI). ``KAIO_TEST_SCHEDULE_SEEDS=0`` runs them under one seed (quicker, for local work);
``KAIO_TEST_SCHEDULE_SEEDS=`` (empty) turns the hook off (the default lockstep schedule). A test
marked ``heavy_seeds`` (the largest Hopper sweeps, seconds per seed) runs its first seed by
default and the others under ``-m slow``, so the whole suite stays within CI's budget while the
seeded schedules still reach every kernel.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile

import numpy as np
import pytest

import kaio

_cache_dir: str | None = None

HOPPER_FILES = frozenset({
    "tests/targets/sim/test_hopper.py",
    "tests/passes/test_pipeline_tma.py",
    "tests/passes/test_store_tma.py",
    "tests/passes/test_lower_hopper.py",
    "tests/ops_library/test_matmul_wgmma.py",
    "tests/ops_library/test_attention_wgmma.py",
    "tests/ops_library/test_matmul_persistent.py",
    "tests/passes/test_proxy_fences.py",
    "tests/targets/sim/test_generated_hopper_bugs.py",
})  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    global _cache_dir
    _cache_dir = tempfile.mkdtemp(prefix="kaio-test-cache-")
    os.environ["KAIO_CACHE_DIR"] = _cache_dir
    config.addinivalue_line("markers", "schedule_seeds: run under the simulator's adversarial schedule for every seed")
    config.addinivalue_line("markers", "heavy_seeds: the seeds after the first are slow tests")


def _schedule_seeds(definition: pytest.Function) -> list[int]:
    """The adversarial-schedule seeds a test runs under (none: the default schedule)."""
    seeds = [int(s) for s in os.environ.get("KAIO_TEST_SCHEDULE_SEEDS", "0,1,2").split(",") if s.strip()]
    if not seeds:
        return []
    if definition.get_closest_marker("schedule_seeds") is not None:
        return seeds
    path = definition.path.as_posix()
    return seeds if any(path.endswith(f) for f in HOPPER_FILES) else []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    seeds = _schedule_seeds(metafunc.definition)
    if seeds:
        heavy = metafunc.definition.get_closest_marker("heavy_seeds") is not None
        params = [pytest.param(s, id=f"seed{s}", marks=(pytest.mark.slow,) if heavy and i else ()) for i, s in enumerate(seeds)]
        metafunc.parametrize("schedule_seed", params, indirect=True)


@pytest.fixture(autouse=True)
def schedule_seed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int | None:
    """The seed a test's simulators schedule under; applies to every simulator not given one
    (kaio.Device("sim") ones included), through KAIO_SIM_SCHEDULE_SEED."""
    seed = getattr(request, "param", None)
    if seed is not None:
        monkeypatch.setenv("KAIO_SIM_SCHEDULE_SEED", str(seed))
    return seed


def pytest_unconfigure(config: pytest.Config) -> None:
    if _cache_dir is not None:
        shutil.rmtree(_cache_dir, ignore_errors=True)
    # The interpreter's last full collection walks every object the suite left (compiled
    # kernels, simulators, torch's caches): 3 minutes after the summary of a whole run on a
    # 2-core machine. Frozen, they are skipped and the process exits when pytest is done; the
    # price is triton's nanobind listing the instances it was not given back ("leaked").
    gc.freeze()


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
