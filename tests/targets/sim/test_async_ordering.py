"""Bulk copies (TMA loads) are ordered with the generic accesses of *other* threads only through
synchronisation (causality.py, async_proxy.py), as on Hopper:

* the bytes a load landed are seen only by a thread whose mbarrier wait observed the phase the
  load completed (or a thread a barrier or an mbarrier ordered after such a thread);
* a load into a ring stage is issued only after every generic access of the stage, by any
  thread, is ordered before the issue (the consumers arrive on the "empty" mbarrier, the
  producer waits on it);
* a generic access then a load into the same bytes needs a fence.proxy.async on the causality
  path from the access to the issue: the accessing thread's before its synchronisation, or the
  issuer's after it; the issuer's fence before the barrier does not count (PTX ISA, "Causality
  Order"; CUTLASS and Triton place it in one of the legal places).

Each rule has a legal kernel that must compute the right result and planted bugs that the
simulator accepted before these rules (the fault names both PTX lines and threads). Kernels are
assembled by ptxas for sm_90a when the wheel is installed."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kaio.errors import KaioSimError

from .test_async_faithful import BULK_LOAD, HEADER, PROXY_FENCE, assembled, line_of

pytestmark = pytest.mark.schedule_seeds  # and under the adversarial schedule: warps out of lockstep


def run_copy(sim, dev, rng, ptx: str, entry: str, words: int = 128) -> None:
    """Launch ``entry`` (one CTA of 128 threads) on ``words`` random u32s: it must copy them out."""
    src = rng.integers(0, 2**32, words, dtype=np.uint32)
    out = dev.array(np.full(words, 0xDEADBEEF, dtype=np.uint32))
    sim.load(assembled(ptx)).launch(entry, 1, 128, dev.params(dev.array(src), out))
    np.testing.assert_array_equal(dev.read(out), src)


# --------------------------------------------------------------------------- 1. observing the phase

# Thread 0 loads 512 bytes and waits; the other threads learn that the copy is done through a
# plain shared flag thread 0 sets after its wait ({handoff} decides how they are ordered after
# it): a weak store and a volatile poll synchronise nothing in the PTX memory model.
OBSERVE_KERNEL = HEADER + """
.visible .entry observe(.param .u64 p_src, .param .u64 p_out)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<8>;
	.shared .align 128 .b8 buf[512];
	.shared .align 8 .b64 bar;
	.shared .align 4 .b32 flag;
	ld.param.u64 %rd1, [p_src];
	ld.param.u64 %rd2, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, buf;
	mov.u32 %r3, bar;
	mov.u32 %r8, flag;
	shl.b32 %r4, %r1, 2;
	add.s32 %r5, %r2, %r4;
	setp.eq.u32 %p1, %r1, 0;
	@%p1 st.shared.u32 [%r8], 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
	@%p1 fence.mbarrier_init.release.cluster;
	bar.sync 0;
	@!%p1 bra OTHERS;
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 512;
	{load} [%r2], [%rd1], 512, [%r3];
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
	@!%p2 bra WAIT;
	mov.u32 %r9, 1;
	st.shared.u32 [%r8], %r9;
