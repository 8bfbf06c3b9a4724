"""The simulator is at least as strict as Hopper about the async proxy (async_proxy.py): each rule
has a small correct kernel that must pass with the right result, and the same kernel with one
fence, wait or barrier removed (a planted bug) that must be rejected, naming both PTX lines."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.targets.ptx.toolchain import assemble, find_ptxas

from kaio.errors import KaioMemoryError, KaioSimError

from .conftest import PTX_DIR, REFERENCE, rel_error

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"
BULK_LOAD = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
BULK_STORE = "cp.async.bulk.global.shared::cta.bulk_group"
INIT_FENCE = "@%p1 fence.mbarrier_init.release.cluster;"
PROXY_FENCE = "fence.proxy.async.shared::cta;"


def assembled(ptx: str) -> str:
    """The kernel, checked by ptxas for sm_90a when the wheel is installed (planted bugs too:
    they are legal PTX that is wrong on the hardware)."""
    if find_ptxas() is not None:
        assemble(ptx, "sm_90a")
    return ptx


def line_of(ptx: str, text: str) -> int:
    """The PTX line (1-based) of the only line containing ``text``."""
    hits = [i + 1 for i, line in enumerate(ptx.splitlines()) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def without(ptx: str, text: str) -> str:
    assert ptx.count(text) == 1, text
    return ptx.replace(text, "")


# --------------------------------------------------------------------------- bulk loads

# Thread 0 loads 512 bytes with one bulk copy; every thread then reads its 4 bytes (after the
# wait) and writes them out. {read_early} may read the destination before the wait; {refill}
# may issue a second copy into the same bytes after reading them.
BULK_LOAD_KERNEL = HEADER + """
.visible .entry load(.param .u64 p_src, .param .u64 p_out)
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
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
	@%p1 fence.mbarrier_init.release.cluster;
	bar.sync 0;
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 512;
	@%p1 {load} [%r2], [%rd1], 512, [%r3];
{read_early}
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
	@!%p2 bra WAIT;
	ld.shared.u32 %r6, [%r5];
{refill}
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd2, %rd3;
	st.global.u32 [%rd4], %r6;
	ret;
}}
"""

EARLY_READ = "still writing|generic-proxy read|uninitialized shared read"
READ_EARLY = "\tld.shared.u32 %r7, [%r5];  // before the wait"
REFILL = f"""	{{readers_fence}}
	bar.sync 0;
	{{issuer_fence}}
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 512;
	@%p1 {BULK_LOAD} [%r2], [%rd1], 512, [%r3];
WAIT2:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 1;
	@!%p3 bra WAIT2;"""


def bulk_load_kernel(read_early: bool = False, refill: str | None = None, issuer_fence: str = "") -> str:
    """``refill``: the readers' fence (before the barrier) when the buffer is loaded again."""
    return BULK_LOAD_KERNEL.format(
        load=BULK_LOAD,
        read_early=READ_EARLY if read_early else "",
        refill=REFILL.format(readers_fence=refill, issuer_fence=issuer_fence) if refill is not None else "",
    )


def run_bulk_load(sim, dev, rng, ptx: str) -> None:
    src = rng.integers(0, 2**32, 128, dtype=np.uint32)
    out = dev.empty(128, np.uint32)
    sim.load(assembled(ptx)).launch("load", 1, 128, dev.params(dev.array(src), out))
    np.testing.assert_array_equal(dev.read(out), src)


def test_bulk_load_waited_for_is_read_correctly(sim, dev, rng):
    run_bulk_load(sim, dev, rng, bulk_load_kernel())


