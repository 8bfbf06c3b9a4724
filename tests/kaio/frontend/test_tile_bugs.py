"""Known bugs of the tile language, each as its smallest reproducer (strict xfail: a fix makes
the test pass, and the marker must then go)."""

from __future__ import annotations

import pytest

import kaio
from kaio.errors import KaioCompileError

UNSIGNED_LOOP = """
import kaio.tile as kt

@kaio.tile_kernel
def k(x: MutArray[f32], n: u32):
    t = kt.zeros((64,), f32)
    for i in range(n):
        t = t + 1.0
    kt.store(x, (0,), t, (n,))
"""

BREAK_LOOP = """
import kaio.tile as kt

@kaio.tile_kernel
def k(x: MutArray[f32], n: i32):
    t = kt.zeros((64,), f32)
    for i in range(n):
        if i > 3:
            break
        t = t + 1.0
    kt.store(x, (0,), t, (n,))
"""


def compiles_or_fails_at_the_loop(load, code: str) -> None:
    """Either the kernel compiles, or decorating it reports the loop's line."""
    try:
        module = load(code)
    except KaioCompileError as err:
        assert err.line is not None and "range" in err.source_line
        return
    kaio.compile(module.k, "sm_80")


@pytest.mark.xfail(
    reason="a `for` over a u32 range is an scf.while; tile-layout rejects the tile it carries at "
    "compile time, with no source location, telling the user to use `for ... in range(...)`",
    strict=True,
)
def test_tile_carried_by_a_range_loop_over_u32(load):
    compiles_or_fails_at_the_loop(load, UNSIGNED_LOOP)


@pytest.mark.xfail(
    reason="a `for` with `break` is an scf.while; tile-layout rejects the tile it carries at "
    "compile time, with no source location, telling the user to use `for ... in range(...)`",
    strict=True,
)
def test_tile_carried_by_a_range_loop_with_break(load):
    compiles_or_fails_at_the_loop(load, BREAK_LOOP)
