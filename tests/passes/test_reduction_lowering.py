"""Row reductions across warps and range masks, as ``lower-to-ptx`` emits them.

A reduction across warps goes through a shared scratch of its own: one barrier between the
warps' writes and the reads, and a second one only when the reduction is in a loop (the next
iteration writes the scratch again). A mask ``kt.arange(C) < n`` with n known a multiple of g
is one predicate per g consecutive elements of a thread. Checked on the simulator with its
shared-memory race checker, against numpy, with planted bugs that must be caught."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.errors import KaioMemoryError
from kaio.passes.to_ptx import tile_values
from kaio.prelude import Array, MutArray, f16, f32, i32

C = 1024  # 4 warps of 32 lanes x 8 consecutive elements: every row reduction crosses warps


def _kernels():  # type: ignore[no-untyped-def]
    """Fresh kernel objects (a compile with a patched lowering must not come from a cache)."""

    @kaio.tile_kernel(num_warps=4)
    def sum_and_max(x: Array[f32], out: MutArray[f32], cols: i32, B: kaio.constexpr = C):
        t = kt.load(x, (0, 0), (1, B), (1, cols))
        s = kt.sum(t, 1)
        m = kt.max(t, 1)
        kt.store(out, (0,), s + m, (1,))

    @kaio.tile_kernel(num_warps=4)
    def looped_sums(x: Array[f32], out: MutArray[f32], cols: i32, B: kaio.constexpr = C):
        s = kt.zeros((1,), f32)
        for k0 in range(0, cols, B):
            s = s * 0.5 + kt.sum(kt.load(x, (0, k0), (1, B), (1, cols)), 1)
        kt.store(out, (0,), s, (1,))

    @kaio.tile_kernel(num_warps=4)
    def masked_copy(x: Array[f16], out: MutArray[f32], n: i32, B: kaio.constexpr = C):
        t = f32(kt.load(x, (0, 0), (1, B), (1, B)))
        inside = kt.expand_dims(kt.arange(B) < n, 0)  # a mask tile of its own (layer_norm's)
        kt.store(out, (0, 0), kt.where(inside, t, -1.0), (1, B))

    @kaio.tile_kernel(num_warps=4)
    def sums_of_squares(x: Array[f32], out: MutArray[f32], rows: i32, cols: i32, B: kaio.constexpr = C):
        t = kt.load(x, (0, 0), (4, B), (rows, cols))
        kt.store(out, (0,), kt.sum(t * t, 1), (rows,))

    sum_and_max.sums_of_squares = sums_of_squares  # type: ignore[attr-defined]
    return sum_and_max, looped_sums, masked_copy


@pytest.fixture
def dev() -> kaio.Device:
    d = kaio.Device("sim")
    d._backend.simulator.race_check = True  # type: ignore[attr-defined]
    return d


def _run_looped(dev: kaio.Device, kernel: object, rng: np.random.Generator, cols: int) -> None:
    x = rng.standard_normal(cols).astype(np.float32)
    out = dev.alloc_from(np.full(1, np.nan, np.float32))
    kernel[1](dev.alloc_from(x), out, cols)  # type: ignore[index]
    want = 0.0
    for k0 in range(0, cols, C):
        want = want * 0.5 + x[k0 : k0 + C].astype(np.float64).sum()
    np.testing.assert_allclose(out.to_host()[0], want, rtol=1e-4, atol=1e-4)


def test_a_reduction_outside_loops_has_one_barrier_and_runs_race_free(dev, rng):
    sum_and_max, _, _ = _kernels()
    compiled = kaio.compile(sum_and_max, "sm_80")
    assert compiled.ptx.count("bar.sync") == 2  # one per reduction
    cols = 1000
    x = rng.standard_normal(cols).astype(np.float32)
    out = dev.alloc_from(np.full(1, np.nan, np.float32))
    sum_and_max[1](dev.alloc_from(x), out, cols)
    np.testing.assert_allclose(out.to_host()[0], x.sum() + x.max(), rtol=1e-5, atol=1e-4)


def test_a_reduction_in_a_loop_waits_for_its_readers_before_the_next_iteration(dev, rng):
    _, looped_sums, _ = _kernels()
    assert kaio.compile(looped_sums, "sm_80").ptx.count("bar.sync") == 2
    _run_looped(dev, looped_sums, rng, 3 * C - 24)


def test_planted_without_the_loop_barrier_the_race_checker_objects(dev, rng, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    monkeypatch.setattr(tile_values, "in_loop", lambda block: False)
    _, looped_sums, _ = _kernels()
    assert kaio.compile(looped_sums, "sm_80").ptx.count("bar.sync") == 1
    with pytest.raises(KaioMemoryError, match="race"):
        _run_looped(dev, looped_sums, rng, 3 * C)


def _masked(dev: kaio.Device, kernel: object, rng: np.random.Generator, n: int) -> None:
    x = rng.standard_normal((1, C)).astype(np.float16)
    out = dev.alloc_from(np.full((1, C), np.nan, np.float32))
    kernel[1](dev.alloc_from(x), out, n)  # type: ignore[index]
    np.testing.assert_array_equal(out.to_host(), np.where(np.arange(C) < n, x.astype(np.float32), -1.0))


@pytest.mark.parametrize("n", [1000, 1012, 8, 0, -16, C])
def test_a_range_mask_is_one_compare_per_known_multiple(dev, rng, n):
    _, _, masked_copy = _kernels()
    specialised = kaio.compile(masked_copy, "sm_80", __divisible__=(("n", 8),))
    plain = kaio.compile(masked_copy, "sm_80", __divisible__=())
    assert plain.ptx.count("setp.lt.s32") == 8 and specialised.ptx.count("setp.lt.s32") == 1
    _masked(dev, masked_copy, rng, n)  # the launch specialises on n's own divisibility


def test_planted_a_run_longer_than_the_known_multiple_is_caught(dev, rng, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    monkeypatch.setattr(tile_values, "known_multiple", lambda value: 8)
    _, _, masked_copy = _kernels()
    with pytest.raises(AssertionError):
        _masked(dev, masked_copy, rng, 1012)  # 4-aligned: groups of 8 are not all on one side


def test_a_sum_of_products_accumulates_by_fma(dev, rng):
    """kt.sum(t * t): the map streams into the reduction, each thread's partial sum one fma per
    element after the first (one rounding each, as Triton's contraction does)."""
    kernel = _kernels()[0].sums_of_squares
    compiled = kaio.compile(kernel, "sm_80")
    per_thread = 4 * C // 128
    assert compiled.ptx.count("fma.rn.f32") == per_thread - 1  # a warp per row: 32 of one row each
    rows, cols = 3, 1000
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = dev.alloc_from(np.full(4, np.nan, np.float32))
    kernel[1](dev.alloc_from(x), out, rows, cols)
    np.testing.assert_allclose(out.to_host()[:rows], (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)
    assert np.isnan(out.to_host()[3])  # row 3 is outside: never written