def test_read_of_a_bulk_load_destination_before_its_wait_is_reported(sim, dev, rng):
    """Read while the copy is in flight; a warp that an adversarial schedule runs ahead reads
    before the copy is issued: bytes nothing stored, or that the copy then overwrites with no
    proxy fence."""
    ptx = bulk_load_kernel(read_early=True)
    with pytest.raises((KaioMemoryError, KaioSimError), match=EARLY_READ) as info:
        run_bulk_load(sim, dev, rng, ptx)
    early, copy = line_of(ptx, "before the wait"), line_of(ptx, BULK_LOAD)
    if "still writing" in str(info.value):
        assert (info.value.ptx_line, info.value.other_ptx_line) == (early, copy)
    elif isinstance(info.value, KaioMemoryError):
        assert info.value.ptx_line == early
    else:
        assert info.value.ptx_line == copy and f"PTX line {early}" in str(info.value)


def test_bulk_copy_on_an_mbarrier_whose_init_is_not_fenced_is_reported(sim, dev, rng):
    ptx = without(bulk_load_kernel(), INIT_FENCE)
    with pytest.raises(KaioSimError, match="fence.mbarrier_init") as info:
        run_bulk_load(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, BULK_LOAD)
    assert f"PTX line {line_of(ptx, 'mbarrier.init')}" in str(info.value)


def test_init_fenced_by_fence_proxy_async_is_accepted(sim, dev, rng):
    """The CUDA programming guide's form: fence.proxy.async.shared::cta after the init."""
    run_bulk_load(sim, dev, rng, bulk_load_kernel().replace(INIT_FENCE, "@%p1 " + PROXY_FENCE))


@pytest.mark.parametrize("readers, issuer", [(PROXY_FENCE, ""), ("", "@%p1 " + PROXY_FENCE)])
def test_refill_after_generic_reads_with_a_fence_passes(sim, dev, rng, readers, issuer):
    """Either side may fence: the readers before the barrier, or the issuing thread after it
    (before it, the other warps may still be reading: the adversarial schedule finds that)."""
    run_bulk_load(sim, dev, rng, bulk_load_kernel(refill=readers, issuer_fence=issuer))


@pytest.mark.parametrize("fence", ["", "fence.proxy.async.global;", "fence.acq_rel.cta;"])
def test_refill_after_generic_reads_without_a_shared_proxy_fence_is_reported(sim, dev, rng, fence):
    ptx = bulk_load_kernel(refill=fence)
    with pytest.raises(KaioSimError, match="missing fence.proxy.async: a generic-proxy read") as info:
        run_bulk_load(sim, dev, rng, ptx)
    refill_line = [i + 1 for i, line in enumerate(ptx.splitlines()) if BULK_LOAD in line][1]
    assert info.value.ptx_line == refill_line
    assert f"PTX line {line_of(ptx, 'ld.shared.u32 %r6')}" in str(info.value)


def test_planted_early_read_never_sees_the_data_by_luck(sim, dev, rng):
    """With the uninitialised-shared check off the early read is still reported: the bytes are
    in flight whatever the check says."""
    sim.check_uninitialized_shared = False
    with pytest.raises((KaioMemoryError, KaioSimError), match="still writing|generic-proxy read"):  # never uninitialized
        run_bulk_load(sim, dev, rng, bulk_load_kernel(read_early=True))


# --------------------------------------------------------------------------- bulk stores

# 128 threads store 4 bytes each into a 512-byte tile, fence, sync; thread 0 stores the tile
# to global with a bulk store. {after} runs between the store's commit and its wait.
BULK_STORE_KERNEL = HEADER + """
.visible .entry store(.param .u64 p_src, .param .u64 p_out)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<8>;
	.shared .align 128 .b8 tile[512];
	ld.param.u64 %rd1, [p_src];
	ld.param.u64 %rd2, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, tile;
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.u32 %r3, [%rd4];
	shl.b32 %r4, %r1, 2;
	add.s32 %r5, %r2, %r4;
	st.shared.u32 [%r5], %r3;
	fence.proxy.async.shared::cta;
	bar.sync 0;
	setp.eq.u32 %p1, %r1, 0;
	@%p1 {store} [%rd2], [%r2], 512;
	@%p1 cp.async.bulk.commit_group;
{after}
	@%p1 cp.async.bulk.wait_group.read 0;
	ret;
}}
"""

