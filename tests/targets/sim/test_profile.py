"""profile=True: instruction mix, global sectors per request and shared-memory bank conflicts,
checked against cases computed by hand (32 banks of 4 bytes; see metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.dialects.smem import LayoutAttr
from kaio.targets.sim import Simulator

from .conftest import HEADER, Device, check_ptx


def probe(sim: Simulator, access: str, offsets: np.ndarray, threads: int = 32, setup: str = ""):  # type: ignore[no-untyped-def]
    """Run ``access`` once per thread with %r4 = a shared address (buf + offsets[tid]) and %rd5 a
    global one (out + offsets[tid]); returns the profile report."""
    text = HEADER + f"""
.visible .entry probe(.param .u64 p_off, .param .u64 p_out)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<8>;
	.reg .f32 %f<6>;
	.shared .align 16 .b8 buf[16384];
	mov.u32 %r1, %tid.x;
	ld.param.u64 %rd1, [p_off];
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	ld.global.u32 %r2, [%rd3];
	mov.u32 %r3, buf;
	add.s32 %r4, %r3, %r2;
	ld.param.u64 %rd4, [p_out];
	cvt.u64.u32 %rd6, %r2;
	add.s64 %rd5, %rd4, %rd6;
	mov.f32 %f1, 0f3F800000;
{setup}
	{access}
	ret;
}}
"""
    check_ptx(text)
    dev = Device(sim)
    offs = dev.array(np.asarray(offsets, dtype=np.uint32))
    out = dev.array(np.zeros(16384, np.uint8))
    return dev.launch(sim.load(text), "probe", (1, 1, 1), (threads, 1, 1), offs, out, profile=True)


@pytest.fixture
def lax() -> Simulator:
    return Simulator(check_uninitialized_shared=False)  # metrics do not care what is read


def shared_row(report, access: str):  # type: ignore[no-untyped-def]
    (row,) = [r for r in report.shared_memory if r.access == access]
    return row


lane = np.arange(32)


# --- bank conflicts: ld/st.shared ---------------------------------------------------------------


def test_column_of_a_32_float_wide_array_is_32_way(lax):
    # float tile[32][32]; lane l reads tile[l][5]: word 32 l + 5, bank 5 for every lane
    row = shared_row(probe(lax, "ld.shared.f32 %f2, [%r4];", 4 * (lane * 32 + 5)), "load")
    assert (row.requests, row.phases, row.wavefronts, row.max_ways) == (1, 1, 32, 32)
    assert row.ways == 32.0 and row.bank_conflicts == 31


def test_column_of_a_padded_array_is_conflict_free(lax):
    # float tile[32][33]: word 33 l + 5, bank (l + 5) mod 32: all different
    row = shared_row(probe(lax, "ld.shared.f32 %f2, [%r4];", 4 * (lane * 33 + 5)), "load")
    assert (row.wavefronts, row.max_ways, row.ways, row.bank_conflicts) == (1, 1, 1.0, 0)


def test_same_word_is_a_broadcast_and_two_words_per_bank_is_two_way(lax):
    row = shared_row(probe(lax, "st.shared.f32 [%r4], %f1;", np.full(32, 64)), "store")
    assert row.ways == 1.0
    # lanes 0-15 read words 0-15, lanes 16-31 words 32-47: banks 0-15 hold two words each
    row = shared_row(probe(lax, "ld.shared.f32 %f2, [%r4];", 4 * np.where(lane < 16, lane, lane + 16)), "load")
    assert row.ways == 2.0


def test_64_bit_accesses_are_served_in_two_half_warp_phases(lax):
    # consecutive 8-byte elements: each half-warp reads 128 contiguous bytes: 2 phases, 1-way
    row = shared_row(probe(lax, "ld.shared.v2.f32 {%f2, %f3}, [%r4];", 8 * lane), "load")
    assert (row.phases, row.wavefronts, row.ways) == (2, 2, 1.0)
    # 16-byte stride: in a half-warp, lanes l and l + 8 both use banks 4l..4l+1 mod 32: 2-way
    row = shared_row(probe(lax, "ld.shared.v2.f32 {%f2, %f3}, [%r4];", 16 * lane), "load")
    assert (row.phases, row.wavefronts, row.ways) == (2, 4, 2.0)


def test_128_bit_accesses_are_served_in_four_quarter_warp_phases(lax):
    row = shared_row(probe(lax, "ld.shared.v4.f32 {%f2, %f3, %f4, %f5}, [%r4];", 16 * lane), "load")
    assert (row.phases, row.wavefronts, row.ways) == (4, 4, 1.0)


# --- bank conflicts: ldmatrix on a 16 x 32 f16 tile (64-byte rows) ----------------------------


def ldmatrix_a_offsets(layout: LayoutAttr) -> np.ndarray:
    """Row addresses of ldmatrix.x4 loading the 16 x 16 A fragment at columns 0..15 of a
    16 x 32 f16 tile: lane l gives row l % 16, column 8 (l // 16), placed by ``layout``."""
    return np.array([layout.offset(int(i % 16), int(8 * (i // 16)), 32, 2) for i in lane])


LDMATRIX = "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r5, %r6, %r7, %r8}, [%r4];"


def test_ldmatrix_on_unswizzled_64_byte_rows_is_4_way(lax):
    # matrix 0 = rows 0..7 of chunk 0: row r starts at byte 64 r, i.e. bank 16 r mod 32 = 0 or
    # 16. Even rows all use banks 0-3, odd rows 16-19: four distinct words per bank -> 4-way in
    # each of the 4 phases (matrices 1-3 alike): 16 wavefronts for 4 ideal.
    row = shared_row(probe(lax, LDMATRIX, ldmatrix_a_offsets(LayoutAttr("none"))), "ldmatrix")
    assert (row.requests, row.phases, row.wavefronts, row.max_ways) == (1, 4, 16, 4)
    assert row.ways == 4.0 and row.bank_conflicts == 12


def test_ldmatrix_on_the_xor_swizzled_tile_is_conflict_free(lax):
    # kaio's swizzle: chunk' = chunk ^ ((row // 2) % 8) within each 128-byte line. Rows 0..7 of
    # chunk 0 land on chunks 0, 4, 1, 5, 2, 6, 3, 7 of lines 0..3: eight different bank groups.
    offsets = ldmatrix_a_offsets(LayoutAttr("swizzle"))
    assert sorted((offsets[:8] % 128) // 16) == list(range(8))
    row = shared_row(probe(lax, LDMATRIX, offsets), "ldmatrix")
    assert (row.phases, row.wavefronts, row.ways) == (4, 4, 1.0)


def test_ldmatrix_x1_reads_one_phase_of_eight_rows(lax):
    row = shared_row(probe(lax, "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r5}, [%r4];", 16 * lane), "ldmatrix")
    assert (row.phases, row.wavefronts) == (1, 1)


# --- bank conflicts: cp.async writes -----------------------------------------------------------

CP_ASYNC = "cp.async.cg.shared.global [%r4], [%rd1], 16;\n\tcp.async.wait_all;"


def test_cp_async_16_byte_writes_of_consecutive_chunks_are_conflict_free(lax):
    row = shared_row(probe(lax, CP_ASYNC, 16 * lane), "cp.async write")
    assert (row.phases, row.wavefronts, row.ways) == (4, 4, 1.0)


def test_cp_async_writes_down_a_column_of_64_byte_rows_are_4_way(lax):
    # lane l writes row l of a 64-byte-row tile: in a quarter-warp, rows 0,2,4,6 share banks 0-3
    row = shared_row(probe(lax, CP_ASYNC, 64 * lane), "cp.async write")
    assert (row.phases, row.wavefronts, row.ways) == (4, 16, 4.0)


# --- global memory: sectors per request --------------------------------------------------------


@pytest.mark.parametrize(
    ("offsets", "sectors", "efficiency"),
    [
        (4 * lane, 4, 1.0),  # 128 consecutive bytes: 4 sectors, all used
        (8 * lane, 8, 0.5),  # every other float
        (32 * lane, 32, 0.125),  # one float per sector
        (4 * lane + 4, 5, 0.8),  # shifted by one float: 128 bytes over 5 sectors
        (np.full(32, 12), 1, 0.125),  # one address for the warp: one sector, 4 useful bytes
    ],
)
def test_global_load_sectors_and_efficiency(sim, offsets, sectors, efficiency):
    report = probe(sim, "ld.global.f32 %f2, [%rd5];", offsets)
    row = [r for r in report.global_memory if "%rd5" in r.text][0]
    assert (row.requests, row.sectors, row.sectors_per_request) == (1, sectors, sectors)
    assert row.efficiency == pytest.approx(efficiency)


def test_requests_are_per_warp_and_per_diverged_group(sim):
    # 64 threads = 2 warps; odd lanes store in one branch, even lanes in the other
    access = """and.b32 %r9, %r1, 1;
	setp.eq.u32 %p1, %r9, 0;
	@%p1 bra EVEN;
	st.global.f32 [%rd5], %f1;
	bra.uni DONE;
EVEN:
	st.global.f32 [%rd5], %f1;
DONE:"""
    report = probe(sim, access, 4 * np.arange(64), threads=64)
    stores = [r for r in report.global_memory if r.text.startswith("st.global")]
    assert [(r.requests, r.sectors, r.efficiency) for r in stores] == [(2, 8, 0.5), (2, 8, 0.5)]
    assert report.global_efficiency < 1.0


# --- instruction mix and the printed table ------------------------------------------------------


def test_instruction_classes_and_the_printed_report(lax):
    access = """ex2.approx.f32 %f2, %f1;
	rcp.rn.f32 %f3, %f1;
	cvt.rn.f16.f32 %rs1, %f3;
	add.f16 %rs1, %rs1, %rs1;
	add.f64 %fd1, %fd1, %fd1;
	shfl.sync.bfly.b32 %r9, %r1, 1, 31, -1;
	bar.sync 0;
	ld.shared.f32 %f4, [%r4];"""
    setup = "\t.reg .b16 %rs1;\n\t.reg .f64 %fd1;\n\tmov.f64 %fd1, 0d3FF0000000000000;"
    report = probe(lax, access, np.tile(4 * lane, 2), threads=64, setup=setup)
    c = report.by_category
    assert (c["sfu"], c["fp32"], c["convert"], c["half"], c["fp64"], c["warp"], c["sync"]) == (64, 64, 128, 64, 64, 64, 64)
    assert c["memory"] == 64 * 4  # ld.param x2, ld.global, ld.shared
    assert sum(c.values()) == report.thread_instructions
    assert report.warp_instructions == report.thread_instructions // 32
    assert report.barrier_releases == 1
    text = str(report)
    assert "sfu" in text and "ld.shared.f32 %f4, [%r4];" in text and "ways" in text and "sectors/req" in text

