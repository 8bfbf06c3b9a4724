"""Tile atomics (``kt.atomic_*``): one atomic per tile element, exactly once however many
threads hold copies of it, returning the old values; scalar atomics once per program.

Atomics serialise in an order the test cannot know, so returned old values are checked as a
valid serialisation: per address, the olds of its updates chain from the initial value to the
final one. Every kernel runs on the sm_80 and the sm_90a simulators.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.errors import KaioCompileError
from kaio.prelude import Array, MutArray, atomic_add, f16, f32, i32, i64, u32

from .conftest import poisoned


@pytest.fixture(params=["sm_80", "sm_90a"])
def device(request: pytest.FixtureRequest) -> kaio.Device:
    return kaio.Device("sim", arch=request.param)


def _grid(n: int, block: int) -> int:
    return (n + block - 1) // block


# ---------------------------------------------------------------------------- kernels

B = 64  # a 64-element tile over 4 warps: every element is held by two threads


@kaio.tile_kernel(num_warps=4)
def histogram(idx: Array[i32], w: Array[i32], hist: MutArray[i32], olds: MutArray[i32], n: i32, BLOCK: kaio.constexpr = B):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    ok = offs < n
    i = kt.load(idx, offs, mask=ok)
    old = kt.atomic_add(hist, i, kt.load(w, offs, mask=ok), mask=ok)
    kt.store(olds, offs, old)  # all of them: a masked element's old is 0


@kaio.tile_kernel(num_warps=4)
def count_into_bins(idx: Array[i32], hist: MutArray[i32], n: i32, BLOCK: kaio.constexpr = B):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    atomic_add(hist, kt.load(idx, offs, mask=offs < n), 1, mask=offs < n)  # the prelude name, tile form


@kaio.tile_kernel(num_warps=4)
def float_max(idx: Array[i32], v: Array[f32], out: MutArray[f32], olds: MutArray[f32], n: i32, BLOCK: kaio.constexpr = B):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    ok = offs < n
    old = kt.atomic_max(out, kt.load(idx, offs, mask=ok), kt.load(v, offs, mask=ok), mask=ok)
    kt.store(olds, offs, old, mask=ok)


@kaio.tile_kernel(num_warps=4)
def int_min(idx: Array[i32], v: Array[i32], out: MutArray[i32], n: i32, BLOCK: kaio.constexpr = B):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    ok = offs < n
    kt.atomic_min(out, kt.load(idx, offs, mask=ok), kt.load(v, offs, mask=ok), mask=ok)


@kaio.tile_kernel(num_warps=4)
def exchange(perm: Array[i32], v: Array[u32], out: MutArray[u32], olds: MutArray[u32], n: i32, BLOCK: kaio.constexpr = B):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    ok = offs < n
    old = kt.atomic_xchg(out, kt.load(perm, offs, mask=ok), kt.load(v, offs, mask=ok), mask=ok)
    # twice, through a (2, BLOCK) tile: a thread that held a copy of an element now stores one
    copies = kt.broadcast_to(kt.expand_dims(old, 0), (2, BLOCK))
    kt.store(olds, kt.expand_dims(kt.arange(2), 1) * n + kt.expand_dims(offs, 0), copies, mask=kt.expand_dims(ok, 0))


@kaio.tile_kernel(num_warps=4)
def claim(idx: Array[i32], out: MutArray[i32], olds: MutArray[i32], n: i32, BLOCK: kaio.constexpr = B):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    ok = offs < n
    old = kt.atomic_cas(out, kt.load(idx, offs, mask=ok), 0, offs + 1, mask=ok)  # first claimant wins
    kt.store(olds, offs, old, mask=ok)


@kaio.tile_kernel(num_warps=4)
def column_sums(x: Array[f32], out: MutArray[f32], rows: i32, cols: i32, R: kaio.constexpr = 16, C: kaio.constexpr = 32):
    """A split reduction: each program sums its rows, then adds its partial sums atomically."""
    r = i32(kt.program_id(0)) * R + kt.arange(R)
    c = kt.arange(C)
    ok = (kt.expand_dims(r, 1) < rows) & (kt.expand_dims(c, 0) < cols)
    t = kt.load(x, kt.expand_dims(r, 1) * cols + kt.expand_dims(c, 0), mask=ok)
    kt.atomic_add(out, c, kt.sum(t, 0), mask=c < cols)


@kaio.tile_kernel(num_warps=4)
def total(x: Array[f32], out: MutArray[f32], tickets: MutArray[u32], counter: MutArray[u32], n: i32, BLOCK: kaio.constexpr = B):
    """Scalar atomics: once per program. The ticket (the counter's old value) is the same in
    every thread, so the program can use it."""
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    atomic_add(out, 0, kt.sum(kt.load(x, offs, mask=offs < n), 0))
    ticket = kt.atomic_add(counter, 0, u32(1))
    kt.store(tickets, i32(kt.program_id(0)) * 128 + kt.arange(128), kt.full((128,), ticket, u32))  # one per thread


@kaio.tile_kernel(num_warps=2)
def half_add(idx: Array[i32], v: Array[f16], out: MutArray[f16], n: i32, BLOCK: kaio.constexpr = 128):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    ok = offs < n
    kt.atomic_add(out, kt.load(idx, offs, mask=ok), kt.load(v, offs, mask=ok), mask=ok)


@kaio.tile_kernel(num_warps=2)
def wide_add(idx: Array[i32], v: Array[i64], out: MutArray[i64], olds: MutArray[i64], n: i32, BLOCK: kaio.constexpr = 32):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    ok = offs < n
    kt.store(olds, offs, kt.atomic_add(out, kt.load(idx, offs, mask=ok), kt.load(v, offs, mask=ok), mask=ok), mask=ok)


@kaio.tile_kernel(num_warps=4)
def in_a_loop(top: MutArray[i32], hist: MutArray[i32], seen: MutArray[i32], steps: i32):
    """Scalar and tile atomics in a loop that carries a tile built from their old values."""
    acc = kt.zeros((64,), i32)
    for s in range(steps):
        t = kt.atomic_max(top, 0, s)
        acc = acc + kt.atomic_add(hist, kt.arange(64) % 8, 1) * 0 + t
    kt.store(seen, i32(kt.program_id(0)) * 64 + kt.arange(64), acc)


@kaio.tile_kernel(num_warps=4)
def add_products(a: Array[f16], b: Array[f16], out: MutArray[f32], rows: i32,
                 M: kaio.constexpr = 64, N: kaio.constexpr = 16, K: kaio.constexpr = 16):  # fmt: skip
    """A dot's accumulator added into memory (split-K's shape, attention backward's dQ), at an
    index and under a mask made of broadcast ranges."""
    acc = kt.dot(kt.load(a, (0, 0), (M, K), (M, K)), kt.load(b, (0, 0), (K, N), (K, N)), kt.zeros((M, N), f32))
    r, c = kt.expand_dims(kt.arange(M), 1), kt.expand_dims(kt.arange(N), 0)
    kt.atomic_add(out, r * N + c, acc, mask=r < rows)


# ---------------------------------------------------------------------------- helpers


def check_add_serialisation(idx: np.ndarray, w: np.ndarray, olds: np.ndarray, start: np.ndarray, final: np.ndarray) -> None:
    """Per address, the olds of its updates (positive weights) sorted are a chain from the
    initial value: each one is the previous plus the previous update's weight."""
    for a in np.unique(idx):
        hits = np.flatnonzero(idx == a)
        order = hits[np.argsort(olds[hits], kind="stable")]
        chain = start[a] + np.concatenate(([0], np.cumsum(w[order])[:-1]))
        np.testing.assert_array_equal(olds[order], chain, err_msg=f"address {a}")
        assert final[a] == start[a] + w[hits].sum()


# ---------------------------------------------------------------------------- tests


def test_histogram_with_collisions_counts_every_element_once(device, rng):
    n, bins = 300, 8  # 300: the last program's tile is masked at the edge
    idx = rng.integers(0, bins, n).astype(np.int32)
    w = rng.integers(1, 5, n).astype(np.int32)
    start = rng.integers(-50, 50, bins).astype(np.int32)
    hist = device.alloc_from(start)
    olds = poisoned(device, (_grid(n, B) * B,), np.int32)
    histogram[_grid(n, B)](device.alloc_from(idx), device.alloc_from(w), hist, olds, n)
    expected = start.copy()
    np.add.at(expected, idx, w)
    got = hist.to_host()
    np.testing.assert_array_equal(got, expected)
    check_add_serialisation(idx, w, olds.to_host()[:n], start, got)
    np.testing.assert_array_equal(olds.to_host()[n:], 0)  # masked off: no update, old 0


def test_prelude_atomic_add_with_an_index_tile_is_the_tile_form(device, rng):
    n = 200
    idx = rng.integers(0, 5, n).astype(np.int32)
    hist = device.alloc_from(np.zeros(5, np.int32))
    count_into_bins[_grid(n, B)](device.alloc_from(idx), hist, n)
    np.testing.assert_array_equal(hist.to_host(), np.bincount(idx, minlength=5))


def test_float_max_with_collisions_and_its_olds(device, rng):
    n, bins = 150, 6
    idx = rng.integers(0, bins, n).astype(np.int32)
    v = rng.standard_normal(n).astype(np.float32)
    start = np.full(bins, -np.inf, np.float32)
    out = device.alloc_from(start)
    olds = poisoned(device, (n,), np.float32)
    float_max[_grid(n, B)](device.alloc_from(idx), device.alloc_from(v), out, olds, n)
    expected = start.copy()
    np.maximum.at(expected, idx, v)
    np.testing.assert_array_equal(out.to_host(), expected)
    got = olds.to_host()
    for a in range(bins):  # each update saw the running max of some of the others, never more
        hits = idx == a
        assert np.all(got[hits] <= expected[a]) and np.isneginf(got[hits]).sum() >= 1
        assert np.all(np.isin(got[hits][~np.isneginf(got[hits])], v[hits]))


def test_int_min_with_collisions(device, rng):
    n, bins = 260, 7
    idx = rng.integers(0, bins, n).astype(np.int32)
    v = rng.integers(-1000, 1000, n).astype(np.int32)
    start = rng.integers(-1000, 1000, bins).astype(np.int32)
    out = device.alloc_from(start)
    int_min[_grid(n, B)](device.alloc_from(idx), device.alloc_from(v), out, n)
    expected = start.copy()
    np.minimum.at(expected, idx, v)
    np.testing.assert_array_equal(out.to_host(), expected)


def test_f16_add_with_collisions(device, rng):
    n, bins = 200, 4
    idx = rng.integers(0, bins, n).astype(np.int32)
    v = rng.integers(-3, 4, n).astype(np.float16)  # small integers: every order sums exactly
    out = device.alloc_from(np.zeros(bins, np.float16))
    half_add[_grid(n, 128)](device.alloc_from(idx), device.alloc_from(v), out, n)
    expected = np.zeros(bins, np.float32)
    np.add.at(expected, idx, v.astype(np.float32))
    np.testing.assert_array_equal(out.to_host(), expected.astype(np.float16))


def test_i64_add_with_collisions_and_its_olds(device, rng):
    n, bins = 100, 5
    idx = rng.integers(0, bins, n).astype(np.int32)
    w = rng.integers(1, 2**40, n).astype(np.int64)  # past 32 bits
    start = rng.integers(-(2**50), 2**50, bins).astype(np.int64)
    out = device.alloc_from(start)
    olds = poisoned(device, (n,), np.int64)
    wide_add[_grid(n, 32)](device.alloc_from(idx), device.alloc_from(w), out, olds, n)
    got = out.to_host()
    expected = start.copy()
    np.add.at(expected, idx, w)
    np.testing.assert_array_equal(got, expected)
    check_add_serialisation(idx, w, olds.to_host(), start, got)


def test_atomics_in_a_loop_carrying_a_tile(device):
    programs, steps = 3, 5
    top = device.alloc_from(np.zeros(1, np.int32))
    hist = device.alloc_from(np.zeros(8, np.int32))
    seen = poisoned(device, (programs, 64), np.int32)
    in_a_loop[programs](top, hist, seen, steps)
    assert top.to_host()[0] == steps - 1
    np.testing.assert_array_equal(hist.to_host(), programs * steps * 8)  # 64 elements, 8 bins, per step
    got = seen.to_host()
    assert np.all(got == got[:, :1])  # the scalar olds are the same in every thread
    # step s of a program sees at least its own s - 1 and at most the last step of any program
    assert np.all(got[:, 0] >= sum(max(s - 1, 0) for s in range(steps))) and np.all(got[:, 0] <= steps * (steps - 1))


def test_exchange_at_unique_offsets_returns_the_exact_olds(device, rng):
    n = 190
    perm = rng.permutation(n).astype(np.int32)
    v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    start = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    out = device.alloc_from(start)
    olds = poisoned(device, (2, n), np.uint32)
    exchange[_grid(n, B)](device.alloc_from(perm), device.alloc_from(v), out, olds, n)
    expected = start.copy()
    expected[perm] = v
    np.testing.assert_array_equal(out.to_host(), expected)
    np.testing.assert_array_equal(olds.to_host(), np.stack([start[perm]] * 2))  # every copy got the old


def test_compare_and_swap_has_one_winner_per_address(device, rng):
    n, bins = 170, 9
    idx = rng.integers(0, bins, n).astype(np.int32)
    out = device.alloc_from(np.zeros(bins, np.int32))
    olds = poisoned(device, (n,), np.int32)
    claim[_grid(n, B)](device.alloc_from(idx), out, olds, n)
    final, got = out.to_host(), olds.to_host()
    for a in range(bins):
        hits = np.flatnonzero(idx == a)
        if hits.size == 0:
            assert final[a] == 0
            continue
        winners = hits[got[hits] == 0]
        assert winners.size == 1 and final[a] == winners[0] + 1  # the winner saw 0 and wrote its id
        assert np.all(got[hits[got[hits] != 0]] == final[a])  # the others saw the winner's id


def test_split_reduction_adds_partial_sums_once_per_program(device, rng):
    rows, cols = 70, 29
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = device.alloc_from(np.zeros(32, np.float32))
    column_sums[_grid(rows, 16)](device.alloc_from(x), out, rows, cols)
    got = out.to_host()
    np.testing.assert_allclose(got[:cols], x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[cols:], 0)  # masked columns untouched


def test_an_accumulator_is_added_in_its_own_layout(device, rng):
    """The atomic takes the accumulator's mma layout and remakes its index and mask there: no
    move through shared memory, one update per element and thread (the index's own layout,
    from broadcasts of a (1, N) range, held every element in several warps)."""
    m, n, k, rows = 64, 16, 16, 50
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    start = rng.standard_normal((m, n)).astype(np.float32)
    out = device.alloc_from(start)
    add_products[2](device.alloc_from(a), device.alloc_from(b), out, rows)
    want = start + np.where(np.arange(m)[:, None] < rows, 2 * (a.astype(np.float32) @ b.astype(np.float32)), 0)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-4)
    compiled = kaio.compile(add_products, device.arch)
    laid = compiled.stages["tile-layout"]
    assert "tile.convert_layout" not in laid
    assert re.search(r"tile\.atomic_rmw addf %\w+, %\w+\[%\w+\] mask %\w+ : tensor<64x16xf32, #tile\.mma", laid)
    assert compiled.ptx.count("red.global.add.f32") == m * n // 128  # 4 warps of 32 threads, no copies