OVERWRITE = "\t@%p1 st.shared.u32 [%r2], 0;  // the source, reused too early"


def run_bulk_store(sim, dev, rng, ptx: str) -> None:
    src = rng.integers(0, 2**32, 128, dtype=np.uint32)
    out = dev.empty(128, np.uint32)
    sim.load(assembled(ptx)).launch("store", 1, 128, dev.params(dev.array(src), out))
    np.testing.assert_array_equal(dev.read(out), src)


def test_bulk_store_after_a_fence_writes_the_tile(sim, dev, rng):
    run_bulk_store(sim, dev, rng, BULK_STORE_KERNEL.format(store=BULK_STORE, after=""))


@pytest.mark.parametrize("deleted", ["cp.async.bulk.wait_group.read 0;", "cp.async.bulk.commit_group;"])
def test_a_thread_exiting_before_its_bulk_store_read_shared_memory_is_reported(sim, dev, rng, deleted):
    """The CUDA guide's TMA store ends with commit_group and wait_group.read 0: the CTA's shared
    memory goes with its threads, so a store still reading it at exit reads freed memory (an
    uncommitted store is not waited for at all)."""
    ptx = BULK_STORE_KERNEL.format(store=BULK_STORE, after="")
    assert f"\t@%p1 {deleted}\n" in ptx
    ptx = ptx.replace(f"\t@%p1 {deleted}\n", "")
    with pytest.raises(KaioSimError, match="exits while the TMA store of PTX line .* still reads shared memory") as info:
        run_bulk_store(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, "ret;")


def test_overwrite_of_a_bulk_store_source_before_wait_group_read_is_reported(sim, dev, rng):
    ptx = BULK_STORE_KERNEL.format(store=BULK_STORE, after=OVERWRITE)
    with pytest.raises(KaioMemoryError, match="source of the TMA store") as info:
        run_bulk_store(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, "reused too early")
    assert info.value.other_ptx_line == line_of(ptx, BULK_STORE)


def test_overwrite_after_wait_group_read_is_fine(sim, dev, rng):
    ptx = BULK_STORE_KERNEL.format(store=BULK_STORE, after="")
    ptx = ptx.replace("\tret;", OVERWRITE + "\n\tret;")
    run_bulk_store(sim, dev, rng, ptx)


def test_bulk_store_without_a_proxy_fence_is_reported(sim, dev, rng):
    ptx = without(BULK_STORE_KERNEL.format(store=BULK_STORE, after=""), "\t" + PROXY_FENCE + "\n")
    with pytest.raises(KaioSimError, match="missing fence.proxy.async: a generic-proxy write") as info:
        run_bulk_store(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, BULK_STORE)
    assert f"PTX line {line_of(ptx, 'st.shared.u32 [%r5]')}" in str(info.value)


def test_race_check_sees_a_bulk_store_reading_unsynchronised_writes(sim, dev, rng):
    """Fenced but no barrier: thread 0 stores bytes other threads wrote in the same interval."""
    sim.race_check = True
    ptx = without(BULK_STORE_KERNEL.format(store=BULK_STORE, after=""), "\tbar.sync 0;\n")
    with pytest.raises(KaioMemoryError, match="shared memory race .*TMA store source read"):
        run_bulk_store(sim, dev, rng, ptx)


# --------------------------------------------------------------------------- wgmma operands

