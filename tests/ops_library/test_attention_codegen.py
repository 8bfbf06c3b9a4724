"""Every compiled attention variant assembles with the wheel's ptxas for sm_80, sm_90 and sm_90a
without spills, and its SASS runs the dots on tensor cores fed by asynchronous copies; the key
blocks are walked in two loops (unmasked, then masked) sharing one set of shared buffers."""

import re

import pytest

import kaio
from kaio import dtypes
from kaio.ops_library.attention import AttentionConfig, candidates, choose_config, configured_kernel, kernel_meta, padded
from kaio.targets.ptx import toolchain

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


def compile_variant(d: int, sq: int, causal: bool, arch: str, t=dtypes.f16):  # type: ignore[no-untyped-def]
    config = choose_config(sq, d, arch)
    kernel = configured_kernel(t, config)
    return kaio.compile(kernel, arch, __divisible__=(("D", 16), ("DV", 16)), **kernel_meta(config, padded(d), causal, True)), config


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
@pytest.mark.parametrize("d", [32, 64, 96, 128, 256])
def test_every_head_dim_assembles_without_spills(arch, d):
    """The default configs (sm_90a: 128x128 tiles over 8 warps below D=256)."""
    for causal, sq in ((False, 1024), (True, 1024), (False, 1)):
        compiled, config = compile_variant(d, sq, causal, arch)
        report = toolchain.assemble(compiled.ptx, arch)
        print(f"D={d} sq={sq} causal={causal} {arch} {config}: {report.registers['attention']} registers")
        assert report.spill_stores["attention"] == 0 and report.spill_loads["attention"] == 0


@needs_ptxas
def test_sass_has_tensor_cores_and_async_copies():
    if toolchain.find_cuobjdump() is None or toolchain.find_nvdisasm() is None:
        pytest.skip("nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm not installed")
    compiled, _ = compile_variant(64, 1024, True, "sm_80", dtypes.bf16)
    sass = toolchain.disassemble(toolchain.assemble(compiled.ptx, "sm_80").cubin)
    counts = {ins: len(re.findall(rf"\b{ins}", sass)) for ins in ("HMMA.16816", "LDGSTS", "LDSM", "LDL", "STL")}
    print(counts)
    assert counts["HMMA.16816"] > 0 and counts["LDGSTS"] > 0 and counts["LDSM"] > 0
    assert counts["LDL"] == 0 and counts["STL"] == 0


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_flash_decoding_kernels_assemble_without_spills(arch):
    from kaio.ops_library.attention_kernel import combine_tile_kernel

    config = choose_config(1, 128)
    divisible = (("D", 16),)  # every head dim is a multiple of 16: the launch specializes on it
    split = kaio.compile(configured_kernel(dtypes.bf16, config, dtypes.f32), arch, BM=config.block_m,
                         BN=config.block_n, BD=128, BDV=128, CAUSAL=True, HAS_LENS=True,
                         __divisible__=(*divisible, ("DV", 16)))  # fmt: skip
    combine = kaio.compile(combine_tile_kernel(dtypes.bf16), arch, BM=16, BD=128, __divisible__=divisible)
    for compiled in (split, combine):
        report = toolchain.assemble(compiled.ptx, arch)
        assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0


