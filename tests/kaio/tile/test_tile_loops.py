"""Tiles carried by every kind of loop: `for` over i32 bounds (scf.for), over u32 bounds and
with `break` (both scf.while), and through `if` on scalars."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import MutArray, f32, i32, u32

from .conftest import poisoned


@kaio.tile_kernel
def count_with_break(x: MutArray[f32], n: i32, stop: i32):
    t = kt.zeros((64,), f32)
    for i in range(n):
        if i >= stop:
            break
        t = t + 1.0
    kt.store(x, (0,), t, (64,))


@kaio.tile_kernel
def count_unsigned(x: MutArray[f32], n: u32):
    t = kt.zeros((64,), f32)
    for i in range(n):
        t = t + 1.0
    kt.store(x, (0,), t, (u32(64),))


@kaio.tile_kernel
def branch_on_scalar(x: MutArray[f32], flag: i32):
    t = kt.full((32,), 1.0, f32)
    if flag > 0:
        t = t * 3.0
    else:
        t = t - 5.0
    kt.store(x, (0,), t, (32,))


@pytest.mark.parametrize("n, stop, want", [(10, 4, 4), (3, 9, 3), (0, 5, 0)])
def test_a_loop_with_break_carries_a_tile(dev, n, stop, want):
    x = poisoned(dev, (64,), np.float32)
    count_with_break[1](x, n, stop)
    assert (x.to_host() == want).all()


def test_a_loop_over_unsigned_bounds_carries_a_tile(dev):
    x = poisoned(dev, (64,), np.float32)
    count_unsigned[1](x, 10)
    assert (x.to_host() == 10).all()


@pytest.mark.parametrize("flag, want", [(1, 3.0), (0, -4.0)])
def test_an_if_on_a_scalar_merges_tiles(dev, flag, want):
    x = poisoned(dev, (32,), np.float32)
    branch_on_scalar[1](x, flag)
    assert (x.to_host() == want).all()