# A (64 x 16 f16) and B (8 x 16 f16, K-major) are written to shared memory by st.shared in the
# canonical no-swizzle layout (8 x 16-byte core matrices: LBO 128 between the two k halves,
# SBO 256 between 8-row groups); one m64n8k16 wgmma; each thread stores its 4 accumulators.
WGMMA_KERNEL = HEADER + """
.visible .entry mma(.param .u64 p_image, .param .u64 p_out)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<12>;
	.reg .f32 %f<4>;
	.shared .align 128 .b8 smem[2304];
	ld.param.u64 %rd1, [p_image];
	ld.param.u64 %rd2, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, smem;
	// the 2304-byte shared image (A then B), 16 bytes per thread and a second round for B
	mul.wide.u32 %rd3, %r1, 16;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.v4.u32 {{%r4, %r5, %r6, %r7}}, [%rd4];
	shl.b32 %r3, %r1, 4;
	add.s32 %r8, %r2, %r3;
	st.shared.v4.u32 [%r8], {{%r4, %r5, %r6, %r7}};
	setp.lt.u32 %p1, %r1, 16;
	@%p1 ld.global.v4.u32 {{%r4, %r5, %r6, %r7}}, [%rd4+2048];
	@%p1 st.shared.v4.u32 [%r8+2048], {{%r4, %r5, %r6, %r7}};
	fence.proxy.async.shared::cta;
	bar.sync 0;
	cvt.u64.u32 %rd5, %r2;
	shr.u64 %rd5, %rd5, 4;
	or.b64 %rd6, %rd5, {desc};
	add.s64 %rd7, %rd6, 128;
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{%f0, %f1, %f2, %f3}}, %rd6, %rd7, 0, 1, 1, 0, 0;
	wgmma.commit_group.sync.aligned;
{during}
	wgmma.wait_group.sync.aligned 0;
	mul.wide.u32 %rd8, %r1, 16;
	add.s64 %rd9, %rd2, %rd8;
	st.global.v4.f32 [%rd9], {{%f0, %f1, %f2, %f3}};
	ret;
}}
"""
DESC = (128 >> 4) << 16 | (256 >> 4) << 32  # LBO 128, SBO 256, no swizzle
CLOBBER = "\tst.shared.u32 [%r8], 0;  // an operand, before wait_group"


