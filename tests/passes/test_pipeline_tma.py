"""pipeline-tma: the sm_90a matmul's K loop fills its ring by TMA (tensor maps built at launch,
mbarrier phases), gives numpy's result on ragged shapes (boxes past the edges read zero), and
falls back to cp.async, with a debug note, where a tensor map cannot describe an operand."""

import logging
import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.compiled import TensorMapParam
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import WGMMA_CONFIGS, MatmulConfig
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.passes.pipeline_tma import PipelineTmaPass
from kaio.errors import KaioCompileError
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.utils.exceptions import VerifyException
from kaio.prelude import Array, MutArray, f16, f32, i32
from kaio.targets.ptx import toolchain
import kaio.tile as kt

needs_sass = pytest.mark.skipif(
    None in (toolchain.find_ptxas(), toolchain.find_cuobjdump(), toolchain.find_nvdisasm()),
    reason="ptxas / cuobjdump / nvdisasm wheels not installed",
)
BASE_CONFIGS = [c for c in WGMMA_CONFIGS if not (c.warp_specialize or c.persistent)]  # the warp-specialised tests add it
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global"
TMA_SHAPES = [(130, 72, 200), (17, 264, 136), (1, 8, 8)]  # ragged in M, N and K; rows of 16 bytes


@pytest.fixture(scope="module")
def hopper():
    return kaio.Device("sim", arch="sm_90a")


def test_the_matmul_k_loop_runs_on_tma():
    compiled = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), WGMMA_CONFIGS[0]), "sm_90a")
    a_map, b_map = (t for t in compiled.tensor_maps if t.array in ("a", "b"))  # C's is store-tma's
    assert a_map == TensorMapParam("a_tmap", "a", ("k", "m"), ("k",), (64, 128), 128)
    assert b_map == TensorMapParam("b_tmap", "b", ("n", "k"), ("n",), (64, 64), 128)  # 4 panels of 64 columns
    ptx = compiled.ptx
    assert ".param .align 64 .b8 matmul_a_tmap[128]" in ptx and "cvta.param.u64" in ptx
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes") == 3 * 5
    assert "mbarrier.try_wait.parity" in ptx and "cp.async.cg" not in ptx and "cp.async.ca" not in ptx
    # the operands come through the async proxy already: the fences are the barriers' init's and the C store's
    assert ptx.count("fence.proxy.async") == 2 and ptx.index("fence.proxy.async") < ptx.index("cp.async.bulk.tensor")
    assert ptx.rindex("fence.proxy.async") > ptx.rindex("wgmma.mma_async")
    stages = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), WGMMA_CONFIGS[0]), "sm_90a").stages
    loop = stages["pipeline-tma"]
    assert "mbarrier.alloc count 3" in loop and "mbarrier.arrive_expect_tx" in loop and "kaio.refill_barrier" in loop


@needs_sass
@pytest.mark.parametrize("config", WGMMA_CONFIGS, ids=str)
def test_every_wgmma_config_assembles_with_utmaldg_and_no_spills(config):
    compiled = kaio.compile(MatmulKernel(dtypes.bf16, dtypes.bf16, (16, 16, 16), config), "sm_90a")
    report = toolchain.assemble(compiled.ptx, "sm_90a")
    assert report.spill_stores.get("matmul", 0) == 0 and report.spill_loads.get("matmul", 0) == 0
    sass = toolchain.disassemble(report.cubin)
    assert "UTMALDG.2D" in sass and "HGMMA.64x" in sass and not re.search(r"\bLDGSTS\b", sass)


@pytest.mark.parametrize("m, n, k", TMA_SHAPES)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_tma_matmul_matches_numpy_on_ragged_shapes(hopper, rng, m, n, k, dtype):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    with hopper.profiling():
        matmul(hopper.alloc_from(a), hopper.alloc_from(b), out)
    mix = hopper.last_launch_report.by_class
    assert mix["cp.async.bulk.tensor.2d"] > 0 and mix["cp.async"] == 0, "the operands came by TMA"
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.heavy_seeds
@pytest.mark.parametrize("config", [c for c in WGMMA_CONFIGS if c != WGMMA_CONFIGS[0]], ids=str)
def test_every_tma_config_matches_numpy(hopper, rng, config):
    m, n, k = 136, 264, 72
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    matmul(hopper.alloc_from(a), hopper.alloc_from(b), out, config=config)
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_tma_with_the_fused_epilogue_and_split_k(hopper, rng):
    m, n, k = 40, 72, 264
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float16)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    for config in (WGMMA_CONFIGS[0], replace(WGMMA_CONFIGS[0], split_k=3)):
        out = hopper.alloc_from(np.full((m, n), np.nan, np.float16))
        matmul(hopper.alloc_from(a), hopper.alloc_from(b), out, bias=hopper.alloc_from(bias), activation="relu", config=config)
        np.testing.assert_allclose(out.to_host().astype(np.float64), want, rtol=2e-3, atol=2e-2)


