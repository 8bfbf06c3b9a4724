"""Hopper on the simulator: hand-written sm_90a PTX (TMA loads into swizzled shared memory,
mbarrier waits, wgmma from descriptors) against numpy, with the layouts the tests expect written
here from the PTX ISA's tables as plain loops, independently of the simulator's vectorized ones.
Every kernel is also assembled by the wheel's ptxas for sm_90a, without spills."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kaio.targets.ptx.toolchain import assemble, find_ptxas
from kaio.targets.sim.tensor_map import TensorMap, encode_tensor_map, swizzle

from kaio.errors import KaioMemoryError, KaioSimError

from .conftest import PTX_DIR, REFERENCE, Buffer, rel_error

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
SPAN_CODE = {0: 0, 32: 1, 64: 2, 128: 3}  # tensor map swizzle codes
DESC_CODE = {0: 0, 128: 1, 64: 2, 32: 3}  # wgmma descriptor bits 62-63


def check_sm90a(ptx: str, name: str) -> int:
    """ptxas -arch=sm_90a: no spills; returns the register count (0 without the wheel)."""
    if find_ptxas() is None:
        return 0
    report = assemble(ptx, "sm_90a")
    assert report.spill_stores.get(name, 0) == 0 and report.spill_loads.get(name, 0) == 0
    return report.registers[name]


def tensor_map(dev, array: np.ndarray, box: tuple[int, int], span: int, base: Buffer | None = None) -> Buffer:
    """A device copy of ``array`` (2-D, row-major) and its kaio tensor map in global memory."""
    buf = base or dev.array(array)
    rows, cols = array.shape
    blob = encode_tensor_map(buf.address, array.itemsize, (cols, rows), (array.strides[0],), box, SPAN_CODE[span])
    return dev.array(np.frombuffer(blob, dtype=np.uint8).copy())


# --------------------------------------------------------------------------- the swizzle itself


@pytest.mark.parametrize("span", [32, 64, 128])
def test_swizzle_is_the_isa_pattern(span):
    """16-byte chunk j of row r (rows of ``span`` bytes, 1024-byte aligned) lands at chunk
    j ^ (r / (128 / span)) % (span / 16), the TMA/wgmma swizzle of the CUDA guide's tables."""
    chunks = span // 16
    for r in range(16):
        for j in range(chunks):
            where = int(swizzle(np.array([r * span + 16 * j]), span)[0])
            want = r * span + 16 * (j ^ ((r // (128 // span)) % chunks))
            assert where == want


# --------------------------------------------------------------------------- wgmma fed by TMA


def _desc(span: int, lbo: int, sbo: int) -> int:
    """The constant bits of a wgmma matrix descriptor (the start address is or-ed in)."""
    return ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (DESC_CODE[span] << 62)


def operand_plan(rows: int, k_total: int, span: int, mn_major: bool = False):
    """How the TMA boxes of one operand are placed and how wgmma reads it: (boxes as (x, y,
    shared offset), box, descriptor bits, byte step per k16, tensor-map shape note).

    K-major (rows x k_total, K contiguous): swizzled rows of ``span`` bytes hold all of K
    (SBO: 8 rows); without swizzle, 8-element columns are separate boxes (LBO apart) of
    rows x 16 bytes (core matrices 128 bytes apart: SBO). MN-major (k_total x rows, rows
    contiguous, 128B swizzle): boxes 64 wide, K tall, LBO apart; 8 k-rows 1024 bytes apart."""
    if mn_major:
        assert span == 128
        box = (64, k_total)
        size = 128 * k_total
        boxes = [(64 * j, 0, size * j) for j in range(rows // 64)]
        return boxes, box, _desc(span, size, 1024), 16 * 128
    if span:
        box = (span // 2, rows)
        return [(0, 0, 0)], box, _desc(span, 16, 8 * span), 32
    box = (8, rows)
    return [(0, 0, 0), (8, 0, rows * 16)], box, _desc(0, rows * 16, 128), 0


WGMMA_KERNEL = HEADER + """
.visible .entry wg(.param .u64 p_ta, .param .u64 p_tb, .param .u64 p_out)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<16>;
	.reg .f32 %f<{acc}>;
	.reg .b32 %ra<4>;
	.shared .align 1024 .b8 smem[{smem}];
	.shared .align 8 .b64 bar;
	ld.param.u64 %rd1, [p_ta];
	ld.param.u64 %rd2, [p_tb];
	ld.param.u64 %rd3, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, smem;
	add.s32 %r3, %r2, {b_offset};
	mov.u32 %r4, bar;
	setp.eq.u32 %p1, %r1, 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r4], 1;
	@%p1 fence.mbarrier_init.release.cluster;  // the inits, visible to bulk copies
	bar.sync 0;
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r4], {tx};
{loads}
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r4], 0;
	@!%p2 bra WAIT;
{init}
	cvt.u64.u32 %rd4, %r2;
	shr.u64 %rd4, %rd4, 4;
	and.b64 %rd4, %rd4, 16383;
	or.b64 %rd4, %rd4, {desc_a};
	cvt.u64.u32 %rd5, %r3;
	shr.u64 %rd5, %rd5, 4;
	and.b64 %rd5, %rd5, 16383;
	or.b64 %rd5, %rd5, {desc_b};
	wgmma.fence.sync.aligned;
{mmas}
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	mul.wide.u32 %rd6, %r1, {row_bytes};
	add.s64 %rd7, %rd3, %rd6;
{stores}
	ret;
}}
"""


# A from registers: thread (warp w, lane 4g + t) loads its m16n8k16-style A fragment of the
# row-major 64 x 16 A straight from global memory: register j holds row 16w + g + 8 (j % 2),
# columns 2t + 8 (j / 2) and the next (PTX ISA, wgmma "Register Fragments" for A).
A_REGISTERS = """
	shr.u32 %r5, %r1, 2;               // 4w + g ...
	and.b32 %r6, %r1, 3;               // t
	and.b32 %r7, %r5, 7;               // g
	shr.u32 %r5, %r1, 5;               // w
	mad.lo.s32 %r5, %r5, 16, %r7;      // row 16w + g
	mad.lo.s32 %r5, %r5, 8, %r6;       // (row * 16 + 2t) / 2: in f16 pairs
	mul.wide.u32 %rd10, %r5, 4;
	add.s64 %rd10, %rd1, %rd10;
	ld.global.b32 %ra0, [%rd10];
	ld.global.b32 %ra1, [%rd10+256];
	ld.global.b32 %ra2, [%rd10+16];
	ld.global.b32 %ra3, [%rd10+272];"""


def wgmma_kernel(n: int, span: int, k_total: int, trans_b: bool, a_in_registers: bool = False, elem: str = "f16") -> tuple[str, list, list]:
    a_boxes, a_box, desc_a, a_step = operand_plan(64, k_total, span)
    b_boxes, b_box, desc_b, b_step = operand_plan(n, k_total, span, trans_b)
    b_offset = 64 * k_total * 2
    loads = [f"\t@%p1 {TMA_LOAD} [%r2+{off}], [%rd1, {{{x}, {y}}}], [%r4];" for x, y, off in a_boxes]
    if a_in_registers:
        assert k_total == 16
        loads = [A_REGISTERS]
    loads += [f"\t@%p1 {TMA_LOAD} [%r3+{off}], [%rd2, {{{x}, {y}}}], [%r4];" for x, y, off in b_boxes]
    acc = "{" + ", ".join(f"%f{i}" for i in range(n // 2)) + "}"
    mmas = []
    for ks in range(k_total // 16):
        da, db = ("%rd4", "%rd5") if ks == 0 else ("%rd8", "%rd9")
        if ks:
            mmas += [f"\tadd.s64 %rd8, %rd4, {ks * a_step >> 4};", f"\tadd.s64 %rd9, %rd5, {ks * b_step >> 4};"]
        # scale-d false on the first step: the NaN the accumulators start with must not leak
        mmas.append(f"\tsetp.ne.u32 %p3, {ks}, 0;")
        a_operand, trans = ("{%ra0, %ra1, %ra2, %ra3}", "") if a_in_registers else (da, "0, ")
        mmas.append(f"\twgmma.mma_async.sync.aligned.m64n{n}k16.f32.{elem}.{elem} {acc}, {a_operand}, {db}, %p3, 1, 1, {trans}{int(trans_b)};")
    stores = [
        f"\tst.global.v4.f32 [%rd7+{16 * j}], {{%f{4 * j}, %f{4 * j + 1}, %f{4 * j + 2}, %f{4 * j + 3}}};"
        for j in range(n // 8)
    ]
    text = WGMMA_KERNEL.format(
        acc=n // 2,
        smem=b_offset + n * k_total * 2,
        b_offset=b_offset,
        tx=((0 if a_in_registers else 64) + n) * k_total * 2,
        loads="\n".join(loads),
        init="\n".join(f"\tmov.f32 %f{i}, 0f7FC00000;" for i in range(n // 2)),
        desc_a=desc_a,
        desc_b=desc_b,
        mmas="\n".join(mmas),
        row_bytes=n * 2,
        stores="\n".join(stores),
    )
    return text, a_box, b_box


def accumulator_matrix(per_thread: np.ndarray, n: int) -> np.ndarray:
    """The 64 x n matrix from each thread's n/2 accumulator registers (PTX ISA, wgmma D
    fragment: warp w, lane = 4g + t, register i -> row 16w + g + 8((i%4)/2), col 8(i/4) + 2t + i%2)."""
    d = np.full((64, n), np.nan, dtype=np.float32)
    for thread in range(128):
        w, lane = divmod(thread, 32)
        g, t = divmod(lane, 4)
        for i in range(n // 2):
            d[16 * w + g + 8 * ((i % 4) // 2), 8 * (i // 4) + 2 * t + i % 2] = per_thread[thread, i]
    return d


@pytest.mark.parametrize(
    "span, n, trans_b, elem",
    [(s, n, False, "f16") for s in (0, 32, 64, 128) for n in (64, 128, 256)]
    + [(128, 128, True, "f16"), (64, 128, False, "bf16"), (128, 64, True, "bf16")],
)
def test_wgmma_fed_by_tma(sim, dev, rng, span, n, trans_b, elem):
    k_total = max(span // 2, 16)
    text, a_box, b_box = wgmma_kernel(n, span, k_total, trans_b, elem=elem)
    check_sm90a(text, "wg")
    dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}[elem]
    a = rng.standard_normal((64, k_total)).astype(dtype)
    b = rng.standard_normal((k_total, n)).astype(dtype)
    ta = tensor_map(dev, a, a_box, span)
    tb = tensor_map(dev, b if trans_b else np.ascontiguousarray(b.T), b_box, span)
    out = dev.empty((128, n // 2), np.float32)
    sim.load(text).launch("wg", 1, 128, dev.params(ta, tb, out))
    got = accumulator_matrix(dev.read(out), n)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [64, 256])
def test_wgmma_with_a_from_registers(sim, dev, rng, n):
    text, _, b_box = wgmma_kernel(n, 32, 16, False, a_in_registers=True)
    check_sm90a(text, "wg")
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((16, n)).astype(np.float16)
    out = dev.empty((128, n // 2), np.float32)
    tb = tensor_map(dev, np.ascontiguousarray(b.T), b_box, 32)
    sim.load(text).launch("wg", 1, 128, dev.params(dev.array(a), tb, out))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(accumulator_matrix(dev.read(out), n), want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- mbarrier phases

MBARRIER_KERNEL = HEADER + """
.visible .entry phases(.param .u64 p_src, .param .u64 p_out, .param .u64 p_flags)
{
	.reg .pred %p<8>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<12>;
	.shared .align 128 .b8 buf[512];
	.shared .align 8 .b64 bar;
	ld.param.u64 %rd1, [p_src];
	ld.param.u64 %rd2, [p_out];
	ld.param.u64 %rd3, [p_flags];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, buf;
	mov.u32 %r3, bar;
	setp.eq.u32 %p1, %r1, 0;
	setp.eq.u32 %p2, %r1, 32;
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 2;
	@%p1 fence.mbarrier_init.release.cluster;  // the inits, visible to bulk copies
	bar.sync 0;
	// phase 0: thread 0 expects 256 bytes and copies them; thread 32 arrives too
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r3], 256;
	@%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1], 256, [%r3];
	@%p2 mbarrier.arrive.shared::cta.b64 %rd4, [%r3];
WAIT0:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 0;
	@!%p3 bra WAIT0;
	mbarrier.test_wait.parity.shared::cta.b64 %p4, [%r3], 1;   // phase 1 not complete yet
	// phase 1: the copy lands before the expect_tx (the count dips below zero, legally)
	add.s64 %rd5, %rd1, 256;
	add.s32 %r4, %r2, 256;
	@%p2 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd5], 256, [%r3];
	@%p2 mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r3], 256;
	mbarrier.test_wait.parity.shared::cta.b64 %p5, [%r3], 1;   // one arrival still missing
	@%p1 mbarrier.arrive.shared::cta.b64 %rd4, [%r3];
WAIT1:
	mbarrier.try_wait.parity.shared::cta.b64 %p6, [%r3], 1;
	@!%p6 bra WAIT1;
	mbarrier.test_wait.parity.shared::cta.b64 %p7, [%r3], 0;   // parity 0 now names phase 2: open
	// out[tid] = buf[tid] (u32 words), flags[tid] = p4 | p5 << 1 | p7 << 2 | token << 3
	mul.lo.u32 %r5, %r1, 4;
	add.s32 %r6, %r2, %r5;
	ld.shared.u32 %r7, [%r6];
	mul.wide.u32 %rd6, %r1, 4;
	add.s64 %rd7, %rd2, %rd6;
	st.global.u32 [%rd7], %r7;
	selp.u32 %r8, 1, 0, %p4;
	selp.u32 %r9, 2, 0, %p5;
	or.b32 %r8, %r8, %r9;
	selp.u32 %r9, 4, 0, %p7;
	or.b32 %r8, %r8, %r9;
	cvt.u32.u64 %r10, %rd4;
	shl.b32 %r10, %r10, 3;
	or.b32 %r8, %r8, %r10;
	add.s64 %rd8, %rd3, %rd6;
	st.global.u32 [%rd8], %r8;
	ret;
}
"""


def test_mbarrier_two_phases_with_bulk_copies(sim, dev, rng):
    check_sm90a(MBARRIER_KERNEL, "phases")
    src = rng.integers(0, 2**32, 128, dtype=np.uint32)
    out = dev.empty(128, np.uint32)
    flags = dev.empty(128, np.uint32)
    sim.load(MBARRIER_KERNEL).launch("phases", 1, 128, dev.params(dev.array(src), out, flags))
    np.testing.assert_array_equal(dev.read(out), src)
    got = dev.read(flags)
    # no thread saw phase 1 complete early; parity 0 reads "not complete" once phase 2 opens;
    # tokens: threads 0 and 32 last arrived in phase 1, the others never arrived (token 0)
    tokens = np.zeros(128, dtype=np.uint32)
    tokens[[0, 32]] = 1
    np.testing.assert_array_equal(got, tokens << 3)


@pytest.mark.parametrize(
    "body, message",
    [
        (  # the phase waits for 16 bytes that never come: the next arrival is one too many
            "@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 16;\n\tmbarrier.arrive.shared::cta.b64 _, [%r3];",
            "beyond its expected count",
        ),
        ("mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r4], 0;", "not initialized"),
        (  # one arrival (thread 0's) of the two the phase needs: every thread spins for ever,
            # reported as a deadlock long before the step limit
            "@%p1 mbarrier.init.shared::cta.b64 [%r4], 2;\n\tbar.sync 0;\n"
            "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r4];\nSPIN:\n"
            "\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r4], 0;\n\t@!%p2 bra SPIN;",
            "deadlock: for 20000 steps every thread that can run has only polled mbarrier phases",
        ),
    ],
)
def test_mbarrier_misuse_is_reported(sim, body, message):
    text = HEADER + f"""
.visible .entry bad()
{{
	.reg .pred %p<3>;
	.reg .b32 %r<6>;
	.shared .align 8 .b64 bars[2];
	mov.u32 %r3, bars;
	add.s32 %r4, %r3, 8;
	mov.u32 %r1, %tid.x;
	setp.eq.u32 %p1, %r1, 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
	@%p1 fence.mbarrier_init.release.cluster;  // the inits, visible to bulk copies
	bar.sync 0;
	{body}
	ret;
}}
"""
    check_sm90a(text, "bad")
    with pytest.raises(KaioSimError, match=message):
        sim.load(text).launch("bad", 1, 64)


INIT_THEN_WAIT = HEADER + """
.visible .entry init_wait()
{{
	.reg .pred %p<3>;
	.reg .b32 %r<6>;
	.shared .align 8 .b64 bars[1];
	mov.u32 %r3, bars;
	mov.u32 %r1, %tid.x;
	setp.eq.u32 %p1, %r1, 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
{between}
	@%p1 mbarrier.arrive.shared::cta.b64 _, [%r3];
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
	@!%p2 bra WAIT;
	ret;
}}
"""


@pytest.mark.parametrize("seed", [None, 0])
def test_an_mbarrier_used_by_other_threads_before_a_barrier_orders_its_init_is_a_race(seed):
    """Thread 0 initialises the barrier, every thread waits on it: without a bar.sync between,
    the other threads may poll it before the init (the race check sees the init as a write of
    its 8 bytes and every other mbarrier operation as an atomic access of them)."""
    from kaio.targets.sim.simulator import Simulator

    sim = Simulator(race_check=True, schedule_seed=seed)
    check_sm90a(INIT_THEN_WAIT.format(between="\tbar.sync 0;"), "init_wait")
    sim.load(INIT_THEN_WAIT.format(between="\tbar.sync 0;")).launch("init_wait", 1, 64)
    with pytest.raises(KaioMemoryError, match="race") as info:
        sim.load(INIT_THEN_WAIT.format(between="")).launch("init_wait", 1, 64)
    assert "mbarrier" in str(info.value)


# A warp-specialised ring: warp 0 produces (bulk copies into 2 stages, waiting for "empty"),
# warp 1 consumes (waits for "full", copies out, arrives on "empty"). The producer's wait loop
# sits at lower PCs than the consumer: the simulator must back off a failed poll to let the
# consumer run. "empty" waits start at parity 1, which a fresh barrier passes (round 0).
WARP_SPECIALISED = HEADER + """
.visible .entry ws(.param .u64 p_src, .param .u64 p_out)
{
	.reg .pred %p<6>;
	.reg .b32 %r<20>;
	.reg .b64 %rd<8>;
	.shared .align 128 .b8 ring[512];
	.shared .align 8 .b64 full[2];
	.shared .align 8 .b64 empty[2];
	ld.param.u64 %rd1, [p_src];
	ld.param.u64 %rd2, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, ring;
	mov.u32 %r3, full;
	mov.u32 %r4, empty;
	setp.eq.u32 %p1, %r1, 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
	@%p1 mbarrier.init.shared::cta.b64 [%r3+8], 1;
	@%p1 mbarrier.init.shared::cta.b64 [%r4], 32;
	@%p1 mbarrier.init.shared::cta.b64 [%r4+8], 32;
	@%p1 fence.mbarrier_init.release.cluster;  // the inits, visible to bulk copies
	bar.sync 0;
	setp.ge.u32 %p2, %r1, 32;
	@%p2 bra CONSUMER;
	mov.u32 %r5, 0;
PLOOP:
	and.b32 %r6, %r5, 1;
	shr.u32 %r7, %r5, 1;
	and.b32 %r8, %r7, 1;
	xor.b32 %r8, %r8, 1;
	mad.lo.s32 %r9, %r6, 8, %r4;
PWAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r9], %r8;
	@!%p3 bra PWAIT;
	mad.lo.s32 %r10, %r6, 8, %r3;
	mad.lo.s32 %r11, %r6, 256, %r2;
	mul.wide.u32 %rd3, %r5, 256;
	add.s64 %rd4, %rd1, %rd3;
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 256;
	@%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r11], [%rd4], 256, [%r10];
	add.s32 %r5, %r5, 1;
	setp.lt.u32 %p4, %r5, 4;
	@%p4 bra PLOOP;
	bra DONE;
CONSUMER:
	sub.u32 %r12, %r1, 32;
	mov.u32 %r5, 0;
CLOOP:
	and.b32 %r6, %r5, 1;
	shr.u32 %r7, %r5, 1;
	and.b32 %r8, %r7, 1;
	mad.lo.s32 %r10, %r6, 8, %r3;
CWAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r10], %r8;
	@!%p3 bra CWAIT;
	mad.lo.s32 %r11, %r6, 256, %r2;
	mad.lo.s32 %r13, %r12, 8, %r11;
	ld.shared.v2.u32 {%r14, %r15}, [%r13];
	mad.lo.s32 %r16, %r5, 32, %r12;
	mul.wide.u32 %rd5, %r16, 8;
	add.s64 %rd6, %rd2, %rd5;
	st.global.v2.u32 [%rd6], {%r14, %r15};
	fence.proxy.async.shared::cta;  // the generic reads, before the stage's bulk refill
	mad.lo.s32 %r9, %r6, 8, %r4;
	mbarrier.arrive.shared::cta.b64 _, [%r9];
	add.s32 %r5, %r5, 1;
	setp.lt.u32 %p4, %r5, 4;
	@%p4 bra CLOOP;
DONE:
	ret;
}
"""


@pytest.mark.parametrize("chunks", [4, 16])
def test_warp_specialised_ring_with_a_producer_at_lower_pcs(sim, dev, rng, chunks):
    """16 chunks: the producer and the consumer both end up polling; the consumer, whose wait
    would now succeed, failed first and must run before the producer polls again."""
    text = WARP_SPECIALISED.replace("setp.lt.u32 %p4, %r5, 4;", f"setp.lt.u32 %p4, %r5, {chunks};")
    check_sm90a(text, "ws")
    src = rng.integers(0, 2**32, 64 * chunks, dtype=np.uint32)  # 256-byte chunks through two stages
    out = dev.empty(64 * chunks, np.uint32)
    sim.load(text).launch("ws", 2, 64, dev.params(dev.array(src), out))
    np.testing.assert_array_equal(dev.read(out), src)


# --------------------------------------------------------------------------- TMA ragged edges

TMA_EDGES = HEADER + """
.visible .entry edges(.param .u64 p_map, .param .u64 p_out, .param .u64 p_omap, .param .s32 p_x, .param .s32 p_y)
{
	.reg .pred %p<3>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<8>;
	.shared .align 128 .b8 box[1024];
	.shared .align 8 .b64 bar;
	ld.param.u64 %rd1, [p_map];
	ld.param.u64 %rd2, [p_out];
	ld.param.u64 %rd3, [p_omap];
	ld.param.s32 %r8, [p_x];
	ld.param.s32 %r9, [p_y];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, box;
	mov.u32 %r3, bar;
	setp.eq.u32 %p1, %r1, 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
	@%p1 fence.mbarrier_init.release.cluster;  // the inits, visible to bulk copies
	bar.sync 0;
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 1024;
	@%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r8, %r9}], [%r3];
WAIT:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
	@!%p2 bra WAIT;
	// the box as it landed (16 x 16 f32, 4 per thread) to out
	mul.lo.u32 %r4, %r1, 16;
	add.s32 %r5, %r2, %r4;
	ld.shared.v4.u32 {%r6, %r7, %r10, %r11}, [%r5];
	mul.wide.u32 %rd4, %r1, 16;
	add.s64 %rd5, %rd2, %rd4;
	st.global.v4.u32 [%rd5], {%r6, %r7, %r10, %r11};
	// and back into the tensor of the second map at the same place (outside: not written)
	fence.proxy.async.shared::cta;
	bar.sync 0;
	@%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd3, {%r8, %r9}], [%r2];
	@%p1 cp.async.bulk.commit_group;
	@%p1 cp.async.bulk.wait_group.read 0;
	ret;
}
"""


# the load's map as a 128-byte kernel parameter (a __grid_constant__ CUtensorMap on a GPU)
TMA_EDGES_PARAM_MAP = TMA_EDGES.replace(".param .u64 p_map,", ".param .align 64 .b8 p_map[128],").replace(
    "ld.param.u64 %rd1, [p_map];", "mov.b64 %rd1, p_map;"
)


@pytest.mark.parametrize("x, y, map_param", [(32, 40, False), (-5, -3, False), (4, 4, False), (30, 44, True)])
def test_tma_ragged_edges_fill_zero_and_stores_clip(sim, dev, rng, x, y, map_param):
    text = TMA_EDGES_PARAM_MAP if map_param else TMA_EDGES
    check_sm90a(text, "edges")
    rows, cols, pitch = 50, 37, 40  # rows of 37 f32 padded to 160 bytes (strides: multiples of 16)
    padded = rng.standard_normal((rows, pitch)).astype(np.float32)
    tensor = dev.array(padded)
    blob = encode_tensor_map(tensor.address, 4, (cols, rows), (pitch * 4,), (16, 16))
    target = dev.array(np.full((rows, pitch), -1.0, dtype=np.float32))
    oblob = encode_tensor_map(target.address, 4, (cols, rows), (pitch * 4,), (16, 16))
    out = dev.empty((16, 16), np.float32)
    maps = [dev.array(np.frombuffer(b, dtype=np.uint8).copy()) for b in (blob, oblob)]
    params = dev.params(maps[0], out, maps[1], np.int32(x), np.int32(y))
    if map_param:
        params[0] = blob
    sim.load(text).launch("edges", 1, 64, params)
    want = np.zeros((16, 16), dtype=np.float32)
    stored = np.full((rows, pitch), -1.0, dtype=np.float32)
    for r in range(16):
        for c in range(16):
            gy, gx = y + r, x + c
            if 0 <= gy < rows and 0 <= gx < cols:
                want[r, c] = padded[gy, gx]
                stored[gy, gx] = padded[gy, gx]
    np.testing.assert_array_equal(dev.read(out), want)
    np.testing.assert_array_equal(dev.read(target), stored)


def test_tensor_map_round_trips_and_rejects_bad_maps():
    tm = TensorMap(0x7000_0000_0000, 2, (64, 32), (128,), (64, 16), 3)
    assert TensorMap.decode(tm.encode()) == tm
    with pytest.raises(ValueError, match="swizzle span"):
        encode_tensor_map(0x7000_0000_0000, 2, (128, 32), (256,), (128, 16), 3)  # 256-byte rows
    with pytest.raises(ValueError, match="not a kaio tensor map"):
        TensorMap.decode(bytes(128))


# --------------------------------------------------------------------------- asynchronous wgmma


def test_wgmma_misuse_is_reported(sim, dev, rng):
    """Reading an in-flight accumulator, a B operand nothing loaded, a partial warpgroup."""
    text, a_box, b_box = wgmma_kernel(64, 128, 64, False)
    early = text.replace("\twgmma.commit_group.sync.aligned;\n", "\twgmma.commit_group.sync.aligned;\n\tadd.f32 %f1, %f1, %f0;\n")
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    args = dev.params(tensor_map(dev, a, a_box, 128), tensor_map(dev, np.ascontiguousarray(b.T), b_box, 128), dev.empty((128, 32), np.float32))
    with pytest.raises(KaioSimError, match=r"register %f[01] is the accumulator of a wgmma.mma_async still in flight"):
        sim.load(early).launch("wg", 1, 128, args)
    no_b = "\n".join(line for line in text.splitlines() if "[%rd2, {" not in line).replace("_, [%r4], 16384;", "_, [%r4], 8192;")
    with pytest.raises(KaioMemoryError, match="the B operand reads shared memory nothing stored"):
        sim.load(no_b).launch("wg", 1, 128, args)
    partial = text.replace("mov.u32 %r1, %tid.x;", "mov.u32 %r1, %tid.x;\n\tsetp.lt.u32 %p0, %r1, 96;")
    partial = partial.replace("\twgmma.mma_async", "\t@%p0 wgmma.mma_async")
    with pytest.raises(KaioSimError, match="warpgroup"):
        sim.load(partial).launch("wg", 1, 128, args)


# --------------------------------------------------------------------------- elect.sync, setmaxnreg

ELECT = HEADER + """
.visible .entry elect(.param .u64 p_out)
{
	.reg .pred %p<4>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	setmaxnreg.inc.sync.aligned.u32 240;
	ld.param.u64 %rd1, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r5, 0;
	elect.sync %r2|%p1, -1;
	and.b32 %r3, %r1, 31;
	setp.ge.u32 %p2, %r3, 12;
	@!%p2 bra SKIP;
	elect.sync %r4|%p3, 0xFFFFF000;          // lanes 12..31 only
	selp.u32 %r5, 2, 0, %p3;
	shl.b32 %r4, %r4, 8;
	or.b32 %r5, %r5, %r4;
SKIP:
	selp.u32 %r6, 1, 0, %p1;
	shl.b32 %r2, %r2, 16;
	or.b32 %r6, %r6, %r2;
	or.b32 %r6, %r6, %r5;
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r6;
	ret;
}
"""


def test_elect_sync_picks_the_lowest_lane_of_the_mask(sim, dev):
    check_sm90a(ELECT, "elect")
    out = dev.empty(64, np.uint32)
    sim.load(ELECT).launch("elect", 1, 64, dev.params(out))
    lane = np.arange(64) % 32
    partial = np.where(lane >= 12, (12 << 8) | np.where(lane == 12, 2, 0), 0)
    np.testing.assert_array_equal(dev.read(out), (lane == 0).astype(np.uint32) | partial)


# --------------------------------------------------------------------------- PTX kaio did not write


@pytest.mark.parametrize("shape", [(64, 64, 32), (100, 72, 80)])
def test_triton_sm90a_tutorial_matmul(sim, dev, rng, shape):
    """Triton 3.x's tutorial matmul for sm_90a (cp.async pipeline, wgmma from 128B-swizzled
    descriptors with an N-major B, wait_group 1 across iterations; generated by
    benchmarks/reference_ptx.py), on ragged shapes."""
    text = (PTX_DIR / "triton_matmul_sm90a.ptx").read_text()
    check_sm90a(text, "matmul_kernel")
    kernel, block, shared = REFERENCE.launch_info(text)
    module = sim.load(text)
    m, n, k = shape
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev.empty((m, n), np.float32)
    cfg = REFERENCE.TRITON_MATMUL_SM90A
    grid = (-(-m // cfg["BLOCK_SIZE_M"]) * -(-n // cfg["BLOCK_SIZE_N"]), 1, 1)
    params = dev.params(dev.array(a), dev.array(b), c, *(np.int32(v) for v in (m, n, k, k, n, n)))
    params += [b"\0" * nbytes for _, _, nbytes in module.entries[kernel].params[len(params) :]]  # scratch pointers
    report = module.launch(kernel, grid, (block, 1, 1), params, shared_bytes=shared, profile=True)
    assert rel_error(dev.read(c), a.astype(np.float64) @ b.astype(np.float64)) <= 1e-5
    assert any(name.startswith("wgmma.m64n64k16") for name in report.by_class)