OTHERS:
{handoff}
{use}
	ret;
}}
"""
READ_TILE = """	ld.shared.u32 %r6, [%r5];  // the tile
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd2, %rd3;
	st.global.u32 [%rd4], %r6;"""
# thread 32 (another warp than the loader's) stores the tile with a TMA store: an async read
STORE_TILE = """	setp.eq.u32 %p0, %r1, 32;
	@%p0 cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r2], 512;  // the tile
	@%p0 cp.async.bulk.commit_group;
	@%p0 cp.async.bulk.wait_group 0;"""
POLL = """POLL:
	ld.volatile.shared.u32 %r10, [%r8];
	setp.eq.u32 %p3, %r10, 0;
	@%p3 bra POLL;"""
OBSERVE_LEGAL = {
    "a barrier after the waiting thread's wait": "\tbar.sync 0;",
    "every thread waits on the phase": "WAIT2:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;\n\t@!%p2 bra WAIT2;",
    "a counted named barrier": "\tbar.sync 1, 128;",
    "the waiting thread's bar.arrive, the others' bar.sync": "\t@%p1 bar.arrive 1, 128;\n\t@!%p1 bar.sync 1, 128;",
}
NOT_OBSERVED = "bulk copy of PTX line .* wrote, by a thread that has not observed the completion of the mbarrier phase"


def observe_kernel(handoff: str, use: str = READ_TILE) -> str:
    return OBSERVE_KERNEL.format(load=BULK_LOAD, handoff=handoff, use=use)


@pytest.mark.parametrize("use", ["read", "TMA store"])
@pytest.mark.parametrize("handoff", list(OBSERVE_LEGAL))
def test_threads_ordered_after_the_phase_read_the_loaded_bytes(sim, dev, rng, handoff, use):
    run_copy(sim, dev, rng, observe_kernel(OBSERVE_LEGAL[handoff], READ_TILE if use == "read" else STORE_TILE), "observe")


@pytest.mark.parametrize("use", ["read", "TMA store"])
def test_a_thread_that_never_observed_the_phase_reading_the_loaded_bytes_is_rejected(sim, dev, rng, use):
    """The flag makes every reader run after the copy landed, so only the ordering rule sees it."""
    ptx = observe_kernel(POLL, READ_TILE if use == "read" else STORE_TILE)
    with pytest.raises(KaioSimError, match=NOT_OBSERVED) as info:
        run_copy(sim, dev, rng, ptx, "observe")
    assert info.value.ptx_line == line_of(ptx, "// the tile")
    assert f"bulk copy of PTX line {line_of(ptx, BULK_LOAD)} " in str(info.value)
    assert "issued by thread 0" in str(info.value) and "thread (0, 0, 0)" not in str(info.value)


# --------------------------------------------------------------------------- 2. the ring's WAR

# One stage, loaded twice: thread 0 produces; every thread reads its word of the first load,
# fences (generic read, then an async write) and arrives on the "empty" barrier (count
# {arrivals}); thread 0 waits on it and loads the second half of the source into the stage.
RING_KERNEL = HEADER + """
.visible .entry ring(.param .u64 p_src, .param .u64 p_out)
{{
	.reg .pred %p<6>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<8>;
	.shared .align 128 .b8 buf[512];
	.shared .align 8 .b64 full;
	.shared .align 8 .b64 empty;
	ld.param.u64 %rd1, [p_src];
	ld.param.u64 %rd2, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, buf;
	mov.u32 %r3, full;
	mov.u32 %r7, empty;
	shl.b32 %r4, %r1, 2;
	add.s32 %r5, %r2, %r4;
	setp.eq.u32 %p1, %r1, 0;
	setp.lt.u32 %p4, %r1, {arrivals};
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
	@%p1 mbarrier.init.shared::cta.b64 [%r7], {arrivals};
	@%p1 fence.mbarrier_init.release.cluster;
	bar.sync 0;
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 512;
	@%p1 {load} [%r2], [%rd1], 512, [%r3];
FULL0:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
	@!%p2 bra FULL0;
	ld.shared.u32 %r6, [%r5];  // first read
	{fence}
	@%p4 mbarrier.arrive.shared::cta.b64 _, [%r7];  // release the stage
	@!%p1 bra CONSUME;
{producer_wait}
	add.s64 %rd5, %rd1, 512;
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 512;
	{load} [%r2], [%rd5], 512, [%r3];  // refill
CONSUME:
FULL1:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 1;
	@!%p3 bra FULL1;
	ld.shared.u32 %r8, [%r5];
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd2, %rd3;
	st.global.u32 [%rd4], %r6;
	st.global.u32 [%rd4+512], %r8;
	ret;
}}
"""
PRODUCER_WAIT = "EMPTY:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p5, [%r7], 0;\n\t@!%p5 bra EMPTY;"
UNORDERED = "bulk copy into shared memory .* that thread (\\d+) accessed with a generic-proxy read at PTX line (\\d+), which is not ordered before this copy's issue"


def ring_kernel(arrivals: int = 128, producer_wait: bool = True, fence: str = PROXY_FENCE) -> str:
    return RING_KERNEL.format(load=BULK_LOAD, arrivals=arrivals, producer_wait=PRODUCER_WAIT if producer_wait else "", fence=fence)


def test_a_stage_refilled_after_its_consumers_released_it_is_correct(sim, dev, rng):
    run_copy(sim, dev, rng, ring_kernel(), "ring", 256)


@pytest.mark.parametrize(
    "bug, kwargs",
    [("the producer does not wait on the empty barrier", {"producer_wait": False}), ("half the consumers do not arrive", {"arrivals": 64})],
)
def test_a_refill_not_ordered_after_every_consumer_read_is_rejected(sim, dev, rng, bug, kwargs):
    ptx = ring_kernel(**kwargs)
    with pytest.raises(KaioSimError, match=UNORDERED) as info:
        run_copy(sim, dev, rng, ptx, "ring", 256)
    assert info.value.ptx_line == line_of(ptx, "// refill")
    match = re.search(UNORDERED, str(info.value))
    assert match is not None and int(match.group(2)) == line_of(ptx, "// first read")
    assert int(match.group(1)) >= (64 if "arrive" in bug else 1)  # a thread whose read nothing ordered


# --------------------------------------------------------------------------- 3. where the fence goes

# A stage every thread initialises with a generic store, then thread 0 loads into it: the fence
# must be on the way from each store to the load's issue.
INIT_THEN_LOAD = HEADER + """
.visible .entry overwrite(.param .u64 p_src, .param .u64 p_out)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<8>;
	.shared .align 128 .b8 buf[512];
	.shared .align 8 .b64 bar;
	ld.param.u64 %rd1, [p_src];
	ld.param.u64 %rd2, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, buf;
	mov.u32 %r3, bar;
	shl.b32 %r4, %r1, 2;
	add.s32 %r5, %r2, %r4;
	setp.eq.u32 %p1, %r1, 0;
	st.shared.u32 [%r5], 0;  // clear the stage
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
	@%p1 fence.mbarrier_init.release.cluster;
{fence_and_barrier}
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 512;
	@%p1 {load} [%r2], [%rd1], 512, [%r3];
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
	@!%p2 bra WAIT;
	ld.shared.u32 %r6, [%r5];
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd2, %rd3;
	st.global.u32 [%rd4], %r6;
	ret;
}}
"""
FENCE_LEGAL = {
    "every thread, before the barrier (CUTLASS)": f"\t{PROXY_FENCE}\n\tbar.sync 0;",
    "the issuer, after the barrier (Triton)": f"\tbar.sync 0;\n\t@%p1 {PROXY_FENCE}",
}
FENCE_BUGS = {
    "the issuer, before the barrier": f"\t@%p1 {PROXY_FENCE}\n\tbar.sync 0;",
    # each writer fences after its write, but the others' fences follow the barrier: not before the issue
    "the issuer before the barrier, the others after it": f"\t@%p1 {PROXY_FENCE}\n\tbar.sync 0;\n\t@!%p1 {PROXY_FENCE}",
}


@pytest.mark.parametrize("where", list(FENCE_LEGAL))
def test_a_proxy_fence_on_the_path_from_the_stores_to_the_load_is_accepted(sim, dev, rng, where):
    run_copy(sim, dev, rng, INIT_THEN_LOAD.format(load=BULK_LOAD, fence_and_barrier=FENCE_LEGAL[where]), "overwrite")


@pytest.mark.parametrize("where", list(FENCE_BUGS))
def test_a_proxy_fence_off_the_path_from_the_stores_to_the_load_is_rejected(sim, dev, rng, where):
    ptx = INIT_THEN_LOAD.format(load=BULK_LOAD, fence_and_barrier=FENCE_BUGS[where])
    with pytest.raises(KaioSimError, match="missing fence.proxy.async: a generic-proxy write") as info:
        run_copy(sim, dev, rng, ptx, "overwrite")
    assert info.value.ptx_line == line_of(ptx, BULK_LOAD)
    assert f"PTX line {line_of(ptx, '// clear the stage')} " in str(info.value)
    assert "by thread 1 " in str(info.value)  # the lowest writer no fence on its path covers


def test_without_any_fence_the_load_is_rejected(sim, dev, rng):
    ptx = INIT_THEN_LOAD.format(load=BULK_LOAD, fence_and_barrier="\tbar.sync 0;")
    with pytest.raises(KaioSimError, match="missing fence.proxy.async"):
        run_copy(sim, dev, rng, ptx, "overwrite")