def test_operands_a_tensor_map_cannot_describe_keep_cp_async(hopper, rng, caplog):
    """Rows of 100 f16 (200 bytes) are not 16-byte multiples: no TMA, the same results."""
    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), WGMMA_CONFIGS[0], divisible=(("m", 4), ("n", 4), ("k", 4)))
    with caplog.at_level(logging.DEBUG, logger="kaio.passes"):
        compiled = kaio.compile(kernel, "sm_90a", dump_ir=lambda stage, text: None)  # dump: no cache hit
    assert [t.array for t in compiled.tensor_maps] == ["c"]  # C's rows of 4 f32 are 16 bytes: its store is TMA's
    assert TMA_LOAD not in compiled.ptx and "cp.async.ca.shared" in compiled.ptx
    assert any("keeps cp.async" in r.message and "16-byte rows" in r.message for r in caplog.records)
    m, n, k = 33, 60, 100
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    matmul(hopper.alloc_from(a), hopper.alloc_from(b), out)
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_a_config_can_ask_for_cp_async():
    pipeline = str(replace(WGMMA_CONFIGS[0], tma=False).pipeline("sm_90a"))
    assert "pipeline-tma" not in pipeline and ",pipeline-tma{" in str(WGMMA_CONFIGS[0].pipeline("sm_90a"))
    assert "pipeline-tma" not in str(WGMMA_CONFIGS[0].pipeline("sm_90")), "TMA with wgmma only"
    assert "pipeline-tma" not in str(MatmulConfig().pipeline("sm_90a")), "mma.sync configs keep cp.async"


@kaio.tile_kernel(num_warps=4, num_stages=2)
def block_matmul(a: Array[f16], b: Array[f16], c: MutArray[f32], m: i32, n: i32, k: i32, lda: i32):
    """C = A[:, :k] @ B for A with rows of lda >= k elements (a column block of a wider matrix)."""
    a, lda = kt.multiple_of(a, 16), kt.multiple_of(lda, 8)
    m0 = i32(kt.program_id(0)) * 64
    acc = kt.zeros((64, 64), f32)
    for k0 in range(0, k, 64):
        tile_a = kt.load(a, (m0, k0), (64, 64), (m, k - 0), (lda * 1, 1))
        acc = kt.dot(tile_a, kt.load(b, (k0, 0), (64, 64), (k, n)), acc)
    kt.store(c, (m0, 0), acc, (m, n))


def test_a_user_tile_kernel_with_strided_views_runs_on_tma(hopper, rng):
    """Extents and row strides that are expressions of the scalar parameters: the recipe
    evaluates them at launch."""
    m, n, k, lda = 100, 64, 72, 88  # A is the first 72 columns of a 100 x 88 matrix
    wide = rng.standard_normal((m, lda)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    with hopper.profiling():
        block_matmul[kaio.cdiv(m, 64)](hopper.alloc_from(wide), hopper.alloc_from(b), out, m, n, k, lda)
    assert hopper.last_launch_report.by_class["cp.async.bulk.tensor.2d"] > 0
    want = wide[:, :k].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-4)


def test_an_empty_operand_reads_a_block_of_zeros(hopper, rng):
    """m = 0: A's map cannot describe an empty tensor; it describes a 16-byte zero block
    instead, so the loads read zeros and nothing is written."""
    b = rng.standard_normal((64, 64)).astype(np.float16)
    out = hopper.alloc_from(np.full((1, 64), np.nan, np.float32))
    block_matmul[1](hopper.alloc_from(np.zeros((1, 64), np.float16)), hopper.alloc_from(b), out, 0, 64, 64, 64)
    assert np.isnan(out.to_host()).all() and not hopper._tensor_map_zeros.to_host().any()


