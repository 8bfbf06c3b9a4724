"""The SASS analysis (kaio.targets.ptx.sass): parsing cuobjdump text, classes, loops per trip."""

import pytest
from kaio.targets.ptx import sass

import kaio
from kaio.prelude import Array, MutArray, f32, thread_idx_x, u32

# Two functions as cuobjdump prints them (encodings trimmed to one line each): ``outer`` has a
# loop at 0x40..0x100 with an inner loop at 0x60..0xc0; ``flat`` has none.
SNIPPET = """
	code for sm_80
		Function : outer
	.headerflags	@"EF_CUDA_SM80"
        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;   /* 0x00000a00ff017624 */
        /*0010*/                   S2R R0, SR_TID.X ;                        /* 0x0000000000007919 */
        /*0020*/                   ULDC.64 UR4, c[0x0][0x118] ;              /* 0x0000460000047ab9 */
        /*0030*/                   ISETP.GE.AND P0, PT, R0, c[0x0][0x170], PT ; /* 0x00005c0000007a0c */
        /*0040*/                   LDGSTS.E.BYPASS.128 [R2], [R4.64] ;       /* 0x0000000004027fae */
        /*0050*/                   LDGDEPBAR ;                               /* 0x00000000000079af */
        /*0060*/                   LDSM.16.M88.4 R8, [R3] ;                  /* 0x000000000308783b */
        /*0070*/                   HMMA.16816.F32 R12, R8, R10, R12 ;        /* 0x0000000a080c723c */
        /*0080*/                   IADD3 R3, R3, 0x20, RZ ;                  /* 0x0000002003037810 */
        /*0090*/                   UIADD3 UR4, UR4, 0x1, URZ ;               /* 0x0000000104047890 */
        /*00a0*/                   ISETP.NE.AND P1, PT, R3, R5, PT ;         /* 0x000000050300720c */
        /*00b0*/                   MUFU.EX2 R6, R6 ;                         /* 0x0000000006067308 */
        /*00c0*/              @P1 BRA 0x60 ;                                 /* 0xffffff9000001947 */
        /*00d0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;             /* 0x0000000000007b1d */
        /*00e0*/                   FFMA R7, R6, R7, R7 ;                     /* 0x0000000706077223 */
        /*00f0*/                   ISETP.NE.AND P0, PT, R0, RZ, PT ;         /* 0x000000ff0000720c */
        /*0100*/              @!P0 BRA 0x40 ;                                /* 0xfffff3d000008947 */
        /*0110*/                   STG.E [R4.64], R7 ;                       /* 0x0000000704007986 */
        /*0120*/                   EXIT ;                                    /* 0x000000000000794d */
        /*0130*/                   BRA 0x130;                                /* 0xfffffff000007947 */
        /*0140*/                   NOP;                                      /* 0x0000000000007918 */
		..........

		Function : flat
	.headerflags	@"EF_CUDA_SM80"
        /*0000*/                   LDG.E R2, [R2.64] ;                       /* 0x0000000402027981 */
        /*0010*/                   SHFL.BFLY PT, R3, R2, 0x10, 0x1f ;        /* 0x0e201f0002037f89 */
        /*0020*/                   F2FP.PACK_AB R3, R3, R3 ;                 /* 0x000000030303723e */
        /*0030*/                   EXIT ;                                    /* 0x000000000000794d */
        /*0040*/                   BRA 0x40;                                 /* 0xfffffff000007947 */
"""


def test_parse_splits_functions_and_reads_predicates_and_opcodes():
    functions = sass.parse_sass(SNIPPET)
    assert list(functions) == ["outer", "flat"]
    outer = functions["outer"]
    assert len(outer) == 21 and outer[0].opcode == "IMAD.MOV.U32" and outer[0].address == 0
    assert outer[12].predicate == "@P1" and outer[12].branch_target() == 0x60
    assert outer[16].predicate == "@!P0" and outer[16].branch_target() == 0x40
    assert outer[4].branch_target() is None


