"""Warp-synchronous instructions in their less common forms, and CTA barriers beyond bar.sync 0."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.targets.sim import Simulator

from kaio.errors import KaioSimError

from .conftest import HEADER, Device, check_ptx


def _run(sim, dev, body: str, block: int, regs: str = "", grid: int = 1, shared: str = "", n_out: int | None = None, **kw):  # type: ignore[no-untyped-def]
    text = HEADER + f"""
.visible .entry k(.param .u64 k_out)
{{
	.reg .pred 	%p<8>;
	.reg .b32 	%r<32>;
	.reg .b64 	%rd<8>;
	{regs}
	{shared}
	ld.param.u64 	%rd1, [k_out];
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, %laneid;
	mov.u32 	%r30, %ntid.x;
	mov.u32 	%r31, %ctaid.x;
	mad.lo.s32 	%r29, %r31, %r30, %r1;
	mul.wide.u32 	%rd2, %r29, 4;
	add.s64 	%rd3, %rd1, %rd2;
{body}
	ret;
}}
"""
    check_ptx(text)
    out = dev.empty(n_out or grid * block, np.uint32)
    sim.load(text).launch("k", (grid, 1, 1), (block, 1, 1), [out.address.to_bytes(8, "little")], **kw)
    return dev.read(out)


def test_shfl_idx_and_down_with_sub_warp_width(sim, dev):
    # __shfl_sync(full, lane * 10, src = 3, width = 8): c = ((32 - 8) << 8) | 31
    body = """
	mul.lo.s32 	%r3, %r2, 10;
	shfl.sync.idx.b32 	%r4, %r3, 3, 6175, -1;
	shfl.sync.down.b32 	%r5|%p1, %r3, 2, 6175, -1;
	selp.u32 	%r6, 1000, 0, %p1;
	add.s32 	%r4, %r4, %r5;
	add.s32 	%r4, %r4, %r6;
	st.global.u32 	[%rd3], %r4;
"""
    got = _run(sim, dev, body, 64)
    lane = np.arange(64) % 32
    segment = lane & 0x18
    idx = (segment | 3) * 10
    in_segment = (lane & 7) + 2 <= 7
    down = np.where(in_segment, (lane + 2) * 10, lane * 10)
    np.testing.assert_array_equal(got, idx + down + np.where(in_segment, 1000, 0))


def test_vote_variants_and_activemask_in_divergent_code(sim, dev):
    body = """
	and.b32 	%r3, %r2, 3;
	setp.eq.u32 	%p1, %r3, 0;
	vote.sync.any.pred 	%p2, %p1, -1;
	vote.sync.all.pred 	%p3, %p1, -1;
	vote.sync.uni.pred 	%p4, %p2, -1;
	selp.u32 	%r4, 1, 0, %p2;
	selp.u32 	%r5, 2, 0, %p3;
	selp.u32 	%r6, 4, 0, %p4;
	or.b32 	%r4, %r4, %r5;
	or.b32 	%r4, %r4, %r6;
	setp.lt.u32 	%p5, %r2, 16;
	@!%p5 bra 	$HIGH;
	activemask.b32 	%r7;
	vote.sync.ballot.b32 	%r8, %p1, 65535;
	bra.uni 	$JOIN;
$HIGH:
	activemask.b32 	%r7;
	vote.sync.ballot.b32 	%r8, %p1, -65536;
$JOIN:
	xor.b32 	%r7, %r7, %r8;
	shl.b32 	%r4, %r4, 28;
	xor.b32 	%r4, %r4, %r7;
	st.global.u32 	[%rd3], %r4;
"""
    got = _run(sim, dev, body, 32)
    lane = np.arange(32)
    active = np.where(lane < 16, 0x0000FFFF, 0xFFFF0000)
    ballot = np.where(lane < 16, 0x00001111, 0x11110000)
    flags = 1 | 0 | 4  # any: yes; all: no; uni(any): every lane agrees
    np.testing.assert_array_equal(got, (flags << 28) ^ active ^ ballot)


def test_shuffle_inside_a_branch_with_a_matching_mask_is_fine(sim, dev):
    body = """
	setp.ge.u32 	%p1, %r2, 16;
	mov.u32 	%r4, 0;
	@%p1 bra 	$SKIP;
	shfl.sync.bfly.b32 	%r4, %r2, 1, 31, 65535;
	bar.warp.sync 	65535;
$SKIP:
	bar.warp.sync 	-1;
	st.global.u32 	[%rd3], %r4;