@pytest.mark.parametrize("d", [64, 128])
def test_probabilities_feed_the_second_dot_from_registers(d):
    """P = exp2(s - m), cast to bf16, stays in the accumulator layout: the second dot packs its
    registers into A fragments; only Q, K and V have shared buffers (one set per key loop, the
    masked loop's taking the unmasked loop's bytes) and ldmatrix only reads them (Q's A
    fragments, K's and V's B fragments)."""
    config = choose_config(1024, d)
    compiled = kaio.compile(configured_kernel(dtypes.bf16, config), "sm_80", BM=config.block_m, BN=config.block_n,
                            BD=d, BDV=d, CAUSAL=True, HAS_LENS=False, __divisible__=(("D", 16), ("DV", 16)))  # fmt: skip
    stages = compiled.stages
    assert "smem.store" not in stages["promote-to-shared"]
    assert stages["promote-to-shared"].count("smem.alloc") == 2 * 3
    assert stages["reuse-dead-shared"].count("{kaio.reuse_dead}") == 3
    assert compiled.shared_bytes + compiled.dynamic_shared_bytes == config.shared_bytes(d)
    mma_ir = stages["lower-to-mma-sync"]
    rows_per_warp = config.block_m // config.warps_m
    assert mma_ir.count("mma.pack_a") == 2 * (rows_per_warp // 16) * (config.block_n // 16)
    assert mma_ir.count("mma.load_a") == 2 * (rows_per_warp // 16) * (d // 16)  # Q only
    lines = compiled.ptx.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("$L_for")]
    ends = [i for i, line in enumerate(lines) if line.startswith("$L_endfor")]
    assert len(heads) == len(ends) == 2  # the unmasked key loop, then the masked one
    for head, end in zip(heads, ends):
        loop = "\n".join(lines[head:end])
        assert "st.shared" not in loop  # only cp.async writes shared memory in the key loops
        assert loop.count("bar.sync") == 1  # the ring's barrier; none orders a store of P
    first, second = ("\n".join(lines[h:e]) for h, e in zip(heads, ends))
    assert "selp.f32" not in first and "selp.f32" in second  # masks (and the -inf guard) only in the second


AUTOTUNE = sorted({(arch, padded(d), sq, c) for arch in ("sm_80", "sm_90", "sm_90a") for d in (32, 64, 128, 256)
                   for sq in (1, 1024) for c in candidates(sq, d, arch)},
                  key=lambda x: (x[0], x[1], x[2], x[3].label()))  # fmt: skip


@pytest.mark.slow
@needs_ptxas
@pytest.mark.parametrize("arch, bd, sq, config", AUTOTUNE, ids=[f"{a}-d{d}-sq{sq}-{c.label()}" for a, d, sq, c in AUTOTUNE])
def test_every_autotune_candidate_assembles_without_spills(arch, bd, sq, config):
    """config="auto" only times configs that assemble without spills on the arch it runs."""
    outs = (dtypes.f16, dtypes.f32) if sq == 1 else (dtypes.f16,)  # decoding's split kernel writes f32
    for out in outs:
        for causal in (False, True):
            compiled = kaio.compile(configured_kernel(dtypes.f16, config, out), arch, BM=config.block_m,
                                    BN=config.block_n, BD=bd, BDV=bd, CAUSAL=causal, HAS_LENS=True,
                                    __divisible__=(("D", 16), ("DV", 16)))  # fmt: skip
            report = toolchain.assemble(compiled.ptx, arch)
            print(f"D={bd} {config.label()} {arch} out={out.name} causal={causal}: {report.registers['attention']} registers")
            assert report.spill_stores["attention"] == 0 and report.spill_loads["attention"] == 0


def test_sm90a_takes_two_warpgroup_tiles_and_other_targets_keep_theirs():
    assert choose_config(1024, 128, "sm_90a") == AttentionConfig(128, 128, 8, 1, 2)
    assert choose_config(1024, 128, "sm_90") == choose_config(1024, 128) == AttentionConfig(64, 32, 4, 1, 2)
    assert choose_config(1, 128, "sm_90a") == AttentionConfig(16, 16, 1, 1, 2)  # decoding
    assert choose_config(1024, 256, "sm_90a") == choose_config(1024, 256)
    wide = {c for c in candidates(1024, 64, "sm_90a") if c.warps == 8 and c.block_n >= 64}
    assert {(128, 64), (128, 128)} <= {(c.block_m, c.block_n) for c in wide}
    assert all(c.shared_bytes(64) <= 48 * 1024 for c in candidates(1024, 64, "sm_80"))


def test_softmax_is_one_ffma_and_one_ftz_exp2_per_score():
    """The scale rides in the exp2 argument (fma), exp2 is the .ftz SFU form, 1 / l one
    rcp.approx per row, and no correctly rounded division is left (fast-math)."""
    config = choose_config(1024, 64)
    compiled = kaio.compile(configured_kernel(dtypes.f16, config), "sm_80", __divisible__=(("D", 16), ("DV", 16)),
                            **kernel_meta(config, 64, False, False))  # fmt: skip
    ptx = compiled.ptx
    scores = config.block_m * config.block_n // (32 * config.warps)  # per thread
    rows = 2 * (config.block_m // config.warps_m // 16)  # a thread's rows of an m16 tile
    assert ptx.count("ex2.approx.ftz.f32") == 2 * (scores + rows) and "ex2.approx.f32" not in ptx  # two key loops
    assert ptx.count("fma.rn.f32") >= scores
    assert "div.rn.f32" not in ptx and ptx.count("rcp.approx.ftz.f32") == rows


def key_block_loop(report):  # type: ignore[no-untyped-def]
    """The unmasked key loop: the first innermost loop with the most MMAs (benchmarks/codegen.py)."""
    loops = [lp for lp in report.loops if not any(lp.contains(o) for o in report.loops)]
    most = max(lp.counts["mma"] for lp in loops)
    return min((lp for lp in loops if lp.counts["mma"] == most), key=lambda lp: lp.head)


# Triton 3.x's instructions per score element with the same tiles (sm_90a, f16, non-causal; the
# key loop's SASS per warp per trip x warps / (BM x BN), benchmarks/codegen.py --only attention)
TRITON_SM90A = {(128, AttentionConfig(64, 32, 4, 1, 2)): 0.533, (64, AttentionConfig(64, 32, 4, 1, 2)): 0.432,
                (128, AttentionConfig(128, 128, 8, 1, 2)): 0.250}  # fmt: skip


@needs_ptxas
@pytest.mark.parametrize("d, config", list(TRITON_SM90A), ids=lambda v: v.label() if hasattr(v, "label") else f"D{v}")
def test_sm90a_key_loop_is_at_or_below_tritons(d, config):
    """No R2UR of descriptors (the Q descriptors' low words stay uniform), no proxy fence (Q is fenced once
    before the loop), no copies of the P V accumulator (it is updated in the loop's own
    registers), and at most Triton's instructions per score element."""
    from kaio.targets.ptx import sass

    compiled = kaio.compile(configured_kernel(dtypes.f16, config), "sm_90a", __divisible__=(("D", 16), ("DV", 16)),
                            **kernel_meta(config, d, False, False))  # fmt: skip
    report = sass.analyze(compiled.ptx, "sm_90a")[compiled.name]
    loop = key_block_loop(report)
    assert report.spill_bytes == 0
    assert loop.counts["r2ur"] <= 2  # at most the ring's shared base for the TMA issue; none for descriptors
    assert not any(i.opcode.startswith(("MEMBAR", "FENCE")) for i in loop.instructions)
    assert loop.counts["move"] <= 2 * loop.counts["mma"] + 32  # hi-word UMOVs and TMA coordinates, no accumulator copies
    figure = loop.counts["total"] * config.warps / (config.block_m * config.block_n)
    assert figure <= TRITON_SM90A[d, config]


# Triton 3.9's key loop with the same tiles on sm_80 (f16, non-causal, 64x32, 4 warps, 2 stages;
# SASS per warp per trip, benchmarks/codegen.py --only "attention sm_80"): at D=64, 17 integer
# instructions and 2 moves (MOV: the loop-carried row max, copied at the back edge), 0.406
# instructions per score element; at D=128, 0.922 per score element.
TRITON_SM80 = {64: (17, 2, 0.406), 128: (None, None, 0.922)}


@needs_ptxas
@pytest.mark.parametrize("d", list(TRITON_SM80))
def test_sm80_key_loop_is_at_or_below_tritons(d):
    """The ring's stages are rotating byte offsets (no stage counter: no per-trip ``IMAD`` of
    each ldmatrix address), K's and V's copies share their bounds compares, the row they copy
    is carried. The same back-edge copies of the row max that Triton's SASS has as ``MOV``
    ptxas may issue as ``IMAD.MOV`` (class integer): integer arithmetic is counted without
    them, and integer plus moves against Triton's."""
    from kaio.targets.ptx import sass

    config = AttentionConfig(64, 32, 4, 1, 2)
    compiled = kaio.compile(configured_kernel(dtypes.f16, config), "sm_80", __divisible__=(("D", 16), ("DV", 16)),
                            **kernel_meta(config, d, False, False))  # fmt: skip
    report = sass.analyze(compiled.ptx, "sm_80")[compiled.name]
    loop = key_block_loop(report)
    integer, moves, per_score = TRITON_SM80[d]
    assert report.spill_bytes == 0
    if integer is not None:
        copies = sum(i.opcode.startswith("IMAD.MOV") for i in loop.instructions)
        assert loop.counts["integer"] - copies <= integer
        assert loop.counts["integer"] + loop.counts["move"] <= integer + moves
    assert loop.counts["total"] * config.warps / (config.block_m * config.block_n) <= per_score


@pytest.mark.parametrize("d", [64, 128])
def test_sm90a_pv_accumulator_is_updated_in_the_loops_registers(d):
    """The rescaled O is copied once into the loop's own accumulator registers, which the P V
    wgmma updates in place: no second copy of every accumulator at the back edge."""
    config = AttentionConfig(64, 32, 4, 1, 2)
    compiled = kaio.compile(configured_kernel(dtypes.f16, config), "sm_90a", __divisible__=(("D", 16), ("DV", 16)),
                            **kernel_meta(config, d, False, False))  # fmt: skip
    lines = compiled.ptx.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("$L_for"))
    tail = next(i for i in range(head, len(lines)) if re.search(r"bra \$L_for", lines[i]))
    copies = sum(bool(re.search(r"mov\.f32 %f\d+, %f\d+;", line)) for line in lines[head:tail])
    accumulators = config.block_m * d // (32 * config.warps)  # per thread
    assert accumulators <= copies <= accumulators + 8  # the rescaled O once; the row max and sum
