"""The race check follows the async proxy's reads to their end: a wgmma's descriptor operands (and
a TMA store's source) are read until the wait that retires them, so a write into those bytes by
a thread outside the reading warpgroup (thread) must come after a barrier that follows that
wait, or after an mbarrier the reading warpgroup arrived at after it. Each planted bug (the
ordering removed) is rejected naming both PTX lines; each ordered kernel computes the product."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from kaio.ops_library import attention

import kaio
from kaio.errors import KaioMemoryError

from ...ops_library.test_attention_sim import BOUND, reference
from ...passes.test_reuse_dead_shared import DropReuseBarriers
from .test_async_faithful import DESC, HEADER, accumulators, assembled, core_matrix_image, line_of

# The default (lockstep) schedule: the overwrite runs after both warpgroups' waits, the case the
# retired-read rule covers. Under an adversarial schedule it may run before warpgroup 0's wgmma or
# between its issue and its wait, where other rules (the proxy fence, the reads in flight) apply.

# Two warpgroups (256 threads) each compute the same 64 x 8 product from one shared image (A then
# B, 2304 bytes in the no-swizzle layout of test_async_faithful.py), written by threads 0..143
# and fenced; every thread stores its 4 accumulators. {after} runs once both waits are done.
KERNEL = HEADER + """
.visible .entry mma(.param .u64 p_image, .param .u64 p_out)
{{
	.reg .pred %p<8>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<12>;
	.reg .f32 %f<4>;
	.shared .align 128 .b8 smem[2304];
	.shared .align 8 .b64 bars[2];
	ld.param.u64 %rd1, [p_image];
	ld.param.u64 %rd2, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, smem;
	mov.u32 %r12, bars;
	setp.lt.u32 %p1, %r1, 144;
	setp.eq.u32 %p2, %r1, 0;
	setp.eq.u32 %p3, %r1, 128;
	mul.wide.u32 %rd3, %r1, 16;
	add.s64 %rd4, %rd1, %rd3;
	shl.b32 %r3, %r1, 4;
	add.s32 %r8, %r2, %r3;
	@%p1 ld.global.v4.u32 {{%r4, %r5, %r6, %r7}}, [%rd4];
	@%p1 st.shared.v4.u32 [%r8], {{%r4, %r5, %r6, %r7}};
	@%p2 mbarrier.init.shared::cta.b64 [%r12], 1;
	@%p2 mbarrier.init.shared::cta.b64 [%r12+8], 1;
	@%p2 fence.mbarrier_init.release.cluster;
	fence.proxy.async.shared::cta;
	bar.sync 0;
	cvt.u64.u32 %rd5, %r2;
	shr.u64 %rd5, %rd5, 4;
	or.b64 %rd6, %rd5, {desc};
	add.s64 %rd7, %rd6, 128;
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{%f0, %f1, %f2, %f3}}, %rd6, %rd7, 0, 1, 1, 0, 0;
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
{after}
	mul.wide.u32 %rd8, %r1, 16;
	add.s64 %rd9, %rd2, %rd8;
	st.global.v4.f32 [%rd9], {{%f0, %f1, %f2, %f3}};
	ret;
}}
"""
# what warpgroup 1 (thread 128, or all of it) does to A's first bytes, which warpgroup 0 read
OVERWRITE = "\t@%p3 st.shared.u32 [%r2], 0;  // the overwrite"
COPY = "\t@%p3 cp.async.ca.shared.global [%r2], [%rd1], 16;  // the overwrite\n\tcp.async.wait_all;"
BULK_LOAD = (
    "\t@%p3 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r12], 256;\n"
    "\t@%p3 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1], 256, [%r12];  // the overwrite\n"
    "LANDED:\n"
    "\tmbarrier.try_wait.parity.shared::cta.b64 %p4, [%r12], 0;\n"
    "\t@!%p4 bra LANDED;"
)
BARRIER = "\tbar.sync 0;  // the ordering"
# warpgroup 0's thread 0 releases its ended reads on an mbarrier that thread 128 acquires
RELEASE = (
    "\t@%p2 mbarrier.arrive.shared::cta.b64 _, [%r12+8];  // the ordering\n"
    "RELEASED:\n"
    "\tmbarrier.try_wait.parity.shared::cta.b64 %p5, [%r12+8], 0;\n"
    "\t@!%p5 bra RELEASED;"
)
WGMMA = "wgmma.mma_async"


def kernel(after: str) -> str:
    return KERNEL.format(desc=DESC, after=after)


def run(sim, dev, rng, ptx: str, race_check: bool = True) -> None:
    sim.race_check = race_check
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((8, 16)).astype(np.float16)  # N x K
    image = np.concatenate([core_matrix_image(a), core_matrix_image(b)])
    out = dev.empty((256, 4), np.float32)
    sim.load(assembled(ptx)).launch("mma", 1, 256, dev.params(dev.array(image), out))
    got = dev.read(out)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    for group in (got[:128], got[128:]):
        assert np.abs(accumulators(group) - want).max() <= 1e-5 * np.abs(want).max()


def expect_race(sim, dev, rng, ptx: str) -> KaioMemoryError:
    """The planted bug is reported at the overwrite, naming the wgmma's line."""
    with pytest.raises(KaioMemoryError, match=r"shared memory race \(write-after-read") as info:
        run(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, "the overwrite")
    assert info.value.other_ptx_line == line_of(ptx, WGMMA)
    return info.value