def core_matrix_image(m: np.ndarray) -> np.ndarray:
    """Rows x 16 f16 in the no-swizzle K-major layout of the descriptor above."""
    rows = m.shape[0]
    image = np.zeros(rows * 16, dtype=np.float16)
    for r in range(rows):
        for k in range(16):
            image[((r // 8) * 256 + (r % 8) * 16 + (k // 8) * 128 + (k % 8) * 2) // 2] = m[r, k]
    return image


def accumulators(per_thread: np.ndarray) -> np.ndarray:
    """The 64 x 8 result from each thread's 4 accumulators (PTX ISA wgmma D fragment)."""
    d = np.full((64, 8), np.nan, dtype=np.float32)
    for thread in range(128):
        w, lane = divmod(thread, 32)
        g, t = divmod(lane, 4)
        for i in range(4):
            d[16 * w + g + 8 * (i // 2), 2 * t + i % 2] = per_thread[thread, i]
    return d


def run_wgmma(sim, dev, rng, ptx: str) -> None:
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((8, 16)).astype(np.float16)  # N x K
    image = np.concatenate([core_matrix_image(a), core_matrix_image(b)])
    out = dev.empty((128, 4), np.float32)
    sim.load(assembled(ptx)).launch("mma", 1, 128, dev.params(dev.array(image), out))
    want = a.astype(np.float64) @ b.astype(np.float64).T
    assert rel_error(accumulators(dev.read(out)), want) <= 1e-6


def wgmma_kernel(during: str = "") -> str:
    return WGMMA_KERNEL.format(desc=DESC, during=during)


def test_wgmma_on_fenced_generic_writes_computes_the_product(sim, dev, rng):
    run_wgmma(sim, dev, rng, wgmma_kernel())


def test_wgmma_without_a_proxy_fence_is_reported(sim, dev, rng):
    ptx = without(wgmma_kernel(), "\t" + PROXY_FENCE + "\n")
    with pytest.raises(KaioSimError, match="missing fence.proxy.async: a generic-proxy write") as info:
        run_wgmma(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, "wgmma.mma_async")
    assert f"PTX line {line_of(ptx, 'st.shared.v4.u32 [%r8], ')}" in str(info.value)


def test_overwrite_of_wgmma_operands_before_wait_group_is_reported(sim, dev, rng):
    ptx = wgmma_kernel(CLOBBER)
    with pytest.raises(KaioMemoryError, match="operands of the wgmma.mma_async") as info:
        run_wgmma(sim, dev, rng, ptx)
    assert info.value.ptx_line == line_of(ptx, "before wait_group")
    assert info.value.other_ptx_line == line_of(ptx, "wgmma.mma_async")


def test_race_check_sees_wgmma_reading_another_warpgroups_unsynchronised_writes(sim, dev, rng):
    """Two warpgroups run the kernel; only the second writes the operands (fenced, but with no
    barrier): the first warpgroup's wgmma races with it. Within one warpgroup the wgmma itself
    orders its threads' fenced writes, so the second warpgroup's does not."""
    sim.race_check = True
    ptx = without(wgmma_kernel(), "\tbar.sync 0;\n")
    ptx = ptx.replace("\tmov.u32 %r1, %tid.x;", "\tmov.u32 %r10, %tid.x;\n\tand.b32 %r1, %r10, 127;\n\tsetp.ge.u32 %p0, %r10, 128;")
    ptx = ptx.replace("\tst.shared.v4.u32 [%r8], ", "\t@%p0 st.shared.v4.u32 [%r8], ")
    ptx = ptx.replace("setp.lt.u32 %p1, %r1, 16;", "setp.lt.and.u32 %p1, %r1, 16, %p0;")
    ptx = ptx.replace("mul.wide.u32 %rd8, %r1, 16;", "mul.wide.u32 %rd8, %r10, 16;")
    image = np.zeros(1152, dtype=np.float16)
    out = dev.empty((256, 4), np.float32)
    module = sim.load(assembled(ptx))
    with pytest.raises(KaioMemoryError, match="shared memory race .*wgmma.mma_async A operand read") as info:
        module.launch("mma", 1, 256, dev.params(dev.array(image), out))
    assert info.value.other_ptx_line == line_of(ptx, "@%p0 st.shared.v4.u32 [%r8]")


# --------------------------------------------------------------------------- PTX others wrote

TRITON_FENCE = "\tfence.proxy.async.shared::cta;\n"


def run_triton(sim, dev, rng, text: str) -> None:
    kernel, block, shared = REFERENCE.launch_info(text)
    module = sim.load(text)
    m, n, k = 64, 64, 64
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev.empty((m, n), np.float32)
    params = dev.params(dev.array(a), dev.array(b), c, *(np.int32(v) for v in (m, n, k, k, n, n)))
    params += [b"\0" * nbytes for _, _, nbytes in module.entries[kernel].params[len(params) :]]
    module.launch(kernel, (1, 1, 1), (block, 1, 1), params, shared_bytes=shared)
    assert rel_error(dev.read(c), a.astype(np.float64) @ b.astype(np.float64)) <= 1e-5


def test_triton_sm90a_matmul_passes_every_rule(sim, dev, rng):
    run_triton(sim, dev, rng, (PTX_DIR / "triton_matmul_sm90a.ptx").read_text())


def test_triton_sm90a_matmul_without_its_proxy_fence_is_rejected(sim, dev, rng):
    """The audit's experiment: deleting the fence.proxy.async from an sm_90a matmul used to pass
    with correct results. cp.async writes through the generic proxy; wgmma reads through the
    async one."""
    text = (PTX_DIR / "triton_matmul_sm90a.ptx").read_text()
    assert TRITON_FENCE in text
    with pytest.raises(KaioSimError, match="missing fence.proxy.async"):
        run_triton(sim, dev, rng, text.replace(TRITON_FENCE, ""))