"""
    got = _run(sim, dev, body, 32)
    lane = np.arange(32)
    np.testing.assert_array_equal(got, np.where(lane < 16, lane ^ 1, 0))


def test_syncwarp_in_divergent_code_is_reported(sim, dev):
    body = """
	setp.ge.u32 	%p1, %r2, 8;
	@%p1 bra 	$SKIP;
	bar.warp.sync 	-1;
$SKIP:
	st.global.u32 	[%rd3], %r2;
"""
    with pytest.raises(KaioSimError, match="lanes 8-31 that are not converged"):
        _run(sim, dev, body, 32)


def test_partial_warps(sim, dev):
    body = """
	shfl.sync.bfly.b32 	%r4, %r1, 1, 31, -1;
	st.global.u32 	[%rd3], %r4;
"""
    got = _run(sim, dev, body, 48)  # warp 1 has lanes 0..15 only; the full mask is fine
    np.testing.assert_array_equal(got, np.arange(48) ^ 1)
    with pytest.raises(KaioSimError, match="reads lane 16"):
        _run(sim, dev, "\tshfl.sync.bfly.b32 	%r4, %r1, 16, 31, -1;\n\tst.global.u32 	[%rd3], %r4;", 48)


NAMED = """
	.shared .align 4 .u32 mailbox[32];
"""


def test_named_barrier_producer_consumer(sim, dev):
    # Consumers (warp 1) come first in the program, so they reach bar.sync before the
    # producers (warp 0) have stored anything: only the barrier makes their load valid.
    body = """
	mov.u32 	%r3, mailbox;
	shl.b32 	%r4, %r2, 2;
	add.s32 	%r5, %r3, %r4;
	setp.lt.u32 	%p1, %r1, 32;
	@%p1 bra 	$PRODUCER;
	bar.sync 	1, 64;
	ld.shared.u32 	%r6, [%r5];
	add.s32 	%r6, %r6, 1;
	st.global.u32 	[%rd3], %r6;
	bra.uni 	$END;
$PRODUCER:
	mul.lo.s32 	%r7, %r2, %r2;
	st.shared.u32 	[%r5], %r7;
	bar.arrive 	1, 64;
	st.global.u32 	[%rd3], %r7;
$END:
"""
    got = _run(sim, dev, body, 64, shared=NAMED, grid=3)
    lane = np.arange(32)
    np.testing.assert_array_equal(got, np.tile(np.concatenate([lane * lane, lane * lane + 1]), 3))


def test_barrier_in_a_loop_with_per_block_trip_counts(sim, dev):
    body = """
	mov.u32 	%r3, mailbox;
	shl.b32 	%r4, %r2, 2;
	add.s32 	%r5, %r3, %r4;
	mov.u32 	%r6, 0;
	mov.u32 	%r8, 0;
	st.shared.u32 	[%r5], %r6;
	bar.sync 	0;
$LOOP:
	setp.gt.u32 	%p1, %r6, %r31;
	@%p1 bra 	$DONE;
	ld.shared.u32 	%r7, [%r5];
	add.s32 	%r7, %r7, %r6;
	barrier.sync.aligned 	0;
	st.shared.u32 	[%r5], %r7;
	barrier.cta.sync 	0;
	add.s32 	%r6, %r6, 1;
	bra.uni 	$LOOP;
$DONE:
	ld.shared.u32 	%r8, [%r5];
	st.global.u32 	[%rd3], %r8;
"""
    got = _run(sim, dev, body, 32, shared=NAMED, grid=4)
    block = np.arange(4)
    np.testing.assert_array_equal(got, np.repeat(block * (block + 1) // 2, 32))


def test_exited_threads_release_barriers_unless_synccheck(dev):
    sim = Simulator()  # hardware semantics by default
    body = """
	setp.ge.u32 	%p1, %r1, 40;
	@%p1 bra 	$END;
	mov.u32 	%r3, mailbox;
	and.b32 	%r4, %r1, 31;
	shl.b32 	%r4, %r4, 2;
	add.s32 	%r5, %r3, %r4;
	st.shared.u32 	[%r5], %r1;
	bar.sync 	0;
	ld.shared.u32 	%r6, [%r5];
	st.global.u32 	[%rd3], %r6;
