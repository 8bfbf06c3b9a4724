"""Fixtures for the runtime tests: the simulator device, a per-test disk cache, random inputs
with a printed seed, and kernels written to real files (the frontend reads kernel source)."""

from __future__ import annotations

import importlib.util
import itertools
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import kaio
from kaio.frontend.kernel import GpuKernel

_counter = itertools.count()


@pytest.fixture(autouse=True)
def kaio_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own empty disk cache (never the user's ~/.cache)."""
    folder = tmp_path / "kaio-cache"
    monkeypatch.setenv("KAIO_CACHE_DIR", str(folder))
    monkeypatch.delenv("KAIO_CACHE", raising=False)
    return folder


@pytest.fixture
def sim() -> kaio.Device:
    return kaio.Device("sim")


@pytest.fixture
def load_kernels(tmp_path: Path) -> Callable[[str], ModuleType]:
    """``load_kernels(code)``: import ``code`` (after kaio's imports) from a fresh file."""

    def load(code: str) -> ModuleType:
        name = f"kaio_runtime_test_kernels_{next(_counter)}"
        path = tmp_path / f"{name}.py"
        path.write_text("import kaio\nfrom kaio.prelude import *\n" + textwrap.dedent(code))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Counts calls of GpuKernel.build (IR construction)."""
    calls: list[object] = []
    original = GpuKernel.build

    def spy(self: GpuKernel, constexprs: object = None) -> object:
        calls.append(constexprs)
        return original(self, constexprs)  # type: ignore[arg-type]

    monkeypatch.setattr(GpuKernel, "build", spy)
    return calls
