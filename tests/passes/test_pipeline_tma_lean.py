"""Lean Hopper K loops: the TMA issuer is one elected thread of warp 0 (``tma.issuer``), the
warpgroup index is warp-uniform (``wgmma.warpgroup_id``), descriptors are a 32-bit low word
beside a constant high word (an advance adds to the low word), a 2-stage ring refills before
its math, and a warp-specialised stage is released by one arrival per consumer warp. The sm_90a
matmul's K step in SASS is at or below Triton's TMA kernel with the same tiles."""

import re

import numpy as np
import pytest
from kaio.dialects import kernel as k
from kaio.dialects import tma, wgmma
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.passes.lower_to_ptx import LowerToPtxPass
from kaio.targets.ptx import sass
from kaio.targets.ptx.printer import print_ptx
from kaio.targets.sim import Simulator
from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, ModuleOp, i32, i64
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.pipeline import Pipeline, tile_pipeline
from kaio.prelude import Array, MutArray, f16, f32
from kaio.prelude import i32 as ki32

needs_sass = pytest.mark.skipif(not sass.tools_available(), reason="ptxas / cuobjdump / nvdisasm wheels not installed")
THREADS = 256


def c32(b: Builder, v: int):
    return b.insert(arith.ConstantOp.from_int_and_width(v, 32)).result


def index(b: Builder, v):
    """A global array's index (i64)."""
    if isinstance(v, int):
        return b.insert(arith.ConstantOp.from_int_and_width(v, 64)).result
    return b.insert(arith.ExtUIOp(v, i64)).result


def build_indices_kernel(warp: int, offset: int) -> ModuleOp:
    """Each thread writes (issuer, warpgroup, its warp's shared address) and thread 0 also a
    descriptor of a shared buffer and the same descriptor advanced by ``offset`` bytes."""
    params = [("flags", k.ArrayType(i32, True)), ("descs", k.ArrayType(i64, True))]
    func = k.KernelFuncOp("indices", [t for _, t in params], [p for p, _ in params], (THREADS, 1, 1))
    b = Builder(InsertPoint.at_end(func.body.block))
    flags, descs = func.body.block.args
    tid = b.insert(k.ThreadIdOp("x")).result
    issuer = b.insert(arith.ExtUIOp(b.insert(tma.IssuerOp(warp)).result, i32)).result
    group = b.insert(wgmma.WarpgroupIdOp()).result
    row = b.insert(arith.MuliOp(tid, c32(b, 2))).result
    b.insert(k.StoreOp(issuer, flags, [index(b, row)]))
    b.insert(k.StoreOp(group, flags, [index(b, b.insert(arith.AddiOp(row, c32(b, 1))).result)]))
    buffer = b.insert(tma.AllocOp(4096)).result
    desc = b.insert(wgmma.DescriptorOp(buffer, "128B", 8192, 1024)).result
    moved = b.insert(wgmma.AdvanceOp(desc, offset)).result
    for i, v in enumerate((b.insert(arith.ExtUIOp(buffer, i64)).result, desc, moved)):
        b.insert(k.StoreOp(v, descs, [index(b, i)]))
    b.insert(k.ReturnOp())
    module = ModuleOp([func])
    module.verify()
    return module


def run_indices(warp: int, offset: int) -> tuple[np.ndarray, np.ndarray, str]:
    module = build_indices_kernel(warp, offset)
    LowerToPtxPass("sm_90a").apply(None, module)  # type: ignore[arg-type]
    code = print_ptx(module, "sm_90a")
    sim = Simulator()
    mem = sim.memory
    flags = mem.alloc(THREADS * 2 * 4)
    mem.write(flags, np.full(THREADS * 2, -1, np.int32))
    descs = mem.alloc(3 * 8)
    mem.write(descs, np.zeros(3, np.uint64))
    sim.load(code).launch("indices", 1, THREADS, [np.uint64(p).tobytes() for p in (flags, descs)])
    return mem.read(flags, THREADS * 8).view(np.int32).reshape(THREADS, 2), mem.read(descs, 24).view(np.uint64), code


