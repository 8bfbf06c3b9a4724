"""Bugs the tile fuzzer found, each kept as a small regular test (reduced from the program it
printed). Both were negative bounds read as huge unsigned ones, before views compared
``0 <= offset + i < bound``."""

from __future__ import annotations

import numpy as np

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f32, i32


@kaio.tile_kernel(num_warps=4)
def rows_bound(xf: Array[f32], of: MutArray[f32], rows: i32):
    kt.store(of, (0, 0), kt.load(xf, (8, 72), (8, 32), (rows, 80), other=1.0), (8, 32))


@kaio.tile_kernel(num_warps=2)
def default_strides(xi: Array[i32], oi: MutArray[i32], r0: i32, c0: i32, rows: i32, cols: i32):
    kt.store(oi, (0, 0), kt.load(xi, (r0, c0), (4, 32), (rows, cols), other=2), (4, 32))


def test_a_negative_row_bound_reads_other(dev: kaio.Device, rng: np.random.Generator) -> None:
    # found as seed 2: `kt.load(xf, (8, 72), (8, 32), (p6, 80), other=1)` with p6 = -1 read the
    # rows (and, at column 72, the next row's first columns) instead of `other`
    x = rng.integers(-4, 5, 48 * 80).astype(np.float32)
    out = dev.alloc_from(np.full((8, 32), np.nan, np.float32))
    rows_bound[1](dev.alloc_from(x), out, -1)
    np.testing.assert_array_equal(out.to_host(), np.ones((8, 32), np.float32))


def test_a_negative_column_bound_with_default_strides_reads_nothing(dev: kaio.Device, rng: np.random.Generator) -> None:
    # found as seed 6: bounds (-3, -1) and the default strides (-1, 1) loaded from before the
    # array (an out-of-bounds fault)
    x = rng.integers(0, 64, 48 * 80).astype(np.int32)
    out = dev.alloc_from(np.full((4, 32), -7, np.int32))
    default_strides[1](dev.alloc_from(x), out, 37, 57, -3, -1)
    np.testing.assert_array_equal(out.to_host(), np.full((4, 32), 2, np.int32))
