"""Row reductions across warps and range masks, as ``lower-to-ptx`` emits them.

A reduction across warps goes through the kernel's one reduce scratch, in two halves used in
turn (``reduce_scratch``): one barrier between the warps' writes and the reads, which also
orders the reads of the reduction before it (the other half) before the writes of the one after
it (the same half); a second one after the reads of the last reduction of a block in a loop
(the next iteration writes the halves again), or before the writes when each half may still be
read (branches). A mask ``kt.arange(C) < n`` with n known a multiple of g is one predicate per
g consecutive elements of a thread; a row per program is tested with one signed compare. Checked on the simulator with its
shared-memory race checker, against numpy, with planted bugs that must be caught."""

from __future__ import annotations

from collections.abc import Iterator

import re

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.errors import KaioMemoryError
from kaio.passes.to_ptx import reduce_scratch, tile_elementwise, tile_views
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
def dev() -> Iterator[kaio.Device]:
    d = kaio.Device("sim")  # shared with other tests: its race check as it was, after
    before = d._backend.simulator.race_check  # type: ignore[attr-defined]
    d._backend.simulator.race_check = True  # type: ignore[attr-defined]
    yield d
    d._backend.simulator.race_check = before  # type: ignore[attr-defined]


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
    monkeypatch.setattr(reduce_scratch, "in_loop", lambda block: False)
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
    monkeypatch.setattr(tile_elementwise, "known_multiple", lambda value: 8)
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


def _three_reductions():  # type: ignore[no-untyped-def]
    """Fresh kernels with three reductions in sequence, and with one under an ``if``."""

    @kaio.tile_kernel(num_warps=4)
    def centred_spread(x: Array[f32], out: MutArray[f32], cols: i32, B: kaio.constexpr = C):
        t = kt.load(x, (0, 0), (1, B), (1, cols))
        inside = kt.expand_dims(kt.arange(B) < cols, 0)
        mean = kt.sum(t, 1) / f32(cols)
        top = kt.max(t, 1)  # of the row and the zeros after it
        d = kt.where(inside, t - kt.expand_dims(mean, 1), 0.0)
        kt.store(out, (0,), kt.sum(d * d, 1) + top, (1,))

    @kaio.tile_kernel(num_warps=4)
    def maybe_max(x: Array[f32], out: MutArray[f32], cols: i32, flag: i32, B: kaio.constexpr = C):
        t = kt.load(x, (0, 0), (1, B), (1, cols))
        s = kt.sum(t, 1)
        if flag > 0:
            s = s + kt.max(t, 1)
        kt.store(out, (0,), kt.sum(t * kt.expand_dims(s, 1), 1), (1,))

    return centred_spread, maybe_max


def _spread(dev: kaio.Device, kernel: object, rng: np.random.Generator, cols: int) -> None:
    x = rng.standard_normal(cols).astype(np.float32)
    out = dev.alloc_from(np.full(1, np.nan, np.float32))
    kernel[1](dev.alloc_from(x), out, cols)  # type: ignore[index]
    want = ((x.astype(np.float64) - x.mean()) ** 2).sum() + max(x.max(), 0.0)
    np.testing.assert_allclose(out.to_host()[0], want, rtol=1e-4, atol=1e-4)


def _maybe(dev: kaio.Device, kernel: object, rng: np.random.Generator, cols: int, flag: int) -> None:
    x = rng.standard_normal(cols).astype(np.float32)
    out = dev.alloc_from(np.full(1, np.nan, np.float32))
    kernel[1](dev.alloc_from(x), out, cols, flag)  # type: ignore[index]
    s = x.astype(np.float64).sum() + (max(x.max(), 0.0) if flag > 0 else 0.0)
    np.testing.assert_allclose(out.to_host()[0], (x * s).sum(), rtol=1e-4, atol=1e-3)


def _reduce_decls(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if ".shared" in line and "reduce" in line]


def test_reductions_in_sequence_share_one_scratch_in_halves_without_extra_barriers(dev, rng):
    centred_spread, _ = _three_reductions()
    ptx = kaio.compile(centred_spread, "sm_90a").ptx
    assert _reduce_decls(ptx) == [".shared .align 16 .b8 centred_spread_reduce[32];"]  # 2 x 4 warps x 4 bytes
    assert ptx.count("bar.sync") == 3  # the reductions' own
    _spread(dev, centred_spread, rng, 1000)