@pytest.mark.schedule_seeds
@pytest.mark.parametrize("warp", [0, 5])
def test_the_issuer_is_one_thread_of_its_warp_and_the_warpgroup_is_uniform(warp):
    rng = np.random.default_rng()
    offset = 16 * int(rng.integers(1, 64))
    got, descs, code = run_indices(warp, offset)
    assert got[:, 0].tolist() == [int(t == 32 * warp) for t in range(THREADS)]  # elect.sync: the lowest lane
    assert got[:, 1].tolist() == [t // 128 for t in range(THREADS)]
    # computed once where the kernel starts, from lane 0's warp index
    assert code.count("elect.sync") == 1 and code.count("shfl.sync.idx.b32") == 1
    address = int(descs[0])
    assert int(descs[1]) == wgmma.matrix_descriptor(address, 8192, 1024, "128B")
    assert int(descs[2]) == wgmma.matrix_descriptor(address + offset, 8192, 1024, "128B")
    # the advance is 32-bit: one add on the low word; the constant high word is an immediate
    # (or.b64 of the widened low word), so ptxas keeps only the low word live (uniform)
    assert re.search(rf"add\.s32 %r\d+, %r\d+, {offset >> 4};", code)
    high = wgmma.matrix_descriptor(0, 8192, 1024, "128B") >> 32 << 32
    assert len(re.findall(rf"or\.b64 %rd\d+, %rd\d+, {high - (1 << 64) if high >> 63 else high};", code)) == 2
    assert not re.search(r"mov\.b64 %rd\d+, \{", code)  # no pack of two registers


def test_issuer_and_warpgroup_ops_round_trip_and_verify():
    module = build_indices_kernel(3, 32)
    text = str(module)
    assert "tma.issuer warp 3" in text and "wgmma.warpgroup_id" in text
    ctx = Context()
    for d in (Builtin, Arith, k.Kernel, wgmma.Wgmma, tma.Tma):
        ctx.load_dialect(d)
    parsed = Parser(ctx, text).parse_module()
    parsed.verify()
    assert str(parsed) == text
    with pytest.raises(VerifyException, match="warp is >= 0"):
        tma.IssuerOp(-1).verify_()


def sm90a_matmul(config: MatmulConfig):
    return kaio.compile(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), config), "sm_90a")


@needs_sass
@pytest.mark.parametrize(
    "config, triton",
    [(MatmulConfig((128, 256, 64), (8, 1), 3, "wgmma"), 89), (MatmulConfig((128, 128, 64), (8, 1), 4, "wgmma"), 86)],
    ids=lambda x: x.key() if isinstance(x, MatmulConfig) else str(x),
)
def test_the_tma_k_step_is_at_most_tritons(config, triton):
    """Triton 3.9's TMA matmul with the same tiles takes 89 (128x256x64, 3 stages) and 86
    (128x128x64, 4 stages) SASS instructions per K step and warp. Before: 132 and 111 (an elect
    loop around every box, the descriptors rebuilt in 64-bit registers, a division by 4)."""
    compiled = sm90a_matmul(config)
    report = sass.analyze(compiled.ptx, "sm_90a")[compiled.name]
    assert report.spill_bytes == 0
    loop = report.main_loop()
    assert loop is not None
    counts = loop.counts
    assert counts["mma"] == 4 and counts["tma"] == 1 + config.block[1] // 64
    assert counts["total"] <= triton, counts
    opcodes = [i.opcode for i in loop.instructions]
    assert not any(op.startswith(("ELECT", "BRA.U.ANY", "I2F", "MUFU")) for op in opcodes), opcodes
    assert counts["r2ur"] == 0  # descriptors and copy operands stay in uniform registers


@kaio.tile_kernel(num_warps=4, num_stages=2)
def two_stage(a: Array[f16], b: Array[f16], c: MutArray[f32], m: ki32, n: ki32, kk: ki32):
    a, b = kt.multiple_of(a, 16), kt.multiple_of(b, 16)
    m0 = ki32(kt.program_id(0)) * 64
    acc = kt.zeros((64, 64), f32)
    for k0 in range(0, kk, 64):
        acc = kt.dot(kt.load(a, (m0, k0), (64, 64), (m, kk)), kt.load(b, (k0, 0), (64, 64), (kk, n)), acc)
    kt.store(c, (m0, 0), acc, (m, n))


FACTS = {"a": 16, "b": 16, "c": 16, "m": 16, "n": 16, "kk": 16}  # what a launch proves: 16-byte rows, TMA