@pytest.mark.parametrize("write", [OVERWRITE, COPY, BULK_LOAD], ids=["st.shared", "cp.async", "bulk-load"])
def test_writing_what_another_warpgroups_retired_wgmma_read_without_a_barrier_is_a_race(sim, dev, rng, write):
    ptx = kernel(write)
    run(sim, dev, rng, ptx, race_check=False)  # right by luck: the simulator has no other schedule to show
    error = expect_race(sim, dev, rng, ptx)
    assert "wgmma.mma_async operand read by the warpgroup of threads (0, 0, 0)..(127, 0, 0)" in str(error)
    assert error.thread == (128, 0, 0)


@pytest.mark.parametrize("write", [OVERWRITE, COPY, BULK_LOAD], ids=["st.shared", "cp.async", "bulk-load"])
def test_a_barrier_after_the_wait_orders_the_write(sim, dev, rng, write):
    run(sim, dev, rng, kernel(BARRIER + "\n" + write))


def test_a_barrier_before_the_wait_does_not_end_the_read(sim, dev, rng):
    """The read lasts until the wait: a barrier between the wgmma and its wait orders nothing."""
    ptx = kernel(OVERWRITE).replace("\twgmma.wait_group.sync.aligned 0;", "\tbar.sync 0;\n\twgmma.wait_group.sync.aligned 0;")
    expect_race(sim, dev, rng, ptx)


def test_an_mbarrier_released_after_the_wait_orders_a_bulk_load(sim, dev, rng):
    """Warp-specialised refill: the consumer arrives after its wait, the producer waits, then loads."""
    run(sim, dev, rng, kernel(RELEASE + "\n" + BULK_LOAD))


def test_an_mbarrier_released_before_the_wait_does_not(sim, dev, rng):
    """Planted bug: the consumer arrives before its wgmma.wait_group (warpgroup 1's wait, though
    later, does not end warpgroup 0's reads for an arrival of warpgroup 0)."""
    ptx = kernel(BULK_LOAD).replace("\twgmma.wait_group.sync.aligned 0;", RELEASE + "\n\twgmma.wait_group.sync.aligned 0;")
    expect_race(sim, dev, rng, ptx)


def test_the_same_warpgroup_may_write_after_its_own_wait(sim, dev, rng):
    """Only another warpgroup's write races: here warpgroup 1 skips the wgmma, and thread 0
    overwrites operand bytes only its own warpgroup read, right after its wait."""
    ptx = kernel("\t@%p2 st.shared.u32 [%r2], 0;  // the overwrite")
    ptx = ptx.replace("\twgmma.fence.sync.aligned;", "\tsetp.ge.u32 %p6, %r1, 128;\n\t@%p6 bra SKIP;\n\twgmma.fence.sync.aligned;")
    ptx = ptx.replace("\twgmma.wait_group.sync.aligned 0;", "\twgmma.wait_group.sync.aligned 0;\nSKIP:")
    sim.race_check = True
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((8, 16)).astype(np.float16)
    image = np.concatenate([core_matrix_image(a), core_matrix_image(b)])
    out = dev.empty((256, 4), np.float32)
    sim.load(assembled(ptx)).launch("mma", 1, 256, dev.params(dev.array(image), out))
    want = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.abs(accumulators(dev.read(out)[:128]) - want).max() <= 1e-5 * np.abs(want).max()


def test_kaio_attention_without_its_reuse_barrier_is_reported_on_sm90a(rng, monkeypatch):
    """kaio's own case: on sm_90a the second key loop's Q copy takes the first loop's dead bytes
    (reuse-dead-shared), behind a barrier; without it, warpgroup 1 stores Q where warpgroup 0's
    last wgmma read. The race check used to pass it, and passes the kernel with the barrier."""
    module = sys.modules["kaio.ops_library.attention"]  # the package exports the function by that name
    configured = module.configured_kernel

    def run_attention(planted: bool) -> None:
        def kernel(*args, **kwargs):  # type: ignore[no-untyped-def]
            k = configured(*args, **kwargs)
            if not planted:
                return k
            return k.with_pipeline(lambda target: k.default_pipeline(target).insert(DropReuseBarriers(), before="lower-to-ptx"))

        monkeypatch.setattr(module, "configured_kernel", kernel)
        dev = kaio.Device("sim", arch="sm_90a")
        q = rng.standard_normal((1, 1, 260, 64)).astype(np.float16)
        k, v = (rng.standard_normal((1, 1, 300, 64)).astype(np.float16) for _ in range(2))
        out = dev.alloc_from(np.full(q.shape, np.nan, np.float16))
        previous, dev.simulator.race_check = dev.simulator.race_check, True
        try:
            attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=True, out=out)
        finally:
            dev.simulator.race_check = previous
        want, _ = reference(q, k, v, True)
        got = out.to_host().astype(np.float64)
        assert not np.isnan(got).any() and np.abs(got - want).max() <= BOUND

    run_attention(planted=False)
    with pytest.raises(KaioMemoryError, match=r"write-after-read.*wgmma.mma_async operand read by the warpgroup"):
        run_attention(planted=True)