def test_scalar_atomics_run_once_per_program(device, rng):
    n = 5 * B - 3
    x = rng.standard_normal(n).astype(np.float32)
    out = device.alloc_from(np.zeros(1, np.float32))
    counter = device.alloc_from(np.zeros(1, np.uint32))
    tickets = poisoned(device, (5, 128), np.uint32)
    total[5](device.alloc_from(x), out, tickets, counter, n)
    np.testing.assert_allclose(out.to_host()[0], x.sum(dtype=np.float64), rtol=1e-5, atol=1e-4)
    assert counter.to_host()[0] == 5  # one update per program, not one per thread
    got = tickets.to_host()
    assert np.all(got == got[:, :1]), "every thread of a program sees its ticket"
    assert sorted(got[:, 0].tolist()) == [0, 1, 2, 3, 4]


def test_unused_olds_become_red_and_need_no_shared_memory():
    ptx = kaio.compile(count_into_bins, "sm_80").ptx
    assert "red.global.add.u32" in ptx and "atom." not in ptx and "bar.sync" not in ptx
    used = kaio.compile(histogram, "sm_80").ptx
    assert used.count("atom.global.add.u32") >= 1 and "bar.sync" in used  # olds reach the copies


def test_atomics_survive_every_stage_as_text():
    from xdsl.parser import Parser

    from kaio.dialect_registry import kaio_context

    def atomics(text: str) -> list[str]:  # the atomic ops' lines, without source locations
        return [re.sub(r" loc\(.*\)$", "", line) for line in text.splitlines() if "tile.atomic" in line]

    for kernel in (histogram, claim, total):
        for stage, text in kaio.compile(kernel, "sm_80").stages.items():
            if "tile.atomic" in text:
                module = Parser(kaio_context(), text).parse_module()
                module.verify()
                assert atomics(str(module)) == atomics(text), stage


