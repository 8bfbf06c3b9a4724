"""A compile pauses Python's cyclic garbage collector (kaio.module_compiler: the IR is all cycles, and
collections during a compile rescan it over and over) and gives it back as it found it."""

from __future__ import annotations

import gc

import pytest

import kaio
from kaio.errors import KaioCompileError
from kaio.prelude import Array, MutArray, f32, thread_idx_x, u32


@kaio.gpu_kernel(block_size=32)
def double(x: Array[f32], y: MutArray[f32], n: u32):
    i = thread_idx_x()
    if i < n:
        y[i] = x[i] * 2.0


def watched_collector(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the collector was on, seen from inside the compile (the printer's call)."""
    from kaio import module_compiler as compiler

    seen: list[bool] = []
    original = compiler.print_ptx

    def printing(*args: object, **kwargs: object) -> str:
        seen.append(gc.isenabled())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compiler, "print_ptx", printing)
    monkeypatch.setenv("KAIO_CACHE", "0")
    return seen


def test_the_collector_is_off_during_a_compile_and_on_after(monkeypatch: pytest.MonkeyPatch):
    seen = watched_collector(monkeypatch)
    assert gc.isenabled()
    kaio.compile(double, "sm_80")
    assert seen == [False] and gc.isenabled()


def test_a_failing_compile_gives_the_collector_back(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    with pytest.raises(KaioCompileError):
        kaio.compile(double, "sm_80", pipeline="canonicalize")  # leaves the kernel unlowered
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(monkeypatch: pytest.MonkeyPatch):
    seen = watched_collector(monkeypatch)
    gc.disable()
    try:
        kaio.compile(double, "sm_80")
        assert seen == [False] and not gc.isenabled()
    finally:
        gc.enable()