$END:
"""
    got = _run(sim, Device(sim), body, 64, shared=NAMED)
    slot = np.arange(40) & 31
    # threads 32..39 stored to slots 0..7 in the same instruction: the higher thread wins
    np.testing.assert_array_equal(got[:40], np.where(slot < 8, slot + 32, slot))
    assert (got[40:] == 0xFFFFFFFF).all()  # exited: never stored (poison intact)
    strict = Simulator(synccheck=True)
    with pytest.raises(KaioSimError, match="24 exited without arriving"):
        _run(strict, Device(strict), body, 64, shared=NAMED)


@pytest.mark.parametrize(
    ("op", "type_", "reduce"),
    [
        ("add", "u32", lambda v: int(v.sum()) & 0xFFFFFFFF),
        ("min", "s32", lambda v: int(v.view(np.int32).min())),
        ("max", "u32", lambda v: int(v.max())),
        ("and", "b32", lambda v: int(np.bitwise_and.reduce(v))),
        ("or", "b32", lambda v: int(np.bitwise_or.reduce(v))),
        ("xor", "b32", lambda v: int(np.bitwise_xor.reduce(v))),
    ],
)
def test_redux_sync_over_full_and_partitioned_masks(sim, dev, op, type_, reduce):
    # values: lane * 0x9E3779B9 (wrapping, so signed values are mixed); lanes < 8 reduce over
    # their own group of 8 (a partitioned mask), the others over lanes 8-31.
    body = f"""
	mul.lo.s32 	%r3, %r2, -1640531527;
	setp.lt.u32 	%p1, %r2, 8;
	@!%p1 bra 	$REST;
	redux.sync.{op}.{type_} 	%r4, %r3, 255;
	bra.uni 	$JOIN;
$REST:
	redux.sync.{op}.{type_} 	%r4, %r3, -256;
$JOIN:
	st.global.u32 	[%rd3], %r4;
"""
    got = _run(sim, dev, body, 64)
    values = (np.arange(32, dtype=np.uint64) * 0x9E3779B9 & 0xFFFFFFFF).astype(np.uint32)
    low, high = reduce(values[:8]) & 0xFFFFFFFF, reduce(values[8:]) & 0xFFFFFFFF
    np.testing.assert_array_equal(got, np.tile(np.where(np.arange(32) < 8, low, high), 2))


def test_redux_sync_with_a_missing_member_is_reported(sim, dev):
    body = """
	setp.lt.u32 	%p1, %r2, 8;
	@!%p1 bra 	$SKIP;
	redux.sync.add.u32 	%r4, %r2, -1;
$SKIP:
	st.global.u32 	[%rd3], %r2;
"""
    with pytest.raises(KaioSimError, match="lanes 8-31 that are not converged"):
        _run(sim, dev, body, 32)


def test_bar_red_popc_and_or(sim, dev):
    # 96 threads in 2 blocks; predicate: tid % 3 == 0 (32 of 96), and tid < 96 - block
    body = """
	rem.u32 	%r3, %r1, 3;
	setp.eq.u32 	%p1, %r3, 0;
	bar.red.popc.u32 	%r4, 0, %p1;
	sub.s32 	%r5, 96, %r31;
	setp.lt.u32 	%p2, %r1, %r5;
	barrier.red.and.pred 	%p3, 1, %p2;
	bar.red.or.pred 	%p4, 2, !%p2;
	selp.u32 	%r6, 1000, 0, %p3;
	selp.u32 	%r7, 10000, 0, %p4;
	add.s32 	%r4, %r4, %r6;
	add.s32 	%r4, %r4, %r7;
	st.global.u32 	[%rd3], %r4;
"""
    got = _run(sim, dev, body, 96, grid=2)
    # block 0: every tid < 96, so and = 1, or(!p) = 0; block 1: tid 95 fails, and = 0, or = 1
    np.testing.assert_array_equal(got, np.concatenate([np.full(96, 32 + 1000), np.full(96, 32 + 10000)]))


def test_live_threads_at_different_barriers_stay_an_error_with_exited_release(dev):
    sim = Simulator()
    body = """
	setp.ge.u32 	%p1, %r1, 48;
	@%p1 bra 	$END;
	setp.lt.u32 	%p2, %r1, 16;
	@%p2 bra 	$OTHER;
	bar.sync 	0;
	bra.uni 	$END;
$OTHER:
	bar.sync 	0;
$END:
"""
    with pytest.raises(KaioSimError, match="different barrier instructions"):
        _run(sim, Device(sim), body, 64, shared=NAMED)


def test_older_option_name_still_works():
    assert Simulator(exited_threads_release_barriers=False).synccheck
    sim = Simulator()
    sim.exited_threads_release_barriers = False
    assert sim.synccheck and not Simulator().synccheck
