"""Masks at the edges: a bool mask built by broadcasting a row tile against a column tile (once a
compiler bug met while writing the memory-bound ops: bool tiles could not move between layouts),
and views whose bounds are negative or whose offsets start before the array or are 64-bit, on
every path a view's elements take (vector, realigned and element accesses, cp.async and TMA
copies to shared memory)."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f16, f32, i32, i64, u64

from .conftest import poisoned


@kaio.tile_kernel(num_warps=1)
def masked_gather(x: Array[f32], out: MutArray[f32], rows: i32, cols: i32, R: kaio.constexpr = 4, C: kaio.constexpr = 8):
    r = kt.expand_dims(kt.arange(R), 1)
    j = kt.expand_dims(kt.arange(C), 0)
    ok = (r < rows) & (j < cols)  # a bool tile made by broadcasting (R, 1) against (1, C)
    kt.store(out, r * cols + j, kt.load(x, r * cols + j, mask=ok), mask=ok)


def test_a_mask_broadcast_from_row_and_column_tiles_loads():
    dev = kaio.Device("sim")
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    out = dev.alloc_from(np.zeros((3, 5), np.float32))
    masked_gather[1](dev.alloc_from(x), out, 3, 5)
    np.testing.assert_array_equal(out.to_host(), x)


# ------------------------------------------------------------------ exact bounds
# An element of a view is inside where 0 <= offset + i < bound along every dim: a negative bound
# has nothing inside, a negative offset starts before the array, and 64-bit offsets and bounds
# are compared in 64 bits (never truncated to their low 32 bits).

B1 = 256  # 1-D tiles: 4 f32 (or 8 f16) consecutive per thread with 2 warps, so an offset the
# launch cannot prove a multiple of 4 takes the realigned 16-byte accesses


@kaio.tile_kernel(num_warps=2)
def read_1d(x: Array[f32], out: MutArray[f32], off: i32, n: i32, B: kaio.constexpr = B1):
    kt.store(out, (0,), kt.load(x, (off,), (B,), (n,), other=-1.0), (B,))


@kaio.tile_kernel(num_warps=2)
def write_1d(x: Array[f32], out: MutArray[f32], off: i32, n: i32, B: kaio.constexpr = B1):
    kt.store(out, (off,), kt.load(x, (0,), (B,), (B,)), (n,))


@kaio.tile_kernel(num_warps=2)
def read_1d_f16(x: Array[f16], out: MutArray[f16], off: i32, n: i32, B: kaio.constexpr = B1):
    kt.store(out, (0,), kt.load(x, (off,), (B,), (n,), other=-1.0), (B,))


@kaio.tile_kernel(num_warps=2)
def write_1d_f16(x: Array[f16], out: MutArray[f16], off: i32, n: i32, B: kaio.constexpr = B1):
    kt.store(out, (off,), kt.load(x, (0,), (B,), (B,)), (n,))


@kaio.tile_kernel(num_warps=1)
def read_1d_wide(x: Array[f32], out: MutArray[f32], off: i64, n: i64, B: kaio.constexpr = 64):
    kt.store(out, (0,), kt.load(x, (off,), (B,), (n,), other=-1.0), (B,))


@kaio.tile_kernel(num_warps=1)
def write_1d_wide(x: Array[f32], out: MutArray[f32], off: i64, n: i64, B: kaio.constexpr = 64):
    kt.store(out, (off,), kt.load(x, (0,), (B,), (B,)), (n,))


@kaio.tile_kernel(num_warps=1)
def read_1d_u64(x: Array[f32], out: MutArray[f32], off: u64, n: u64, B: kaio.constexpr = 64):
    kt.store(out, (0,), kt.load(x, (off,), (B,), (n,), other=-1.0), (B,))


@kaio.tile_kernel(num_warps=4)
def read_2d(x: Array[f32], out: MutArray[f32], r0: i32, c0: i32, rows: i32, cols: i32, ld: i32,
            R: kaio.constexpr = 16, C: kaio.constexpr = 32):  # fmt: skip
    t = kt.load(x, (r0, c0), (R, C), (rows, cols), (ld, 1), other=-1.0)
    kt.store(out, (0, 0), t, (R, C))


@kaio.tile_kernel(num_warps=4)
def write_2d(x: Array[f32], out: MutArray[f32], r0: i32, c0: i32, rows: i32, cols: i32, ld: i32,
             R: kaio.constexpr = 16, C: kaio.constexpr = 32):  # fmt: skip
    kt.store(out, (r0, c0), kt.load(x, (0, 0), (R, C), (R, C)), (rows, cols), (ld, 1))


@kaio.tile_kernel(num_warps=4)
def masked_dot(a: Array[f16], b: Array[f16], c: MutArray[f32], r0: i32, m: i32, n: i32, k: i32,
               BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 32):  # fmt: skip
    acc = kt.zeros((BM, BN), f32)
    for k0 in range(0, k, BK):
        at = kt.load(a, (r0, k0), (BM, BK), (m, k))
        bt = kt.load(b, (k0, 0), (BK, BN), (k, n))
        acc = kt.dot(at, bt, acc)
    kt.store(c, (0, 0), acc, (BM, BN))


def window(x: np.ndarray, starts: tuple[int, ...], shape: tuple[int, ...], bounds: tuple[int, ...],
           other: float) -> np.ndarray:  # fmt: skip
    """What a view of ``x`` (rows of ``x.shape[-1]``) reads: the element at start + i where
    0 <= start + i < bound along every dim (and inside ``x``), else ``other``."""
    grids = _indices(starts, shape)
    ok = np.ones(shape, bool)
    for g, bound, size in zip(grids, bounds, x.shape, strict=True):
        ok &= (g >= 0) & (g < bound) & (g < size)
    clipped = tuple(np.where(ok, g, 0).astype(np.int64) for g in grids)
    return np.where(ok, x[clipped], np.asarray(other, x.dtype))


def _indices(starts: tuple[int, ...], shape: tuple[int, ...]) -> list[np.ndarray]:
    """The index along each dim of every element of a ``shape`` tile at ``starts`` (Python ints:
    the starts may not fit 64 bits)."""
    return np.meshgrid(*[s + np.arange(n).astype(object) for s, n in zip(starts, shape, strict=True)], indexing="ij")


def written(out: np.ndarray, x: np.ndarray, starts: tuple[int, ...], bounds: tuple[int, ...]) -> np.ndarray:
    """``out`` after a store of ``x`` at ``starts``: only the elements inside the bounds change."""
    want = out.copy()
    grids = _indices(starts, x.shape)
    ok = np.ones(x.shape, bool)
    for g, bound in zip(grids, bounds, strict=True):
        ok &= (g >= 0) & (g < bound)
    want[tuple(g[ok].astype(np.int64) for g in grids)] = x[ok]
    return want


@pytest.fixture(params=["sm_80", "sm_90a"])
def device(request: pytest.FixtureRequest) -> kaio.Device:
    return kaio.Device("sim", arch=request.param)


NEGATIVE_BOUNDS = [-1, -5, -(2**31)]


@pytest.mark.parametrize("n", NEGATIVE_BOUNDS)
def test_a_negative_bound_loads_other_everywhere(device, rng, n):
    x = rng.standard_normal(B1).astype(np.float32)
    out = poisoned(device, (B1,), np.float32)
    read_1d[1](device.alloc_from(x), out, 0, n)
    np.testing.assert_array_equal(out.to_host(), np.full(B1, -1.0, np.float32))
    out2 = poisoned(device, (16, 32), np.float32)
    read_2d[1](device.alloc_from(x.reshape(8, 32)), out2, 0, 0, n, 32, 32)
    np.testing.assert_array_equal(out2.to_host(), np.full((16, 32), -1.0, np.float32))
    read_2d[1](device.alloc_from(x.reshape(8, 32)), out2, 0, 0, 8, n, 32)
    np.testing.assert_array_equal(out2.to_host(), np.full((16, 32), -1.0, np.float32))


@pytest.mark.parametrize("n", NEGATIVE_BOUNDS)
def test_a_negative_bound_stores_nothing(device, rng, n):
    x = device.alloc_from(rng.standard_normal(16 * 32).astype(np.float32))
    out = poisoned(device, (B1,), np.float32)
    write_1d[1](x, out, 0, n)
    assert np.isnan(out.to_host()).all()
    out2 = poisoned(device, (16, 32), np.float32)
    write_2d[1](x, out2, 0, 0, n, 32, 32)
    write_2d[1](x, out2, 0, 0, 16, n, 32)
    assert np.isnan(out2.to_host()).all()


WIDE_CASES = [(2**32 + 3, 100), (-(2**32) + 3, 100), (2**31, 100), (-(2**31) - 1, 100), (3, 100), (-3, 100),
              (3, 2**32 + 5), (0, -(2**32) + 5), (-5, 2**40)]  # fmt: skip


@pytest.mark.parametrize("off, n", WIDE_CASES)
def test_64_bit_offsets_and_bounds_are_compared_in_64_bits(device, rng, off, n):
    x = rng.standard_normal(200).astype(np.float32)
    out = poisoned(device, (64,), np.float32)
    read_1d_wide[1](device.alloc_from(x), out, off, n)
    np.testing.assert_array_equal(out.to_host(), window(x, (off,), (64,), (n,), -1.0))
    if n <= 200:  # a store may only be bounded by what the array holds
        out = poisoned(device, (200,), np.float32)
        source = rng.standard_normal(64).astype(np.float32)
        write_1d_wide[1](device.alloc_from(source), out, off, n)
        np.testing.assert_array_equal(out.to_host(), written(np.full(200, np.nan, np.float32), source, (off,), (n,)))


@pytest.mark.parametrize("off, n", [(2**32 + 3, 100), (2**63 + 3, 100), (3, 2**32 + 5), (5, 2**64 - 1)])
def test_unsigned_64_bit_offsets_and_bounds_are_not_truncated(device, rng, off, n):
    x = rng.standard_normal(200).astype(np.float32)
    out = poisoned(device, (64,), np.float32)
    read_1d_u64[1](device.alloc_from(x), out, off, n)
    np.testing.assert_array_equal(out.to_host(), window(x, (off,), (64,), (n,), -1.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_offsets_before_the_array_touch_only_what_is_inside(device, rng, dtype):
    read, write = (read_1d, write_1d) if dtype == np.float32 else (read_1d_f16, write_1d_f16)
    size = 600
    x = rng.standard_normal(size).astype(dtype)
    xs = device.alloc_from(x)
    for off, n in [(-3, 100), (-1, size), (-255, size), (-256, size), (-2, 1), (-300, size), (5, -7), (-6, 2)]:
        out = poisoned(device, (B1,), dtype)
        read[1](xs, out, off, n)
        np.testing.assert_array_equal(out.to_host(), window(x, (off,), (B1,), (n,), -1.0), err_msg=f"read at {off}, {n}")
        source = rng.standard_normal(B1).astype(dtype)
        out = poisoned(device, (size,), dtype)
        write[1](device.alloc_from(source), out, off, n)
        want = written(np.full(size, np.nan, dtype), source, (off,), (n,))
        np.testing.assert_array_equal(out.to_host(), want, err_msg=f"write at {off}, {n}")


def test_2d_views_before_the_array_touch_only_what_is_inside(device, rng):
    x = rng.standard_normal((24, 40)).astype(np.float32)
    xs = device.alloc_from(x)
    source = rng.standard_normal((16, 32)).astype(np.float32)
    for r0, c0, rows, cols in [(-3, -5, 24, 40), (-20, 2, 24, 40), (10, -31, 24, 40), (-1, -1, 2, 3), (0, 0, 24, -1)]:
        out = poisoned(device, (16, 32), np.float32)
        read_2d[1](xs, out, r0, c0, rows, cols, 40)
        np.testing.assert_array_equal(out.to_host(), window(x, (r0, c0), (16, 32), (rows, cols), -1.0))
        out = poisoned(device, (24, 40), np.float32)
        write_2d[1](device.alloc_from(source), out, r0, c0, rows, cols, 40)
        want = written(np.full((24, 40), np.nan, np.float32), source, (r0, c0), (rows, cols))
        np.testing.assert_array_equal(out.to_host(), want)


@pytest.mark.parametrize("r0, m", [(-8, 40), (0, -5), (30, 40), (-64, 40)])
def test_dot_operands_copied_to_shared_memory_are_masked_exactly(device, rng, r0, m):
    # sm_80 fills shared memory with cp.async, sm_90a with TMA (a box starting before row 0;
    # an empty tensor's map describes a block of zeros): both must zero exactly the rows outside
    k, n = 64, 64
    a = rng.standard_normal((40, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = poisoned(device, (64, 64), np.float32)
    with device.profiling():
        masked_dot[1](device.alloc_from(a), device.alloc_from(b), c, r0, m, n, k)
    mix = device.last_launch_report.by_class
    copies = "cp.async.bulk.tensor.2d" if device.arch == "sm_90a" else "cp.async"
    assert mix[copies] > 0, mix
    rows = window(a.astype(np.float64), (r0, 0), (64, k), (m, k), 0.0)
    np.testing.assert_allclose(c.to_host(), rows @ b.astype(np.float64), rtol=1e-5, atol=1e-5 * np.sqrt(k))