def loop_body(ptx: str) -> str:
    """The PTX of the K loop: from the label the back edge branches to, to the back edge."""
    back = list(re.finditer(r"@%p\d+ bra \$(L_for_\d+);", ptx))[-1]
    return ptx[ptx.index(f"${back.group(1)}:") : back.end()]


def test_a_two_stage_ring_refills_before_its_math():
    compiled = kaio.compile(two_stage, "sm_90a", specialization=FACTS)
    body = loop_body(compiled.ptx)
    refill, wait = body.index("cp.async.bulk.tensor"), body.index("mbarrier.try_wait")
    assert body.index("bar.sync") < refill < wait < body.index("wgmma.mma_async")
    # the next iteration refills the stage this one reads: no wgmma stays in flight past it
    assert "wgmma.wait_group.sync.aligned 0;" in body and "wgmma.wait_group.sync.aligned 1;" not in body
    three = kaio.compile(two_stage.with_options(num_stages=3), "sm_90a", specialization=FACTS)
    body3 = loop_body(three.ptx)
    assert body3.index("mbarrier.try_wait") < body3.index("wgmma.mma_async") < body3.index("cp.async.bulk.tensor")
    assert "wgmma.wait_group.sync.aligned 1;" in body3


@pytest.mark.schedule_seeds
@pytest.mark.parametrize("stages", [2, 3])
def test_two_and_three_stage_rings_match_numpy(stages):
    dev = kaio.Device("sim", arch="sm_90a")
    rng = np.random.default_rng()
    m, n, kk = 64, 64, 64 * 4 + 16  # four full K tiles and a ragged one: every stage refilled
    a = rng.standard_normal((m, kk)).astype(np.float16)
    b = rng.standard_normal((kk, n)).astype(np.float16)
    out = dev.alloc_from(np.full((m, n), np.nan, np.float32))
    two_stage.with_options(num_stages=stages)[1](dev.alloc_from(a), dev.alloc_from(b), out, m, n, kk)
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def warp_specialised(arch: str) -> Pipeline:
    return Pipeline.parse(str(tile_pipeline(arch, 2)).replace("warp_specialize=false", "warp_specialize=true"))


def test_consumer_warps_release_a_stage_with_one_arrival_each():
    stages = kaio.compile(two_stage.with_pipeline(warp_specialised), "sm_90a", specialization=FACTS).stages["pipeline-tma"]
    assert "mbarrier.init" in stages
    counts = sorted(int(c) for c in re.findall(r"mbarrier\.init %\S+ count (\d+)", stages))
    assert counts == [1, 1, 4, 4]  # full: the producer's expect_tx; empty: the 4 consumer warps
    ptx = kaio.compile(two_stage.with_pipeline(warp_specialised), "sm_90a", specialization=FACTS).ptx
    assert "%laneid" in ptx and ptx.count("mbarrier.arrive.shared::cta.b64") == 1
    assert ptx.count("elect.sync") == 2  # the barriers' initialiser in warp 0, the producer's issuer in warp 4


def test_the_persistent_kernel_loads_the_next_tiles_first_stages_before_its_epilogue():
    """The next C tile's first S - 1 K tiles are issued right after the K loop, before the C
    tile's stores and their wait; the tile loop's body starts its K loop with no prologue."""
    config = MatmulConfig((128, 128, 64), (8, 1), 4, "wgmma", persistent=True)
    ptx = sm90a_matmul(config).ptx
    load = "cp.async.bulk.tensor.2d.shared::cluster"
    after_k_loop = ptx.index("wgmma.wait_group.sync.aligned 0;")
    store_wait = ptx.index("cp.async.bulk.wait_group.read", after_k_loop)
    assert ptx[after_k_loop:store_wait].count(load) == 3 * (config.stages - 1)  # A and two B boxes a tile
    assert ptx[after_k_loop:store_wait].index(load) < ptx[after_k_loop:store_wait].index("st.shared")
    tile_loop = re.findall(r"@%p\d+ bra \$(L_for_\d+);", ptx)[-1]
    body = ptx[ptx.index(f"${tile_loop}:") :]
    assert load not in body[: body.index("mbarrier.try_wait")]
    assert ptx[: ptx.index(f"${tile_loop}:")].count(load) == 3 * (config.stages - 1)  # the first tile's, before the loop