# ---------------------------------------------------------------------------- errors


def _compile_error(fn, num_warps: int = 1) -> str:  # type: ignore[no-untyped-def]
    """The error a tile kernel of ``fn`` gets (tile kernels compile when they are defined)."""
    with pytest.raises(KaioCompileError) as e:
        kaio.compile(kaio.tile_kernel(num_warps=num_warps)(fn), "sm_80")
    return str(e.value)


def test_atomic_errors_point_at_the_call():
    def half_max(out: MutArray[f16]):
        kt.atomic_max(out, kt.arange(32), f16(1.0))

    assert "atomic_max works on 32- and 64-bit integer and f32 arrays, not f16" in _compile_error(half_max)

    def read_only(out: Array[i32]):
        kt.atomic_add(out, kt.arange(32), 1)

    assert "read-only" in _compile_error(read_only)

    def wrong_values(out: MutArray[i32]):
        kt.atomic_add(out, kt.arange(32), kt.full((32,), 1.0, f32))

    assert "kt.atomic_add of f32 values into an array of i32" in _compile_error(wrong_values)

    def float_cas(out: MutArray[f32]):
        kt.atomic_cas(out, kt.arange(32), 0.0, 1.0)

    message = _compile_error(float_cas)
    assert "atomic_cas works on 32- and 64-bit integer arrays, not f32" in message
    assert "kt.atomic_cas(out, kt.arange(32), 0.0, 1.0)" in message  # the user's line


@kaio.device
def bump(hist: MutArray[i32], i: i32) -> i32:
    return atomic_add(hist, i, 1)


def test_writes_inside_elementwise_code_are_refused():
    def through_device_function(hist: MutArray[i32]):
        kt.store(hist, kt.arange(32), bump(hist, kt.arange(32)), mask=kt.arange(32) < 0)

    message = _compile_error(through_device_function)
    assert "would write memory element by element" in message and "kt.atomic_add" in message
