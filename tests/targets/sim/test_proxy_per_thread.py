"""A proxy fence orders the executing thread's own generic accesses (async_proxy.py): a generic
write by thread T reaches an async-proxy read (wgmma operand, TMA store source) only through a
fence.proxy.async by T after the write, or by the issuing thread after a synchronisation that
ordered the write before its fence. One thread's fence before the barrier (an mbarrier-init
thread's, say) does not cover the other threads' writes: a planted bug that must be rejected
naming the write and the async read; each legal placement computes the right result. Every
kernel is assembled by ptxas for sm_90a (run_wgmma / run_bulk_store) when the wheel is there."""

from __future__ import annotations

import pytest

from kaio.errors import KaioSimError

from .test_async_faithful import (
    BULK_STORE,
    BULK_STORE_KERNEL,
    PROXY_FENCE,
    line_of,
    run_bulk_store,
    run_wgmma,
    wgmma_kernel,
)

# thread 0 alone: %p0 (free in the wgmma kernel), set before the fence
ONLY_THREAD_0 = "\tsetp.eq.u32 %p0, %r1, 0;\n\t@%p0 " + PROXY_FENCE + "\n"
FENCE_THEN_BARRIER = "\t" + PROXY_FENCE + "\n\tbar.sync 0;\n"
MISSING = "missing fence.proxy.async: a generic-proxy write .* by the writing thread"


def placed(ptx: str, fence_then_barrier: str) -> str:
    assert ptx.count(FENCE_THEN_BARRIER) == 1
    return ptx.replace(FENCE_THEN_BARRIER, fence_then_barrier)


# --------------------------------------------------------------------------- wgmma operands

WGMMA_LEGAL = {
    "every thread, before the barrier": FENCE_THEN_BARRIER,
    "the warpgroup, after the barrier": "\tbar.sync 0;\n\t" + PROXY_FENCE + "\n",
    "one issuing thread, after the barrier": "\tbar.sync 0;\n" + ONLY_THREAD_0,
}
WGMMA_BUGS = {
    "one thread, before the barrier": ONLY_THREAD_0 + "\tbar.sync 0;\n",
    # the mbarrier-init idiom: thread 0 inits a barrier and fences, the others only store
    "the init thread, before the barrier": "\tsetp.eq.u32 %p0, %r1, 0;\n\t@%p0 mbarrier.init.shared::cta.b64 [%r2+2304], 1;\n"
    "\t@%p0 " + PROXY_FENCE + "\n\tbar.sync 0;\n",
    "fence.mbarrier_init by every thread": "\tfence.mbarrier_init.release.cluster;\n\tbar.sync 0;\n",
}


@pytest.mark.parametrize("where", list(WGMMA_LEGAL))
def test_wgmma_operands_fenced_in_a_legal_place_compute_the_product(sim, dev, rng, where):
    run_wgmma(sim, dev, rng, placed(wgmma_kernel(), WGMMA_LEGAL[where]))


@pytest.mark.parametrize("where", list(WGMMA_BUGS))
def test_wgmma_operands_fenced_by_another_thread_before_the_barrier_are_rejected(sim, dev, rng, where):
    ptx = placed(wgmma_kernel(), WGMMA_BUGS[where]).replace(".b8 smem[2304];", ".b8 smem[2312];")
    with pytest.raises(KaioSimError, match=MISSING) as info:
        run_wgmma(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, "wgmma.mma_async")
    assert f"PTX line {line_of(ptx, 'st.shared.v4.u32 [%r8], ')} " in str(info.value)
    first = 0 if "mbarrier_init by every" in where else 1  # the lowest thread whose write no fence of its own covers
    assert f"by thread {first} " in str(info.value)


# --------------------------------------------------------------------------- TMA store source

STORE_BARRIER = "\tbar.sync 0;\n\tsetp.eq.u32 %p1, %r1, 0;\n"


def store_kernel(fence_and_barrier: str) -> str:
    ptx = BULK_STORE_KERNEL.format(store=BULK_STORE, after="")
    old = "\t" + PROXY_FENCE + "\n" + STORE_BARRIER
    assert ptx.count(old) == 1
    return ptx.replace(old, fence_and_barrier)


STORE_LEGAL = {
    "every thread, before the barrier": "\t" + PROXY_FENCE + "\n" + STORE_BARRIER,
    "the issuing thread, after the barrier": STORE_BARRIER + "\t@%p1 " + PROXY_FENCE + "\n",
}


@pytest.mark.parametrize("where", list(STORE_LEGAL))
def test_tma_store_source_fenced_in_a_legal_place_is_stored(sim, dev, rng, where):
    run_bulk_store(sim, dev, rng, store_kernel(STORE_LEGAL[where]))


def test_tma_store_source_fenced_only_by_the_issuer_before_the_barrier_is_rejected(sim, dev, rng):
    ptx = store_kernel("\tsetp.eq.u32 %p1, %r1, 0;\n\t@%p1 " + PROXY_FENCE + "\n\tbar.sync 0;\n")
    with pytest.raises(KaioSimError, match=MISSING) as info:
        run_bulk_store(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, BULK_STORE)
    assert f"PTX line {line_of(ptx, 'st.shared.u32 [%r5]')} " in str(info.value)
    assert "by thread 1 " in str(info.value)  # thread 0's own write is fenced


# --------------------------------------------------------------------------- through an mbarrier

# The writers arrive on an mbarrier instead of a bar.sync and wait on it; thread 0 fences after
# its wait (legal) or before it (a planted bug) and stores the tile.
MBARRIER_INIT = (
    "\tmov.u32 %r6, bar;\n\tsetp.eq.u32 %p1, %r1, 0;\n\t@%p1 mbarrier.init.shared::cta.b64 [%r6], 128;\n"
    "\t@%p1 fence.mbarrier_init.release.cluster;\n\tbar.sync 0;\n"
)
WAIT = "WAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p0, [%r6], 0;\n\t@!%p0 bra WAIT;\n"


def mbarrier_store_kernel(fence_first: bool) -> str:
    fence = "\t@%p1 " + PROXY_FENCE + "\n"
    ptx = store_kernel("\tmbarrier.arrive.shared::cta.b64 _, [%r6];\n" + (fence + WAIT if fence_first else WAIT + fence))
    ptx = ptx.replace(".b8 tile[512];", ".b8 tile[512];\n\t.shared .align 8 .b64 bar;")
    return ptx.replace("\tst.shared.u32 [%r5], %r3;\n", MBARRIER_INIT + "\tst.shared.u32 [%r5], %r3;\n")


def test_tma_store_issuer_fencing_after_its_mbarrier_wait_is_stored(sim, dev, rng):
    run_bulk_store(sim, dev, rng, mbarrier_store_kernel(fence_first=False))


def test_tma_store_issuer_fencing_before_its_mbarrier_wait_is_rejected(sim, dev, rng):
    ptx = mbarrier_store_kernel(fence_first=True)
    with pytest.raises(KaioSimError, match=MISSING) as info:
        run_bulk_store(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, BULK_STORE)
    assert "by thread 1 " in str(info.value)
