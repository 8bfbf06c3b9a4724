"""lower-to-wgmma: the wgmma smem layout against the simulator's descriptor decoding, the pass's
IR for a simple dot, which dots it takes, and tile-kernel dots on sm_90a run on the simulator
(f16/bf16, A and B either way round, several panel widths) vs numpy."""

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import bf16 as bf16_t
from xdsl.dialects.builtin import f16, f32
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import kaio
import kaio.module_compiler
from kaio.locations import print_with_locations
import kaio.tile as kt
from kaio.dialect_registry import kaio_context
from kaio.dialects import smem, tile, wgmma
from kaio.dialects.tile_layout import MmaLayout, layout_of
from kaio.errors import KaioTargetError
from kaio.passes.lower_to_wgmma import OperandPlan
from kaio.pipeline import Pipeline, tile_pipeline
from kaio.prelude import Array, MutArray, bf16
from kaio.prelude import f16 as F16
from kaio.prelude import f32 as F32
from kaio.prelude import i32 as I32
from kaio.targets.sim.ops_wgmma import Descriptor

# --------------------------------------------------------------------------- the layout


def layout_addresses(rows: int, cols: int, eb: int = 2) -> np.ndarray:
    """(rows, cols) byte offsets of the wgmma layout (the reference the lowering follows)."""
    layout = smem.LayoutAttr("wgmma")
    return np.array([[layout.offset(r, c, cols, eb, rows) for c in range(cols)] for r in range(rows)])


