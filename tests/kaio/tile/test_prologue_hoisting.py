"""lower-to-ptx computes values that depend only on the kernel's arguments once, in the
prologue; a register declared there and written later (a masked load's destination, a loop's
carried value) is not such a value.

Planted by a grouped-matmul kernel: a store bounded by a row count read from memory had its
``max(bound, 0)`` hoisted above the load that fills the bound's register, so it read the register
unwritten and stored nothing, silently."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f32, i32

from .conftest import poisoned


@kaio.tile_kernel(num_warps=1, num_stages=0)
def rows_up_to_a_loaded_bound(offsets: Array[i32], y: MutArray[f32], n: i32, t: i32,
                              BM: kaio.constexpr = 16, BN: kaio.constexpr = 16):  # fmt: skip
    hi = kt.sum(kt.load(offsets, (1,), (1,), (5,)), 0)  # a bound read from memory
    kt.store(y, (t // n * BM, 0), kt.full((BM, BN), 1.0, f32), (hi, n))


@kaio.tile_kernel(num_warps=1, num_stages=0)
def rows_up_to_a_carried_bound(y: MutArray[f32], n: i32, steps: i32, BM: kaio.constexpr = 16, BN: kaio.constexpr = 16):
    hi = i32(0)
    for _ in range(steps):
        hi = hi + 3  # a bound carried through a loop
    kt.store(y, (n // n - 1, 0), kt.full((BM, BN), 2.0, f32), (hi, n))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_bound_loaded_in_the_body_is_read_after_its_load(arch, rng):
    dev = kaio.Device("sim", arch=arch)
    bound = int(rng.integers(1, 16))
    y = poisoned(dev, (16, 16), np.float32)
    rows_up_to_a_loaded_bound[1](dev.alloc_from(np.array([0, bound, 5, 9, 12], np.int32)), y, 16, 0)
    got = y.to_host()
    assert (got[:bound] == 1.0).all() and np.isnan(got[bound:]).all()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_bound_carried_through_a_loop_is_read_after_the_loop(arch, rng):
    dev = kaio.Device("sim", arch=arch)
    steps = int(rng.integers(1, 5))
    y = poisoned(dev, (16, 16), np.float32)
    rows_up_to_a_carried_bound[1](y, 16, steps)
    got = y.to_host()
    assert (got[: 3 * steps] == 2.0).all() and np.isnan(got[3 * steps :]).all()
