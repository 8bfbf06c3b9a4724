"""Fixtures for frontend tests: kernels written to temporary modules (so errors and line numbers
point into a real file), and small views of the IR."""

from __future__ import annotations

import importlib.util
import itertools
import linecache
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import kaio

HEADER = "import kaio\nfrom kaio.prelude import *\n"
HEADER_LINES = HEADER.count("\n")
_counter = itertools.count()


def _load(directory: Path, code: str, name: str | None = None) -> ModuleType:
    name = name or f"kaio_test_kernels_{next(_counter)}"
    path = directory / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(code))
    linecache.checkcache(str(path))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load(tmp_path: Path) -> Callable[..., ModuleType]:
    """``load(code)``: import ``code`` (after the kaio imports) from a fresh file."""
    return lambda code, name=None: _load(tmp_path, code, name)


@pytest.fixture
def compile_error(tmp_path: Path) -> Callable[[str], kaio.KaioCompileError]:
    """``compile_error(code)``: the KaioCompileError that importing ``code`` raises. Line numbers
    in the error count from the first line of ``code`` (the kaio imports are subtracted)."""

    def run(code: str) -> kaio.KaioCompileError:
        with pytest.raises(kaio.KaioCompileError) as info:
            _load(tmp_path, code)
        err = info.value
        assert err.line is not None and err.filename is not None
        assert err.filename.startswith(str(tmp_path))
        err.line -= HEADER_LINES
        return err

    return run


def op_names(ir: Any) -> list[str]:
    return [op.name for op in ir.module.walk()]


@pytest.fixture
def ops() -> Callable[[Any], Counter[str]]:
    """``ops(kernel_ir)``: how many ops of each name the module holds."""
    return lambda ir: Counter(op_names(ir))