@pytest.mark.parametrize("rows,cols", [(64, 16), (64, 32), (64, 64), (128, 128), (32, 256)])
def test_k_major_descriptors_read_the_layout(rows, cols):
    """Every (M/N block of 64 rows, k16 step) the pass would describe is what the simulator's
    decoding of that descriptor reads: element (r, k) of the slice at its layout offset."""
    where = layout_addresses(rows, cols)
    plan = OperandPlan(False, smem.LayoutAttr("wgmma").panel_span(cols, 2), rows, 2)
    base = 4096  # any 1024-aligned buffer
    for mn in range(0, rows, 64):
        for kk in range(cols // 16):
            desc = wgmma.matrix_descriptor(base + plan.offset(mn, kk), plan.lbo, plan.sbo, plan.swizzle)
            read = Descriptor.decode(desc).addresses(min(64, rows), 2, mn_major=False)
            want = base + where[mn : mn + 64, 16 * kk : 16 * kk + 16]
            np.testing.assert_array_equal(read, want)


@pytest.mark.parametrize("rows,cols,chunk", [(16, 64, 64), (32, 128, 128), (64, 512, 256), (16, 16, 16), (32, 32, 32)])
def test_mn_major_descriptors_read_the_layout(rows, cols, chunk):
    """rows = K, cols = M or N (a B tile as K x N, or A stored transposed): each column chunk
    and k16 step reads the layout's elements (read as (M/N, k): the transpose)."""
    where = layout_addresses(rows, cols)
    plan = OperandPlan(True, smem.LayoutAttr("wgmma").panel_span(cols, 2), rows, 2)
    base = 8192
    for n0 in range(0, cols, chunk):
        for kk in range(rows // 16):
            desc = wgmma.matrix_descriptor(base + plan.offset(n0, kk), plan.lbo, plan.sbo, plan.swizzle)
            read = Descriptor.decode(desc).addresses(chunk, 2, mn_major=True)
            want = base + where[16 * kk : 16 * kk + 16, n0 : n0 + chunk].T
            np.testing.assert_array_equal(read, want)


def test_layout_is_the_swizzle_for_128_byte_rows_and_a_permutation():
    ref = smem.LayoutAttr("swizzle")
    got = layout_addresses(32, 64)
    assert all(got[r, c] == ref.offset(r, c, 64, 2) for r in range(32) for c in range(64))
    wide = layout_addresses(24, 96)  # 192-byte rows: 64-byte panels
    assert sorted(wide.ravel() // 2) == list(range(24 * 96))


def test_layout_round_trips_and_verifies():
    buf = smem.BufferType((3, 64, 32), f16, smem.LayoutAttr("wgmma"))
    buf.verify()
    assert str(buf) == "!smem.buffer<3x64x32xf16, #smem.layout<wgmma>>"
    assert smem.LayoutAttr("wgmma").alignment() == 1024 and smem.LayoutAttr("swizzle").alignment() == 128
    with pytest.raises(VerifyException, match="multiple of 32 bytes"):
        smem.BufferType((64, 8), f16, smem.LayoutAttr("wgmma")).verify()
    with pytest.raises(VerifyException, match="multiple of 8 rows"):
        smem.BufferType((12, 64), f16, smem.LayoutAttr("wgmma")).verify()


def test_split_and_join_verify_the_accumulator_tile():
    good = tile.tile_type(f32, (128, 512), MmaLayout([8, 1]))
    assert wgmma.tile_chunks(good) == [256, 256]
    assert wgmma.column_chunks(384) == [192, 192] and wgmma.column_chunks(64) == [64]
    for bad in (
        tile.tile_type(f32, (128, 64), MmaLayout([4, 2])),  # warps along N
        tile.tile_type(f32, (64, 64), MmaLayout([8, 1])),  # M != 16 W
        tile.tile_type(f32, (32, 64), MmaLayout([2, 1])),  # not whole warpgroups
        tile.tile_type(f16, (64, 64), MmaLayout([4, 1])),
    ):
        with pytest.raises(VerifyException):
            wgmma.tile_chunks(bad)


# --------------------------------------------------------------------------- the pass


def make_dot(T, trans_a: bool, trans_b: bool, warps: int):
    @kaio.tile_kernel(num_warps=warps, num_stages=1)
    def dot(a: Array[T], b: Array[T], c: MutArray[F32], M: kaio.constexpr = 64, N: kaio.constexpr = 64, K: kaio.constexpr = 64):
        x = kt.trans(kt.load(a, (0, 0), (K, M), (K, M))) if trans_a else kt.load(a, (0, 0), (M, K), (M, K))
        y = kt.trans(kt.load(b, (0, 0), (N, K), (N, K))) if trans_b else kt.load(b, (0, 0), (K, N), (K, N))
        kt.store(c, (0, 0), kt.dot(x, y, kt.zeros((M, N), F32)), (M, N))

    return dot


def stages_of(kernel, arch="sm_90a", **constexprs) -> dict[str, str]:
    stages: dict[str, str] = {}
    kaio.compile(kernel, arch, dump_ir=lambda s, t: stages.__setitem__(s, t), **constexprs)
    return stages


def test_the_pass_ir_for_a_simple_dot():
    stages = stages_of(make_dot(F16, False, False, 8), M=128, N=128, K=32)
    assert "lower-to-wgmma" in stages and "lower-to-mma-sync" in stages
    text = stages["lower-to-wgmma"]
    assert "tile.dot" not in text and "mma.load_a" not in stages["lower-to-mma-sync"]
    assert text.count("wgmma.split") == 1 and text.count("wgmma.join") == 1
    # A 128x32 K-major (64-byte rows: 64B swizzle); B 32x128 MN-major (128-byte panels)
    assert 'swizzle "64B" lbo 16 sbo 512' in text and 'swizzle "128B" lbo 4096 sbo 1024' in text
    assert text.count("wgmma.mma_async") == 2  # K = 32: two k16 steps, N = 128 in one chunk
    assert "trans 0, 1 accumulate 1 : !wgmma.acc<128>, i64" in text
    fence, wfence = text.index("tma.fence"), text.index("wgmma.fence")
    first_mma, commit = text.index("wgmma.mma_async"), text.index("wgmma.commit_group")
    wait = text.index("wgmma.wait_group")
    assert fence < wfence < first_mma < commit < wait and "pending 0" in text[wait:]
    # 8 warps: warpgroup 1 reads A from row 64 on (64 rows x 64 bytes)
    assert "wgmma.warpgroup_id" in text and "arith.constant 4096 : i32" in text
    assert "!smem.buffer<128x32xf16, #smem.layout<wgmma>>" in text
    parsed = Parser(kaio_context(), text).parse_module()  # the stage is replayable
    parsed.verify()
    assert print_with_locations(parsed) == text  # locations included
    ptx = stages["ptx"]
    assert ".align 1024" in ptx and "fence.proxy.async.shared::cta" in ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16") == 2


def test_the_pipeline_names_the_pass_on_sm90a_only():
    assert "lower-to-wgmma" in str(tile_pipeline("sm_90a"))
    assert "promote-to-shared{layout=\"wgmma\"}" in str(tile_pipeline("sm_90a"))
    assert "lower-to-wgmma" not in str(tile_pipeline("sm_90")) and "lower-to-wgmma" not in str(tile_pipeline("sm_80"))
    p = tile_pipeline("sm_90a")
    assert Pipeline.parse(str(p)) == p


def test_dots_wgmma_cannot_take_keep_mma_sync():
    # 4 warps and M = 128: not 16 x warps; 2 warps: not a warpgroup
    for warps, constexprs in ((4, {"M": 128, "N": 64, "K": 64}), (2, {"M": 32, "N": 64, "K": 32})):
        stages = stages_of(make_dot(F16, False, False, warps), **constexprs)
        assert "wgmma.split" not in stages["lower-to-wgmma"] and "wgmma.mma_async" not in stages["ptx"]
        assert "mma.sync.aligned.m16n8k16" in stages["ptx"]


def test_tile_layout_picks_the_warpgroup_grid():
    stages = stages_of(make_dot(F16, True, True, 4), M=64, N=256, K=16)
    (dot,) = [o for o in Parser(kaio_context(), stages["tile-layout"]).parse_module().walk() if isinstance(o, tile.DotOp)]
    assert layout_of(dot.result.type) == MmaLayout([4, 1])
    assert "tile-layout{mma=true warps=0,0 wgmma=true staged_stores=true}" in str(make_dot(F16, False, False, 4).default_pipeline("sm_90a"))


def test_wgmma_on_an_older_target_names_the_arch():
    kernel = make_dot(F16, False, False, 4)
    spec = str(tile_pipeline("sm_90a")).replace("\"sm_90a\"", "sm_90")
    with pytest.raises(KaioTargetError, match="sm_90a"):
        kaio.compile(kernel, "sm_90", pipeline=spec)


# --------------------------------------------------------------------------- on the simulator

SHAPES = [  # (warps, M, N, K): panel spans 32/64/128 bytes, N in one or two chunks
    (4, 64, 64, 64),
    (8, 128, 128, 32),
    (4, 64, 32, 16),
    (4, 64, 512, 32),
]


@pytest.fixture(scope="module")
def hopper():
    return kaio.Device("sim", arch="sm_90a")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("trans", [(False, False), (False, True), (True, False), (True, True)], ids=["ab", "a_bT", "aT_b", "aT_bT"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "w{}_{}x{}x{}".format(*s))
def test_tile_dot_on_wgmma_matches_numpy(hopper, dtype, trans, shape):
    warps, m, n, k = shape
    T, np_t = {"f16": (F16, np.float16), "bf16": (bf16, ml_dtypes.bfloat16)}[dtype]
    ta, tb = trans
    kernel = make_dot(T, ta, tb, warps)
    ptx = kaio.compile(kernel, "sm_90a", M=m, N=n, K=k).ptx
    assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx
    rng = np.random.default_rng()
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np_t)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np_t)
    c = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    kernel.launch(hopper, hopper.alloc_from(a), hopper.alloc_from(b), c, grid=(1,), M=m, N=n, K=k)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (a64.T if ta else a64) @ (b64.T if tb else b64)
    np.testing.assert_allclose(c.to_host(), want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("tma", [False, True])
def test_pipelined_k_loop_keeps_one_group_in_flight(tma):
    from dataclasses import replace

    from kaio.ops_library.matmul_config import WGMMA_CONFIGS
    from kaio.ops_library.matmul_kernel import MatmulKernel
    from kaio import dtypes

    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), replace(WGMMA_CONFIGS[0], tma=tma))
    text = kaio.compile(kernel, "sm_90a").stages["lower-to-wgmma"]
    loop_end = text.index("scf.yield")  # the K loop's end
    body, after = text[text.index("scf.for") : loop_end], text[loop_end:]
    assert "pending 1" in body and "pending 0" not in body
    # the wait retires the previous iteration's products before every warpgroup passes the
    # barrier; only then do the copies refill that stage (TMA's refill barrier serves: one only)
    wait = body.index("pending 1")
    assert body.index("kernel.barrier", wait) < body.index("tma.load" if tma else "cpasync.copy", wait)
    assert body.count("kernel.barrier") == (1 if tma else 2)
    assert ("tma.fence" in body) != tma  # TMA writes through the async proxy wgmma reads by
    assert "wgmma.split" in after and "pending 0" in after  # final before the epilogue reads it
    spec = str(kernel.default_pipeline("sm_90a")).replace("overlap=true", "overlap=false")
    plain = kaio.compile(kernel, "sm_90a", pipeline=spec).stages["lower-to-wgmma"]
    assert "pending 1" not in plain and plain.count("wgmma.wait_group") == 1 and "pending 0" in plain


def test_stages_replay_through_kaio_opt(tmp_path):
    """KAIO_DUMP_IR-style files of the sm_90a matmul: the stage before lower-to-wgmma, run
    through kaio-opt with the rest of the pipeline, gives the compiled PTX."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from kaio import dtypes
    from kaio.ops_library.matmul_config import WGMMA_CONFIGS
    from kaio.ops_library.matmul_kernel import MatmulKernel

    exe = shutil.which("kaio-opt", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("kaio-opt is not installed in this environment")
    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), WGMMA_CONFIGS[3])
    compiled = kaio.compile(kernel, "sm_90a", dump_ir=tmp_path)
    (stage,) = (tmp_path / f"matmul.sm_90a-{compiled.specialization.key}").glob("*-pipeline-cp-async.mlir")
    pipeline = str(kernel.default_pipeline("sm_90a"))
    rest = pipeline[pipeline.index("lower-to-wgmma") :]  # the passes after the dumped stage
    proc = subprocess.run([exe, str(stage), "-p", rest, "-t", "ptx{arch=sm_90a}"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == compiled.ptx


@pytest.mark.parametrize("trans", [(False, False), (False, True), (True, False), (True, True)], ids=["ab", "a_bT", "aT_b", "aT_bT"])
def test_mma_sync_reads_the_wgmma_layout(hopper, trans):
    """2 warps: no warpgroup, so the dot stays on ldmatrix + mma.sync, reading operands staged
    in the wgmma layout (K = 128 and N = 64: two and one 128-byte panels), every ldmatrix form."""
    ta, tb = trans
    kernel = make_dot(F16, ta, tb, 2)
    m, n, k = 32, 64, 128
    stages = stages_of(kernel, M=m, N=n, K=k)
    assert "#smem.layout<wgmma>" in stages["promote-to-shared"] and "wgmma.mma_async" not in stages["ptx"]
    rng = np.random.default_rng()
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float16)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float16)
    c = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    kernel.launch(hopper, hopper.alloc_from(a), hopper.alloc_from(b), c, grid=(1,), M=m, N=n, K=k)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (a64.T if ta else a64) @ (b64.T if tb else b64)
    np.testing.assert_allclose(c.to_host(), want, rtol=1e-5, atol=1e-4)


@kaio.tile_kernel(num_warps=4, num_stages=1)
def chained(a: Array[F16], b: Array[F16], v: Array[F16], out: MutArray[F32], M: kaio.constexpr = 64,
            N: kaio.constexpr = 32, K: kaio.constexpr = 64, D: kaio.constexpr = 64):  # fmt: skip
    """(A B) V with A B rounded to f16 in registers: the second dot's A operand never goes
    through shared memory (attention's P V)."""
    s = kt.dot(kt.load(a, (0, 0), (M, K), (M, K)), kt.load(b, (0, 0), (K, N), (K, N)), kt.zeros((M, N), F32))
    o = kt.dot(F16(s), kt.load(v, (0, 0), (N, D), (N, D)), kt.zeros((M, D), F32))
    kt.store(out, (0, 0), o, (M, D))


def test_an_a_operand_in_registers_feeds_wgmma(hopper):
    stages = stages_of(chained)
    text = stages["lower-to-wgmma"]
    assert text.count("mma.pack_a") == 2  # N = 32: two k16 steps of the second dot
    assert text.count("wgmma.mma_async") == 4 + 2
    assert ": !wgmma.acc<64>, !mma.frag<a, f16>" in text
    pack, fence = text.rindex("mma.pack_a"), text.rindex("wgmma.fence")
    assert pack < fence  # the fragments are written before wgmma may read them
    assert "mma.sync" not in stages["ptx"]
    rng = np.random.default_rng()
    a, b, v = (rng.standard_normal(s).astype(np.float16) for s in ((64, 64), (64, 32), (32, 64)))
    out = hopper.alloc_from(np.full((64, 64), np.nan, np.float32))
    chained.launch(hopper, hopper.alloc_from(a), hopper.alloc_from(b), hopper.alloc_from(v), out, grid=(1,))
    s = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).astype(np.float16)
    want = s.astype(np.float64) @ v.astype(np.float64)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-3, atol=1e-2)


