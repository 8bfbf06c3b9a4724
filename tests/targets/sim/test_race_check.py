"""Shared-memory race detection (``Simulator(race_check=True)``): hazards between two threads of
a CTA in one barrier interval are reported with both PTX lines; barriers, atomics and waited-for
cp.async copies behind a barrier are not; kaio's own kernels run clean."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from kaio.targets.sim import Simulator
from run_kernels import CASES, check

import kaio
from kaio.errors import KaioMemoryError

from . import test_reference_ptx as reference
from .conftest import HEADER, PTX_DIR, Device, check_ptx
from .test_kaio_matmul import compile_matmul, run_matmul
from .test_planted_bugs import _nvcc_matmul

BAR = "\tbar.sync 0;"


@pytest.fixture
def racy() -> Simulator:
    return Simulator(race_check=True)


def line_of(text: str, fragment: str, nth: int = 0) -> int:
    """1-based PTX line of the ``nth`` line containing ``fragment``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if fragment in line]
    return hits[nth]


def load(sim: Simulator, text: str):  # type: ignore[no-untyped-def]
    check_ptx(text)
    return sim.load(text)


# --- a neighbour exchange: s[tid] = in[tid]; out[tid] = s[(tid + 1) % 128] -----------------------


NEXT = "\tadd.s32 %r6, %r1, 1;\n\tand.b32 %r6, %r6, 127;"  # the neighbour: (tid + 1) % 128


def neighbour_kernel(between: str = "", after: str = "", partner: str = NEXT) -> str:
    return HEADER + f"""
.visible .entry neighbour(.param .u64 p_in, .param .u64 p_out)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<10>;
	.reg .b64 %rd<8>;
	.shared .align 4 .b32 s[128];
	mov.u32 %r1, %tid.x;
	mov.u32 %r8, %ctaid.x;
	mad.lo.s32 %r9, %r8, 128, %r1;
	ld.param.u64 %rd1, [p_in];
	ld.param.u64 %rd2, [p_out];
	mul.wide.u32 %rd3, %r9, 4;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.u32 %r2, [%rd4];
	mov.u32 %r3, s;
	shl.b32 %r4, %r1, 2;
	add.s32 %r5, %r3, %r4;
	st.shared.u32 [%r5], %r2;
{between}
{partner}
	shl.b32 %r6, %r6, 2;
	add.s32 %r6, %r3, %r6;
	ld.shared.u32 %r7, [%r6];
{after}
	add.s64 %rd5, %rd2, %rd3;
	st.global.u32 [%rd5], %r7;
	ret;
}}
"""


def run_neighbour(sim: Simulator, rng: np.random.Generator, text: str, ctas: int = 2) -> tuple[np.ndarray, np.ndarray]:
    dev = Device(sim)
    data = rng.integers(0, 2**32, (ctas, 128), dtype=np.uint32)
    out = dev.empty((ctas, 128), np.uint32)
    dev.launch(load(sim, text), "neighbour", (ctas, 1, 1), (128, 1, 1), dev.array(data), out)
    return data, dev.read(out)


CTA_WIDE_BARRIERS = [
    BAR,
    "\tbarrier.sync.aligned 0;",
    "\tbar.sync 3, 128;",  # counted, but the count is the whole block
    "\tsetp.eq.u32 %p1, %r1, 0;\n\tbar.red.or.pred %p1, 0, %p1;",
]


@pytest.mark.parametrize("barrier", CTA_WIDE_BARRIERS, ids=["bar.sync", "barrier.sync", "counted", "bar.red"])
def test_a_barrier_separates_the_write_from_the_neighbours_read(racy, rng, barrier):
    data, out = run_neighbour(racy, rng, neighbour_kernel(between=barrier))
    np.testing.assert_array_equal(out, np.roll(data, -1, axis=1))