@kaio.tile_kernel(num_warps=4, num_stages=2)
def two_column_blocks(a: Array[f16], b: Array[f16], c: MutArray[f32], m: i32, n: i32, k: i32):
    """C = A @ B, each program two 64-column blocks: the K loop nested in another loop."""
    a, b = kt.multiple_of(a, 16), kt.multiple_of(b, 16)
    m0 = i32(kt.program_id(0)) * 64
    for n0 in range(0, n, 64):
        acc = kt.zeros((64, 64), f32)
        for k0 in range(0, k, 64):
            acc = kt.dot(kt.load(a, (m0, k0), (64, 64), (m, k)), kt.load(b, (k0, n0), (64, 64), (k, n)), acc)
        kt.store(c, (m0, n0), acc, (m, n))


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("m, n, k", [(70, 128, 136), (64, 320, 200), (20, 64, 8)])
def test_a_nested_k_loop_continues_its_ring_across_runs(hopper, rng, stages, m, n, k):
    """The K loop runs once per column block, its trip count (1 to 4) rarely a multiple of the
    stages: the read stage and phase parity carried through the outer loop keep every
    mbarrier's phases counting (a wrong parity would hang the simulator's wait)."""
    kernel = two_column_blocks.with_options(num_stages=stages)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    with hopper.profiling():
        kernel[kaio.cdiv(m, 64)](hopper.alloc_from(a), hopper.alloc_from(b), out, m, n, k)
    mix = hopper.last_launch_report.by_class
    assert mix["cp.async.bulk.tensor.2d"] > 0 and mix["cp.async"] == 0
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_a_nested_k_loop_carries_the_ring_state_through_the_outer_loop():
    facts = (("k", 16), ("n", 16))
    text = kaio.compile(two_column_blocks, "sm_90a", __divisible__=facts, dump_ir=lambda s, t: None).stages["pipeline-tma"]
    outer = text.index("scf.for")
    assert text.index("mbarrier.init") < outer, "initialised once, before the outer loop"
    inner = text.index("scf.for", outer + 1)
    # the first run's first tiles load before the outer loop, each next run's after the previous
    # run (while its epilogue goes on), once every warp is done reading the ring
    assert "tma.load" in text[:outer] and "tma.load" not in text[outer:inner]
    last_wait, next_run = text.rindex("mbarrier.wait_parity"), text.rindex("tma.load")
    assert last_wait < text.rindex("kernel.barrier", 0, next_run), "the previous run's readers are done before the next run's loads"
    assert re.search(r"iter_args\(.*\) -> \(i32, i32\)", text[outer : text.index("\n", outer)])  # read stage, parity


def test_a_nested_cp_async_k_loop_waits_for_its_previous_run_before_its_prologue():
    """On cp.async (sm_80) too: slower warps may still read the stages the next run's prologue
    overwrites, so a barrier comes first."""
    text = kaio.compile(two_column_blocks, "sm_80", dump_ir=lambda s, t: None).stages["pipeline-cp-async"]
    outer = text.index("scf.for")
    assert "kernel.barrier" in text[outer : text.index("cpasync.copy", outer)]


@kaio.tile_kernel(num_warps=4, num_stages=2)
def blocks_if_positive(a: Array[f16], b: Array[f16], c: MutArray[f32], m: i32, n: i32, k: i32):
    """two_column_blocks with its K loop under a branch."""
    a, b = kt.multiple_of(a, 16), kt.multiple_of(b, 16)
    m0 = i32(kt.program_id(0)) * 64
    for n0 in range(0, n, 64):
        acc = kt.zeros((64, 64), f32)
        if k > 0:
            for k0 in range(0, k, 64):
                acc = kt.dot(kt.load(a, (m0, k0), (64, 64), (m, k)), kt.load(b, (k0, n0), (64, 64), (k, n)), acc)
        kt.store(c, (m0, n0), acc, (m, n))


def test_a_k_loop_under_a_branch_keeps_cp_async_with_a_debug_note(hopper, rng, caplog):
    with caplog.at_level(logging.DEBUG, logger="kaio.passes"):
        ptx = kaio.compile(blocks_if_positive, "sm_90a", __divisible__=(("k", 16), ("n", 16)), dump_ir=lambda s, t: None).ptx
    assert TMA_LOAD not in ptx and re.search(r"cp\.async\.c[ag]\.shared", ptx)
    assert any("keeps cp.async" in r.message and "under a branch" in r.message for r in caplog.records)
    m, n, k = 40, 128, 72
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    blocks_if_positive[1](hopper.alloc_from(a), hopper.alloc_from(b), out, m, n, k)
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_a_nested_k_loop_is_not_warp_specialised(caplog):
    spec = "fuse-tile-maps,tile-layout{wgmma=true},promote-to-shared{layout=wgmma},pipeline-tma{stages=2 warp_specialize=true},lower-to-wgmma,canonicalize,cse,lower-to-ptx{arch=sm_90a}"
    with caplog.at_level(logging.DEBUG, logger="kaio.passes"):
        compiled = kaio.compile(two_column_blocks, "sm_90a", pipeline=spec, __divisible__=(("k", 16), ("n", 16)), dump_ir=lambda s, t: None)
    assert compiled.block_size == (128, 1, 1) and TMA_LOAD in compiled.ptx
    assert any("not warp-specialised" in r.message for r in caplog.records)