def test_register_a_fragments_verify():
    from xdsl.dialects import arith
    from xdsl.ir import Block

    from kaio.dialects.mma import FragType

    acc = wgmma.ZeroOp(64).result
    desc = arith.ConstantOp.from_int_and_width(0, 64).result
    a16, a_bf16, c = Block(arg_types=[FragType("a", f16), FragType("a", bf16_t), FragType("acc", f32)]).args
    wgmma.MmaAsyncOp(acc, a16, desc, f16).verify_()
    for bad in (
        wgmma.MmaAsyncOp(acc, c, desc, f16),  # an accumulator fragment
        wgmma.MmaAsyncOp(acc, a_bf16, desc, f16),  # another element type
        wgmma.MmaAsyncOp(acc, a16, desc, f16, trans_a=1),  # registers cannot be transposed
    ):
        with pytest.raises(VerifyException, match="untransposed A fragment"):
            bad.verify_()


# --- the proxy fence of an operand the loop only reads ------------------------------------------


def fresh_q_loop(arch_stages: int = 2):
    """S = Q K^T summed over key blocks: Q (a plain buffer, written once by ordinary stores)
    is read by every trip's wgmma; K comes through the ring."""

    @kaio.tile_kernel(num_warps=4, num_stages=arch_stages)
    def q_loop(q: Array[F16], k: Array[F16], c: MutArray[F32], n: I32):
        qt = kt.load(q, (0, 0), (64, 64), (64, 64))
        acc = kt.zeros((64, 32), F32)
        for n0 in range(0, n, 32):
            acc = kt.dot(qt, kt.trans(kt.load(k, (n0, 0), (32, 64), (n, 64))), acc)
        kt.store(c, (0, 0), acc, (64, 32))

    return q_loop