def test_reading_a_neighbours_write_without_a_barrier_is_a_race(racy, rng):
    text = neighbour_kernel()
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        run_neighbour(racy, rng, text)
    err = info.value
    assert err.kernel == "neighbour"
    assert err.ptx_line == line_of(text, "ld.shared.u32 %r7")  # the second access
    assert err.other_ptx_line == line_of(text, "st.shared.u32 [%r5]")  # the first one
    assert (err.thread, err.block, err.other_thread) == ((0, 0, 0), (0, 0, 0), (1, 0, 0))
    assert err.address == 4  # s[1]
    assert err.hazard == "read-after-write"
    message = str(err)
    assert f"PTX line {err.other_ptx_line}" in message and f"PTX line {err.ptx_line}" in message
    assert "thread (1, 0, 0)" in message and "thread (0, 0, 0)" in message and "block (0, 0, 0)" in message


def test_the_check_is_off_by_default_and_can_be_switched_on_later(sim, rng):
    text = neighbour_kernel()
    run_neighbour(sim, rng, text)  # lockstep execution hides the race: no report
    sim.race_check = True
    with pytest.raises(KaioMemoryError, match="shared memory race"):
        run_neighbour(sim, rng, text)


def test_overwriting_what_a_neighbour_read_without_a_barrier_is_a_race(racy, rng):
    rewrite = "\tst.shared.u32 [%r5], %r1;"
    text = neighbour_kernel(between=BAR, after=rewrite)
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(write-after-read") as info:
        run_neighbour(racy, rng, text)
    err = info.value
    # thread 0 overwrites s[0], which thread 127 read: the lowest thread with a hazard
    assert (err.thread, err.other_thread) == ((0, 0, 0), (127, 0, 0))
    assert (err.ptx_line, err.other_ptx_line) == (line_of(text, rewrite.strip()), line_of(text, "ld.shared.u32 %r7"))
    data, out = run_neighbour(racy, rng, neighbour_kernel(between=BAR, after=BAR + "\n" + rewrite))
    np.testing.assert_array_equal(out, np.roll(data, -1, axis=1))


PART_BARRIERS = {
    "bar.warp.sync": "\tbar.warp.sync -1;",
    # warps 0-1 meet at barrier 1, warps 2-3 at barrier 2: each pair of partners meets
    "part of the block": "\tsetp.lt.u32 %p1, %r1, 64;\n\t@%p1 bar.sync 1, 64;\n\t@!%p1 bar.sync 2, 64;",
}


@pytest.mark.parametrize("barrier", PART_BARRIERS.values(), ids=PART_BARRIERS.keys())
def test_barriers_of_part_of_the_block_order_their_participants(sim, racy, rng, barrier):
    """A race-free exchange between lanes tid and tid ^ 1 that only __syncwarp, or a named barrier
    of a subset of the block, orders is clean (these were false positives before)."""
    text = neighbour_kernel(between=barrier, partner="\txor.b32 %r6, %r1, 1;")
    data, out = run_neighbour(sim, rng, text)
    np.testing.assert_array_equal(out, data[:, np.arange(128) ^ 1])
    data, out = run_neighbour(racy, rng, text)
    np.testing.assert_array_equal(out, data[:, np.arange(128) ^ 1])


UNORDERING_PART_BARRIERS = {
    # the partner tid ^ 32 is in the other warp: __syncwarp does not order the pair
    "bar.warp.sync": ("\tbar.warp.sync -1;", "\txor.b32 %r6, %r1, 32;"),
    # the partner tid ^ 64 waits at the other named barrier
    "part of the block": (PART_BARRIERS["part of the block"], "\txor.b32 %r6, %r1, 64;"),
}


@pytest.mark.parametrize("case", UNORDERING_PART_BARRIERS.values(), ids=UNORDERING_PART_BARRIERS.keys())
def test_barriers_of_part_of_the_block_do_not_order_outsiders(racy, rng, case):
    barrier, partner = case
    text = neighbour_kernel(between=barrier, partner=partner)
    with pytest.raises(KaioMemoryError, match="shared memory race") as info:
        run_neighbour(racy, rng, text)
    assert info.value.hazard == "read-after-write"


def test_producer_arrives_consumer_syncs_on_a_named_barrier(racy, rng):
    """Warp specialization: warp 2 stores and signals with bar.arrive 1, 96; warps 0-1 wait at
    the same counted barrier and warp 0 reads what warp 2 stored; warp 3 takes no part (and reads
    only its own slots). Ordered: no race (a false positive before)."""
    text = neighbour_kernel(
        between=(
            "\tsetp.lt.u32 %p1, %r1, 64;\n\t@%p1 bar.sync 1, 96;\n"
            "\tshr.u32 %r7, %r1, 5;\n\tsetp.eq.u32 %p1, %r7, 2;\n\t@%p1 bar.arrive 1, 96;"
        ),
        partner="\tadd.s32 %r6, %r1, 64;\n\tsetp.ge.u32 %p1, %r1, 32;\n\t@%p1 mov.u32 %r6, %r1;",
    )
    data, out = run_neighbour(racy, rng, text)
    np.testing.assert_array_equal(out[:, :32], data[:, 64:96])
    np.testing.assert_array_equal(out[:, 32:], data[:, 32:])


# --- a tree reduction in shared memory --------------------------------------------------------------


def reduction_kernel(first: str, loop: str) -> str:
    return HEADER + f"""
.visible .entry reduce(.param .u64 p_in, .param .u64 p_out)
{{
	.reg .pred %p<3>;
	.reg .b32 %r<12>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<8>;
	.shared .align 4 .f32 s[128];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, %ctaid.x;
	mad.lo.s32 %r3, %r2, 128, %r1;
	ld.param.u64 %rd1, [p_in];
	mul.wide.u32 %rd2, %r3, 4;
	add.s64 %rd3, %rd1, %rd2;
	ld.global.f32 %f1, [%rd3];
	mov.u32 %r4, s;
	shl.b32 %r5, %r1, 2;
	add.s32 %r6, %r4, %r5;
	st.shared.f32 [%r6], %f1;
{first}
	mov.u32 %r7, 64;
LOOP:
	setp.ge.u32 %p1, %r1, %r7;
	@%p1 bra SKIP;
	shl.b32 %r8, %r7, 2;
	add.s32 %r9, %r6, %r8;
	ld.shared.f32 %f2, [%r9];
	ld.shared.f32 %f3, [%r6];
	add.f32 %f3, %f3, %f2;
	st.shared.f32 [%r6], %f3;
SKIP:
{loop}
	shr.u32 %r7, %r7, 1;
	setp.ne.u32 %p2, %r7, 0;
	@%p2 bra LOOP;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra END;
	ld.shared.f32 %f1, [%r4];
	ld.param.u64 %rd4, [p_out];
	mul.wide.u32 %rd5, %r2, 4;
	add.s64 %rd6, %rd4, %rd5;
	st.global.f32 [%rd6], %f1;
END:
	ret;
}}
"""


def run_reduction(sim: Simulator, rng: np.random.Generator, text: str, ctas: int = 3) -> tuple[np.ndarray, np.ndarray]:
    dev = Device(sim)
    x = rng.standard_normal((ctas, 128)).astype(np.float32)
    out = dev.empty(ctas, np.float32)
    dev.launch(load(sim, text), "reduce", (ctas, 1, 1), (128, 1, 1), dev.array(x), out)
    return x, dev.read(out)


def test_a_reduction_with_its_barriers_is_clean_and_exact(racy, rng):
    x, out = run_reduction(racy, rng, reduction_kernel(BAR, BAR))
    tree = x.copy()
    stride = 64
    while stride:
        tree[:, :stride] += tree[:, stride : 2 * stride]  # the kernel's order, in float32
        stride //= 2
    np.testing.assert_array_equal(out, tree[:, 0])


@pytest.mark.parametrize(("missing", "other"), [("first", (64, 0, 0)), ("loop", (32, 0, 0))])
def test_a_reduction_missing_a_barrier_is_a_race(racy, rng, missing, other):
    text = reduction_kernel("" if missing == "first" else BAR, "" if missing == "loop" else BAR)
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        run_reduction(racy, rng, text)
    err = info.value
    # thread 0 reads s[64] (or, in the second round, s[32]) that another thread just wrote
    assert (err.thread, err.other_thread) == ((0, 0, 0), other)
    assert err.ptx_line == line_of(text, "ld.shared.f32 %f2")
    assert err.other_ptx_line == line_of(text, "st.shared.f32 [%r6], %f1" if missing == "first" else "st.shared.f32 [%r6], %f3")


# --- write-after-write --------------------------------------------------------------------------


def two_writers_kernel(body: str) -> str:
    return HEADER + f"""
.visible .entry two_writers(.param .u64 p_out)
{{
	.reg .pred %p<3>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	.shared .align 4 .b32 s[64];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, s;
{body}
	ret;
}}
"""


def test_two_threads_of_one_store_writing_one_word_race(racy):
    text = two_writers_kernel("\tshr.u32 %r3, %r1, 1;\n\tshl.b32 %r3, %r3, 2;\n\tadd.s32 %r3, %r2, %r3;\n\tst.shared.u32 [%r3], %r1;")
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(write-after-write") as info:
        load(racy, text).launch("two_writers", 1, 64, [b"\0" * 8])
    err = info.value
    # threads 0 and 1 both store to s[0]; stores apply in thread order, so thread 1 is second
    assert (err.thread, err.other_thread, err.address) == ((1, 0, 0), (0, 0, 0), 0)
    assert err.ptx_line == err.other_ptx_line == line_of(text, "st.shared.u32 [%r3]")


@pytest.mark.parametrize("barrier", [False, True])
def test_two_threads_writing_one_word_in_different_instructions(racy, barrier):
    body = "\n".join([
        "\tsetp.eq.u32 %p1, %r1, 0;",
        "\t@%p1 st.shared.u32 [%r2+8], %r1;",
        BAR if barrier else "",
        "\tsetp.eq.u32 %p2, %r1, 33;",
        "\t@%p2 st.shared.u16 [%r2+10], %r1;",  # overlaps the upper half of the word
    ])  # fmt: skip
    text = two_writers_kernel(body)
    module = load(racy, text)
    if barrier:
        module.launch("two_writers", 1, 64, [b"\0" * 8])
        return
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(write-after-write") as info:
        module.launch("two_writers", 1, 64, [b"\0" * 8])
    err = info.value
    assert (err.thread, err.other_thread, err.address) == ((33, 0, 0), (0, 0, 0), 10)
    assert (err.ptx_line, err.other_ptx_line) == (line_of(text, "st.shared.u16"), line_of(text, "st.shared.u32"))


@pytest.mark.parametrize("barrier", [True, False])
def test_threads_storing_neighbouring_bytes_of_one_word_do_not_race(racy, barrier):
    body = "\n".join([
        "\tadd.s32 %r3, %r2, %r1;",
        "\tst.shared.u8 [%r3], %r1;",  # thread i writes byte i: the race check tracks bytes
        BAR if barrier else "",
        "\tld.shared.u32 %r4, [%r2+4];",  # every thread reads bytes 4-7
    ])  # fmt: skip
    text = two_writers_kernel(body)
    module = load(racy, text)
    assert module.entries["two_writers"].shared_granule == 1
    if barrier:
        module.launch("two_writers", 1, 64, [b"\0" * 8])
        return
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        module.launch("two_writers", 1, 64, [b"\0" * 8])
    assert (info.value.thread, info.value.other_thread, info.value.address) == ((0, 0, 0), (4, 0, 0), 4)


# --- atomics ------------------------------------------------------------------------------------------


def histogram_kernel(atomic: str, first: str = BAR, second: str = BAR) -> str:
    return HEADER + f"""
.visible .entry hist(.param .u64 p_in, .param .u64 p_out)
{{
	.reg .pred %p<3>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<8>;
	.shared .align 4 .u32 bins[16];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, bins;
	shl.b32 %r3, %r1, 2;
	add.s32 %r4, %r2, %r3;
	setp.lt.u32 %p1, %r1, 16;
	mov.u32 %r5, 0;
	@%p1 st.shared.u32 [%r4], %r5;
{first}
	ld.param.u64 %rd1, [p_in];
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	ld.global.u32 %r6, [%rd3];
	and.b32 %r6, %r6, 15;
	shl.b32 %r6, %r6, 2;
	add.s32 %r6, %r2, %r6;
	{atomic} [%r6], 1;
{second}
	@!%p1 bra END;
	ld.shared.u32 %r7, [%r4];
	ld.param.u64 %rd4, [p_out];
	mul.wide.u32 %rd5, %r1, 4;
	add.s64 %rd6, %rd4, %rd5;
	st.global.u32 [%rd6], %r7;
END:
	ret;
}}
"""


def run_histogram(sim: Simulator, rng: np.random.Generator, text: str) -> tuple[np.ndarray, np.ndarray]:
    dev = Device(sim)
    data = rng.integers(0, 2**32, 256, dtype=np.uint32)
    out = dev.empty(16, np.uint32)
    dev.launch(load(sim, text), "hist", (1, 1, 1), (256, 1, 1), dev.array(data), out)
    return data, dev.read(out)


ATOMICS = ["atom.shared.add.u32 %r8,", "red.shared.add.u32"]


@pytest.mark.parametrize("atomic", ATOMICS)
def test_atomics_on_shared_from_many_threads_do_not_race(racy, rng, atomic):
    data, out = run_histogram(racy, rng, histogram_kernel(atomic))
    np.testing.assert_array_equal(out, np.bincount(data & 15, minlength=16))


@pytest.mark.parametrize("atomic", ATOMICS)
def test_reading_atomic_results_without_a_barrier_is_a_race(racy, rng, atomic):
    text = histogram_kernel(atomic, second="")
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        run_histogram(racy, rng, text)
    err = info.value
    assert "other access: atomic by thread" in str(err)
    assert (err.ptx_line, err.other_ptx_line) == (line_of(text, "ld.shared.u32 %r7"), line_of(text, atomic.split()[0]))


def test_atomics_on_bins_another_thread_cleared_without_a_barrier_race(racy, rng):
    text = histogram_kernel(ATOMICS[0], first="")
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(write-after-write") as info:
        run_histogram(racy, rng, text)
    err = info.value
    assert "this access: atomic" in str(err) and "other access: write by thread" in str(err)
    assert (err.ptx_line, err.other_ptx_line) == (line_of(text, "atom.shared"), line_of(text, "st.shared.u32 [%r4]"))


# --- cp.async -----------------------------------------------------------------------------------------


def tile_kernel(before_wait: str = "", after_wait: str = BAR, prologue: str = "") -> str:
    """Each thread copies its 16-byte chunk of the tile with cp.async, then reads its
    neighbour's chunk."""
    return HEADER + f"""
.visible .entry tile(.param .u64 p_in, .param .u64 p_out)
{{
	.reg .b32 %r<12>;
	.reg .b64 %rd<8>;
	.shared .align 16 .b8 t[2048];
	mov.u32 %r1, %tid.x;
	ld.param.u64 %rd1, [p_in];
	mul.wide.u32 %rd2, %r1, 16;
	add.s64 %rd3, %rd1, %rd2;
	mov.u32 %r2, t;
	shl.b32 %r3, %r1, 4;
	add.s32 %r3, %r2, %r3;
	add.s32 %r4, %r1, 1;
	and.b32 %r4, %r4, 127;
	shl.b32 %r4, %r4, 4;
	add.s32 %r4, %r2, %r4;
{prologue}
	cp.async.cg.shared.global [%r3], [%rd3], 16;
	cp.async.commit_group;
{before_wait}
	cp.async.wait_group 0;
{after_wait}
	ld.shared.v4.u32 {{%r5, %r6, %r7, %r8}}, [%r4];
	ld.param.u64 %rd4, [p_out];
	add.s64 %rd5, %rd4, %rd2;
	st.global.v4.u32 [%rd5], {{%r5, %r6, %r7, %r8}};
	ret;
}}
"""


def run_tile(sim: Simulator, rng: np.random.Generator, text: str) -> tuple[np.ndarray, np.ndarray]:
    dev = Device(sim)
    data = rng.integers(0, 2**32, (128, 4), dtype=np.uint32)
    out = dev.empty((128, 4), np.uint32)
    dev.launch(load(sim, text), "tile", (1, 1, 1), (128, 1, 1), dev.array(data), out)
    return data, dev.read(out)


def test_a_cp_async_tile_read_after_wait_and_barrier_is_clean(racy, rng):
    data, out = run_tile(racy, rng, tile_kernel())
    np.testing.assert_array_equal(out, np.roll(data, -1, axis=0))


def test_a_cp_async_tile_read_after_the_wait_without_a_barrier_is_a_race(racy, rng):
    text = tile_kernel(after_wait="")
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        run_tile(racy, rng, text)
    err = info.value
    assert (err.thread, err.other_thread, err.address) == ((0, 0, 0), (1, 0, 0), 16)
    assert "other access: cp.async write (landed at its wait) by thread (1, 0, 0)" in str(err)
    # the write is the cp.async's, landed by thread 1's wait
    assert (err.ptx_line, err.other_ptx_line) == (line_of(text, "ld.shared.v4"), line_of(text, "cp.async.cg"))


def test_reading_a_chunk_another_threads_cp_async_has_in_flight_is_a_race(racy, rng):
    text = tile_kernel(before_wait="\tld.shared.u32 %r9, [%r4];")
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        run_tile(racy, rng, text)
    err = info.value
    assert "still in flight" in str(err)
    assert (err.ptx_line, err.other_ptx_line) == (line_of(text, "ld.shared.u32 %r9"), line_of(text, "cp.async.cg"))
    # without the check, the same read is an uninitialized one
    with pytest.raises(KaioMemoryError, match="uninitialized shared read"):
        run_tile(Simulator(), rng, text)


def test_a_cp_async_into_bytes_another_thread_read_without_a_barrier_is_a_race(racy, rng):
    prologue = "\n".join(["\tst.shared.u32 [%r3], %r1;", BAR, "\tld.shared.u32 %r9, [%r4];"])
    text = tile_kernel(prologue=prologue)
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(write-after-read") as info:
        run_tile(racy, rng, text)
    err = info.value
    # thread 0's copy may land while thread 127 still reads chunk 0: reported at the issue
    assert (err.thread, err.other_thread) == ((0, 0, 0), (127, 0, 0))
    assert (err.ptx_line, err.other_ptx_line) == (line_of(text, "cp.async.cg"), line_of(text, "ld.shared.u32 %r9"))
    run_tile(racy, rng, tile_kernel(prologue=prologue + "\n" + BAR))


# --- ldmatrix: a row is read by the lane that supplies its address --------------------------------


def ldmatrix_kernel(shift: int) -> str:
    return HEADER + f"""
.visible .entry frag(.param .u64 p_out)
{{
	.reg .b32 %r<12>;
	.reg .b64 %rd<4>;
	.shared .align 16 .b8 t[512];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, t;
	shl.b32 %r3, %r1, 4;
	add.s32 %r3, %r2, %r3;
	st.shared.v4.u32 [%r3], {{%r1, %r1, %r1, %r1}};
	add.s32 %r4, %r1, {shift};
	and.b32 %r4, %r4, 31;
	shl.b32 %r4, %r4, 4;
	add.s32 %r4, %r2, %r4;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r5, %r6, %r7, %r8}}, [%r4];
	ld.param.u64 %rd1, [p_out];
	mul.wide.u32 %rd2, %r1, 16;
	add.s64 %rd3, %rd1, %rd2;
	st.global.v4.u32 [%rd3], {{%r5, %r6, %r7, %r8}};
	ret;
}}
"""


def test_ldmatrix_rows_count_as_reads_of_the_lane_that_gave_the_address(racy):
    dev = Device(racy)
    out = dev.empty((32, 4), np.uint32)
    dev.launch(load(racy, ldmatrix_kernel(0)), "frag", 1, 32, out)  # each lane wrote its own row
    lane = np.arange(32)
    # register i of lane l holds row l // 4 of matrix i, written by lane 8 i + l // 4 (a row is
    # that lane's id as u32 words: the halves are (id, 0))
    expected = np.stack([8 * i + lane // 4 for i in range(4)], axis=1).astype(np.uint32)
    np.testing.assert_array_equal(dev.read(out), expected)
    text = ldmatrix_kernel(1)
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        dev.launch(load(racy, text), "frag", 1, 32, out)
    err = info.value
    assert (err.thread, err.other_thread, err.address) == ((0, 0, 0), (1, 0, 0), 16)
    assert err.ptx_line == line_of(text, "ldmatrix")


# --- kaio's own kernels run clean ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def kaio_matmul():  # type: ignore[no-untyped-def]
    return compile_matmul((16, 16, 16), 8)


@pytest.mark.parametrize("shape", [(128, 128, 128), (200, 136, 72)], ids=lambda s: "x".join(map(str, s)))
def test_kaio_tensor_core_matmul_is_race_free(racy, kaio_matmul, rng, shape):
    error, _ = run_matmul(racy, kaio_matmul, rng, *shape, 1.0, 0.5)
    assert error <= 1e-2


def without_line(text: str, line: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[: line - 1] + ["\t// removed"] + lines[line:]) + "\n"


def test_kaio_matmul_without_its_barrier_is_right_by_luck_but_reported(sim, racy, kaio_matmul, rng):
    """The main loop's one bar.sync keeps warps from reading a stage before every thread's
    cp.async of it landed (and from refilling it while others still read it). Lockstep
    execution computes the right product without it; the race check reports the missing sync."""
    barriers = [i + 1 for i, line in enumerate(kaio_matmul.ptx.splitlines()) if "bar.sync" in line]
    assert len(barriers) == 1
    broken = dataclasses.replace(kaio_matmul, ptx=without_line(kaio_matmul.ptx, barriers[0]))
    error, _ = run_matmul(sim, broken, rng, 128, 128, 128, 1.0, 0.0)
    assert error <= 1e-2
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write") as info:
        run_matmul(racy, broken, rng, 128, 128, 128, 1.0, 0.0)
    assert "cp.async write (landed at its wait)" in str(info.value)


@pytest.mark.parametrize("which", [0, 1])
def test_removing_a_barrier_from_the_nvcc_matmul_is_reported(racy, rng, which):
    text = (PTX_DIR / "nvcc_matmul.ptx").read_text()
    barrier = [i + 1 for i, line in enumerate(text.splitlines()) if "bar.sync" in line][which]
    with pytest.raises(KaioMemoryError, match=r"^shared memory race"):
        _nvcc_matmul(racy, without_line(text, barrier), (64, 64, 96), rng)


def test_waiting_for_one_group_too_few_is_a_race(racy, rng):
    """The planted stale-tile bug of test_planted_bugs: the last tile is read while its copies
    are still in flight."""
    text = (PTX_DIR / "nvcc_matmul.ptx").read_text().replace("cp.async.wait_group 0;", "cp.async.wait_group 1;")
    with pytest.raises(KaioMemoryError, match=r"^shared memory race \(read-after-write.*still in flight"):
        _nvcc_matmul(racy, text, (64, 64, 96), rng)


def test_the_triton_and_nvcc_fixtures_are_race_free(racy, rng):
    """Code from compilers nobody on kaio wrote: no false positive (Triton's softmax has every
    lane of a warp store the warp's maximum to one word: same values, no race)."""
    reference.test_triton_tensor_core_matmul(racy, rng, (80, 48, 96))
    reference.test_triton_softmax(racy, Device(racy), rng)
    reference.test_nvcc_tensor_core_matmul(racy, Device(racy), rng, (72, 136, 40))
    reference.test_nvcc_softmax(racy, Device(racy), rng)


@pytest.fixture
def sim_device():  # type: ignore[no-untyped-def]
    dev = kaio.Device("sim")
    previous = dev.simulator.race_check
    dev.simulator.race_check = True
    try:
        yield dev
    finally:
        dev.simulator.race_check = previous


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_ops_library_matmul_on_the_sim_device_is_race_free(sim_device, rng, dtype):
    from kaio.ops_library import matmul

    a = rng.standard_normal((96, 80)).astype(dtype)
    b = rng.standard_normal((80, 72)).astype(dtype)
    out = sim_device.alloc_from(np.full((96, 72), np.nan, dtype=np.float32))
    matmul(sim_device.alloc_from(a), sim_device.alloc_from(b), out)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(out.to_host() - want) / np.linalg.norm(want) <= 1e-2


@pytest.mark.parametrize("name", ["block_sum", "matmul", "histogram"])
def test_acceptance_kernels_with_shared_memory_are_race_free(sim_device, rng, name):
    case = next(c for c in CASES if c.name == name)
    n = int(rng.integers(300, 1500))
    got, expected = case.run(sim_device, rng, n)
    ok, error = check(case, got, expected, n)
    assert ok, f"{name}: max abs error {error}"