@pytest.mark.parametrize(
    "opcode, kind",
    [("HMMA.16816.F32", "mma"), ("HGMMA.64x128x16.F32", "mma"), ("IMMA.16832.S8.S8", "mma"),
     ("LDSM.16.MT88.4", "ldsm"), ("LDGSTS.E.BYPASS.128", "ldgsts"), ("UTMALDG.2D", "tma"),
     ("IMAD.WIDE.U32", "integer"), ("UIADD3", "integer"), ("LEA.HI.X.SX32", "integer"),
     ("FFMA.FTZ", "float"), ("HFMA2.MMA", "float"), ("MUFU.EX2", "mufu"), ("R2UR", "r2ur"),
     ("SYNCS.ARRIVE.TRANS64.RED.A1T0", "barrier"), ("MEMBAR.SC.CTA", "barrier"), ("WARPSYNC", "barrier"),
     ("BSSY", "control"), ("ELECT", "control"), ("F2FP.PACK_AB", "convert"), ("SHFL.BFLY", "shuffle"),
     ("LDG.E.128", "global"), ("STS.128", "shared"), ("PRMT", "move"), ("FOOBAR", "other")],
)  # fmt: skip
def test_opcode_classes(opcode, kind):
    assert sass.opcode_class(opcode) == kind


def test_loops_are_the_spans_of_backward_branches_innermost_first_for_the_main_loop():
    report = sass.analyze_sass(SNIPPET)["outer"]
    assert [(lp.head, lp.tail, lp.depth) for lp in report.loops] == [
        (0x40, 0x100, 0),
        (0x60, 0xC0, 1),
    ]
    outer, inner = report.loops
    assert outer.contains(inner) and not inner.contains(outer)
    c = inner.counts
    assert (c["ldsm"], c["mma"], c["integer"], c["mufu"], c["control"], c["total"]) == (
        1,
        1,
        3,
        1,
        1,
        7,
    )
    assert (
        outer.counts["ldgsts"] == 1 and outer.counts["barrier"] == 2 and outer.counts["total"] == 13
    )
    assert report.main_loop() == inner  # the innermost loop with the MMA
    # the body stops at the last EXIT: the trailing self-branch and NOP padding are no code
    assert report.counts["total"] == 19 and report.counts["nop"] == 0
    assert [i.address for i in report.outside_loops()] == [0, 0x10, 0x20, 0x30, 0x110, 0x120]


def test_a_function_without_loops_has_no_main_loop_and_counts_its_body():
    flat = sass.analyze_sass(SNIPPET)["flat"]
    assert flat.loops == [] and flat.main_loop() is None
    c = flat.counts
    assert (c["global"], c["shuffle"], c["convert"], c["control"], c["total"]) == (1, 1, 1, 1, 4)


@pytest.mark.skipif(
    not sass.tools_available(), reason="ptxas / cuobjdump / nvdisasm wheels not installed"
)
def test_analyze_assembles_a_kernel_and_finds_its_loop():
    @kaio.gpu_kernel(block_size=128)
    def row_sums(x: Array[f32], out: MutArray[f32], n: u32):
        t = thread_idx_x()
        acc = 0.0
        for j in range(n):
            acc += x[t * n + j]
        out[t] = acc

    compiled = kaio.compile(row_sums, "sm_80")
    report = sass.analyze(compiled.ptx, "sm_80")["row_sums"]
    assert report.spill_bytes == 0 and 0 < report.registers <= 255 and report.shared_bytes == 0
    loop = report.main_loop()
    assert loop is not None and loop.counts["global"] >= 1 and loop.counts["float"] >= 1
    assert loop.counts["control"] >= 1  # its backward branch
    assert report.counts["total"] > loop.counts["total"]


def test_ptxas_figures_are_taken_per_function():
    from kaio.targets.ptx.toolchain import PtxasReport

    log = (
        "ptxas info    : Compiling entry function 'outer' for 'sm_80'\n"
        "    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 216 registers, used 1 barriers, 49152 bytes smem, 404 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function 'flat' for 'sm_80'\n"
        "ptxas info    : Used 12 registers, 360 bytes cmem[0]\n"
    )
    report = PtxasReport(
        b"", log, {"outer": 216, "flat": 12}, {"outer": 8, "flat": 0}, {"outer": 4, "flat": 0}
    )
    functions = sass.analyze_sass(SNIPPET, report)
    outer, flat = functions["outer"], functions["flat"]
    assert (outer.registers, outer.spill_bytes, outer.shared_bytes) == (216, 12, 49152)
    assert (flat.registers, flat.spill_bytes, flat.shared_bytes) == (12, 0, 0)