def loop_text(text: str) -> tuple[str, str]:
    """(before, inside) the first scf.for of a stage's text."""
    at = text.index("scf.for")
    return text[:at], text[at:]


def test_an_operand_the_loop_only_reads_is_fenced_once_before_the_loop():
    text = stages_of(fresh_q_loop())["lower-to-wgmma"]
    before, inside = loop_text(text)
    assert "tma.fence" not in inside.split("scf.yield")[0]  # the loop body: K comes by TMA, Q was fenced
    last_copy = before.rindex("smem.copy")
    assert "tma.fence" in before[last_copy:]  # after Q's generic-proxy writes, on the way in


def test_operands_the_loop_writes_keep_their_fence_in_the_loop():
    """cp.async fills the ring stage (generic proxy) inside the loop: each trip fences it."""
    def pipeline(arch: str) -> Pipeline:
        return tile_pipeline(arch, 2).without("pipeline-tma").without("store-tma")

    text = stages_of(fresh_q_loop().with_pipeline(pipeline))["lower-to-wgmma"]
    _, inside = loop_text(text)
    body = inside.split("scf.yield")[0]
    assert body.index("tma.fence") < body.index("wgmma.fence")


def run_q_loop(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = 96
    dev = kaio.Device("sim", arch="sm_90a")
    q = rng.standard_normal((64, 64)).astype(np.float16)
    k = rng.standard_normal((n, 64)).astype(np.float16)
    out = dev.alloc_from(np.full((64, 32), np.nan, np.float32))
    fresh_q_loop()[1](dev.alloc_from(q), dev.alloc_from(k), out, n)
    k64 = k.astype(np.float64)
    want = q.astype(np.float64) @ sum(k64[j : j + 32] for j in range(0, n, 32)).T
    return out.to_host(), want


def test_the_hoisted_fence_keeps_the_simulator_rules_and_numpy(rng):
    got, want = run_q_loop(rng)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def without_the_hoisted_fence(ptx: str) -> str:
    """The PTX without the fence before the key loop. The mbarrier init's fence (thread 0's, after
    its own Q stores) becomes CUTLASS's ``fence.mbarrier_init``, which orders the init only, so
    no other proxy fence stands between Q's stores and the wgmma."""
    lines = ptx.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("$L_for"))
    init = next(i for i, line in enumerate(lines) if "mbarrier.init" in line)
    init_fence = next(i for i in range(init, head) if "fence.proxy.async" in lines[i])
    lines[init_fence] = "\tfence.mbarrier_init.release.cluster;"
    fence = max(i for i in range(head) if "fence.proxy.async" in lines[i])
    assert fence > init_fence
    return "\n".join(lines[:fence] + lines[fence + 1 :])


def test_a_kernel_without_the_hoisted_fence_is_rejected(rng, monkeypatch):
    """Planted bug: the fence before the loop deleted; the simulator's proxy rule catches Q's
    generic writes read by wgmma's async proxy (the same edit that only swaps the init fence
    passes: the hoisted fence alone orders Q)."""
    monkeypatch.setenv("KAIO_CACHE", "0")
    printer = kaio.module_compiler.print_ptx

    def swap_only(ptx: str) -> str:
        init_fence = "fence.proxy.async.shared::cta;\n$L_endif"
        assert init_fence in ptx
        return ptx.replace(init_fence, "fence.mbarrier_init.release.cluster;\n$L_endif", 1)

    monkeypatch.setattr(kaio.module_compiler, "print_ptx", lambda module, arch=None: swap_only(printer(module, arch)))
    got, want = run_q_loop(rng)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(kaio.module_compiler, "print_ptx", lambda module, arch=None: without_the_hoisted_fence(printer(module, arch)))
    with pytest.raises(kaio.KaioSimError, match=r"missing fence\.proxy\.async: a generic-proxy write"):
        run_q_loop(rng)
