"""Kernels written to a file of the test's own, so line-info tests know every line number."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

KernelFile = Callable[[str], ModuleType]


@pytest.fixture
def kernel_file(tmp_path: Path) -> KernelFile:
    """``kernel_file(source)`` writes ``source`` (dedented) to ``user_kernels.py`` in the test's
    temporary folder and imports it; writing again replaces the file and re-imports it under the
    same module name (as an edited file is reloaded)."""
    path = tmp_path / "user_kernels.py"

    def load(source: str) -> ModuleType:
        path.write_text(textwrap.dedent(source))
        spec = importlib.util.spec_from_file_location("user_kernels", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["user_kernels"] = module
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules["user_kernels"]
        return module

    return load


def line_of(path: str | Path, fragment: str) -> int:
    """The 1-based number of the only line of ``path`` containing ``fragment``."""
    found = [i for i, line in enumerate(Path(path).read_text().splitlines(), 1) if fragment in line]
    assert len(found) == 1, (fragment, found)
    return found[0]