def test_too_few_stages_is_an_error():
    with pytest.raises(KaioCompileError, match="at least 2 stages"):
        PipelineTmaPass(stages=1).apply(None, None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- warp specialisation


def test_a_warp_specialised_kernel_adds_a_producer_warpgroup():
    config = replace(WGMMA_CONFIGS[0], warp_specialize=True)
    compiled = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config), "sm_90a")
    assert compiled.block_size == (384, 1, 1) and ".maxntid 384, 1, 1" in compiled.ptx
    ptx = compiled.ptx
    dec, inc = ptx.index("setmaxnreg.dec.sync.aligned.u32 40"), ptx.index("setmaxnreg.inc.sync.aligned.u32 232")
    assert dec < ptx.index("ret;") < inc, "the producer leaves before the consumers take its registers"
    assert ptx.count("bar.sync 0;") == 1, "one block barrier (the barriers' init) and no refill barrier"
    assert ptx.count("bar.sync") == 3, "and the staged epilogue's two, for the consumers only"
    assert ptx.count(TMA_LOAD) == 5 and ptx.count("mbarrier.arrive.shared::cta.b64") == 1
    loop = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config), "sm_90a", dump_ir=lambda s, t: None).stages["lower-to-wgmma"]
    body = loop[loop.index("wgmma.wait_group") - 2000 : loop.index("scf.yield", loop.index("wgmma.wait_group"))]
    assert "kernel.barrier" not in body, "the stage goes back by mbarrier.arrive, no block barrier"


@needs_sass
@pytest.mark.parametrize("config", BASE_CONFIGS[:2], ids=str)
def test_warp_specialised_configs_assemble_without_spills(config):
    compiled = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), replace(config, warp_specialize=True)), "sm_90a")
    report = toolchain.assemble(compiled.ptx, "sm_90a")
    assert report.spill_stores.get("matmul", 0) == 0 and report.spill_loads.get("matmul", 0) == 0
    sass = toolchain.disassemble(report.cubin)
    assert "UTMALDG.2D" in sass and "HGMMA.64x" in sass and "USETMAXREG" in sass


@pytest.mark.heavy_seeds
@pytest.mark.parametrize("config", BASE_CONFIGS, ids=str)
def test_warp_specialised_matmul_matches_numpy(hopper, rng, config):
    """Nine K tiles through 3-4 stages: the producer waits for released stages, twice round."""
    m, n, k = 130, 72, 9 * config.block[2] - 8
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float16))
    with hopper.profiling():
        matmul(hopper.alloc_from(a), hopper.alloc_from(b), out, bias=hopper.alloc_from(bias), activation="relu",
               config=replace(config, warp_specialize=True))  # fmt: skip
    assert hopper.last_launch_report.block == (config.threads + 128, 1, 1)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(out.to_host().astype(np.float64), want, rtol=2e-3, atol=3e-2)


def test_barriers_after_the_split_count_the_consumers_only():
    from xdsl.builder import Builder, InsertPoint
    from xdsl.dialects.builtin import ModuleOp

    from kaio.dialects import kernel as k
    from kaio.dialects import stage_attrs
    from kaio.passes.lower_to_ptx import LowerToPtxPass
    from kaio.targets.ptx.printer import print_ptx

    func = k.KernelFuncOp("split", [], [], (64, 1, 1))
    func.attributes[stage_attrs.PRODUCER_THREADS_ATTR] = IntegerAttr(128, i64)
    b = Builder(InsertPoint.at_end(func.body.block))
    for op in (k.BarrierOp(), k.SetMaxRegistersOp("dec", 40), k.ExitOp(), k.BarrierThreadsOp(64), k.BarrierOp(), k.ReturnOp()):
        b.insert(op)
    module = ModuleOp([func])
    module.verify()
    LowerToPtxPass("sm_90a").apply(None, module)  # type: ignore[arg-type]
    ptx = print_ptx(module, "sm_90a")
    assert ".maxntid 192, 1, 1" in ptx and ptx.index("bar.sync 0;") < ptx.index("ret;") < ptx.index("bar.sync 1, 64;")
    with pytest.raises(VerifyException, match="whole warps"):
        k.BarrierThreadsOp(48).verify()
    with pytest.raises(VerifyException, match="steps of 8"):
        k.SetMaxRegistersOp("inc", 230).verify()