def test_planted_one_half_reused_without_a_barrier_races(dev, rng, monkeypatch):
    """Every reduction on half 0 and no barrier first: the second's writes race the first's reads."""
    monkeypatch.setenv("KAIO_CACHE", "0")
    plan = reduce_scratch.plan_reductions

    def one_half(root, needs):  # type: ignore[no-untyped-def]
        p = plan(root, needs)
        return reduce_scratch.ReducePlan({op: reduce_scratch.ScratchSlot(0, False) for op in p.slots}, p.half_bytes, 1)

    monkeypatch.setattr(reduce_scratch, "plan_reductions", one_half)
    centred_spread, _ = _three_reductions()
    assert kaio.compile(centred_spread, "sm_80").ptx.count("bar.sync") == 3
    with pytest.raises(KaioMemoryError, match="race"):
        _spread(dev, centred_spread, rng, 1000)


def test_with_one_half_each_reduction_waits_before_writing(dev, rng, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    monkeypatch.setattr(reduce_scratch, "HALVES", 1)
    centred_spread, _ = _three_reductions()
    ptx = kaio.compile(centred_spread, "sm_80").ptx
    assert _reduce_decls(ptx) == [".shared .align 16 .b8 centred_spread_reduce[16];"]
    assert ptx.count("bar.sync") == 5  # the first reduction finds its half clean
    _spread(dev, centred_spread, rng, 1000)


def test_after_an_if_that_may_read_either_half_a_barrier_comes_first(dev, rng, monkeypatch):
    """The ``if`` reads half 1, the path around it half 0: the last sum has no clean half."""
    monkeypatch.setenv("KAIO_CACHE", "0")
    plan, plans = reduce_scratch.plan_reductions, []
    spy = lambda root, needs: plans.append(plan(root, needs)) or plans[-1]
    monkeypatch.setattr(reduce_scratch, "plan_reductions", spy)
    _, maybe_max = _three_reductions()
    assert kaio.compile(maybe_max, "sm_80").ptx.count("bar.sync") == 4
    assert [(s.half, s.barrier_first) for s in plans[0].slots.values()] == [(0, False), (1, False), (0, True)]
    for flag in (1, 0):
        _maybe(dev, maybe_max, rng, 1000, flag)


def test_planted_without_the_barrier_after_the_if_the_path_around_it_races(dev, rng, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    plan = reduce_scratch.plan_reductions

    def no_barrier(root, needs):  # type: ignore[no-untyped-def]
        p = plan(root, needs)
        slots = {op: reduce_scratch.ScratchSlot(s.half, False) for op, s in p.slots.items()}
        return reduce_scratch.ReducePlan(slots, p.half_bytes, p.halves)

    monkeypatch.setattr(reduce_scratch, "plan_reductions", no_barrier)
    _, maybe_max = _three_reductions()
    _maybe(dev, maybe_max, rng, 1000, 1)  # through the if: its barrier orders the reuse
    with pytest.raises(KaioMemoryError, match="race"):
        _maybe(dev, maybe_max, rng, 1000, 0)


def _two_in_a_loop():  # type: ignore[no-untyped-def]
    @kaio.tile_kernel(num_warps=4)
    def sums_and_maxima(x: Array[f32], out: MutArray[f32], cols: i32, B: kaio.constexpr = C):
        s = kt.zeros((1,), f32)
        for k0 in range(0, cols, B):
            t = kt.load(x, (0, k0), (1, B), (1, cols))
            s = s * 0.5 + kt.sum(t, 1) + kt.max(t, 1)
        kt.store(out, (0,), s, (1,))

    return sums_and_maxima


def _run_two(dev: kaio.Device, kernel: object, rng: np.random.Generator, cols: int) -> None:
    x = rng.standard_normal(cols).astype(np.float32)
    out = dev.alloc_from(np.full(1, np.nan, np.float32))
    kernel[1](dev.alloc_from(x), out, cols)  # type: ignore[index]
    want = 0.0
    for k0 in range(0, cols, C):
        block = x[k0 : k0 + C].astype(np.float64)
        want = want * 0.5 + block.sum() + max(block.max(), 0.0 if len(block) < C else -np.inf)
    np.testing.assert_allclose(out.to_host()[0], want, rtol=1e-4, atol=1e-4)


def test_two_reductions_in_a_loop_take_two_barriers_a_trip(dev, rng):
    """The sum's half is read before the max's barrier, the max's before the next trip's sum's:
    no reduction waits after its reads (the sum in half 0, the max in half 1 on every trip)."""
    kernel = _two_in_a_loop()
    compiled = kaio.compile(kernel, "sm_80")
    assert compiled.ptx.count("bar.sync") == 2
    _run_two(dev, kernel, rng, 3 * C - 40)


def test_planted_two_reductions_in_a_loop_on_one_half_race(dev, rng, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    plan = reduce_scratch.plan_reductions

    def one_half(root, needs):  # type: ignore[no-untyped-def]
        p = plan(root, needs)
        slots = {op: reduce_scratch.ScratchSlot(0, False, s.barrier_after) for op, s in p.slots.items()}
        return reduce_scratch.ReducePlan(slots, p.half_bytes, 1)

    monkeypatch.setattr(reduce_scratch, "plan_reductions", one_half)
    kernel = _two_in_a_loop()
    with pytest.raises(KaioMemoryError, match="race"):
        _run_two(dev, kernel, rng, 3 * C)


def _row_per_program():  # type: ignore[no-untyped-def]
    @kaio.tile_kernel(num_warps=4)
    def row_sums(x: Array[f32], out: MutArray[f32], rows: i32, cols: i32, SHIFT: kaio.constexpr = 0,
                 B: kaio.constexpr = C):  # fmt: skip
        r = i32(kt.program_id(0)) - SHIFT  # SHIFT = 1: row -1 first (nothing inside)
        t = kt.load(x, (r, 0), (1, B), (rows, cols))
        kt.store(out, (r,), kt.sum(t, 1), (rows,))

    return row_sums


def _clamps_rows(ptx: str) -> bool:
    """Whether the PTX computes max(rows, 0), the bound of the unsigned test."""
    rows = re.search(r"ld\.param\.u32 (%r\d+), \[row_sums_rows\]", ptx)
    assert rows is not None
    return re.search(rf"max\.s32 %r\d+, {rows.group(1)}, 0;", ptx) is not None


def _row_sums(dev: kaio.Device, kernel: object, rng: np.random.Generator, rows: int, grid: int,
              shift: int) -> np.ndarray:  # fmt: skip
    cols = 1000
    x = rng.standard_normal((max(rows, 1), cols)).astype(np.float32)
    out = dev.alloc_from(np.full(grid, np.nan, np.float32))
    kernel[grid](dev.alloc_from(x), out, rows, cols, SHIFT=shift)  # type: ignore[index]
    got = out.to_host()
    np.testing.assert_allclose(got[: max(rows, 0)], x[: max(rows, 0)].astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)
    return got


@pytest.mark.parametrize("rows", [3, 0, -2])
def test_a_row_per_program_is_tested_with_one_signed_compare(dev, rng, rows):
    """A block index is below 2^31: in a dim of one element (no thread base) its row is never
    negative, so ``rows > row`` alone tests it (not ``row < max(rows, 0)`` unsigned)."""
    kernel = _row_per_program()
    assert not _clamps_rows(kaio.compile(kernel, "sm_80").ptx)
    got = _row_sums(dev, kernel, rng, rows, 4, 0)
    assert np.isnan(got[max(rows, 0) :]).all()  # programs past the rows write nothing


def test_an_offset_block_index_may_be_negative_and_keeps_both_tests(dev, rng):
    kernel = _row_per_program()
    assert _clamps_rows(kaio.compile(kernel, "sm_80", SHIFT=1).ptx)
    _row_sums(dev, kernel, rng, 3, 4, 1)


def test_planted_a_negative_row_taken_as_never_negative_is_read(dev, rng, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    monkeypatch.setattr(tile_views, "_never_negative", lambda offset, extent: True)
    kernel = _row_per_program()
    with pytest.raises(KaioMemoryError, match="out-of-bounds"):
        _row_sums(dev, kernel, rng, 3, 4, 1)  # program 0 reads row -1
