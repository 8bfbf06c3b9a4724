"""The wgmma, tma and mbarrier dialects: text round trip, verifiers, the descriptor helper, and
lower-to-ptx for sm_90a of a kernel a lower-to-wgmma pass would produce (TMA loads of 128B-
swizzled tiles, an mbarrier wait, four k16 wgmma steps, the epilogue), run on the simulator."""

import numpy as np
import pytest
from kaio.dialects import kernel as k
from kaio.dialects import mbarrier, tma, wgmma
from kaio.passes.lower_to_ptx import LowerToPtxPass
from kaio.targets.ptx import toolchain
from kaio.targets.ptx.printer import print_ptx
from kaio.targets.sim import Simulator
from kaio.targets.sim.ops_wgmma import Descriptor
from kaio.targets.sim.tensor_map import encode_tensor_map
from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import Builtin, ModuleOp, f16, f32, i8
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from kaio.errors import KaioTargetError


def test_matrix_descriptor_matches_the_isa_fields():
    d = wgmma.matrix_descriptor(0x1_2340, lbo=16, sbo=1024, swizzle="128B")
    assert d & 0x3FFF == 0x1234 and (d >> 16) & 0x3FFF == 1 and (d >> 32) & 0x3FFF == 64 and d >> 62 == 1
    decoded = Descriptor.decode(d)  # the simulator's reading of the same bits
    assert (decoded.start, decoded.lbo, decoded.sbo, decoded.span) == (0x1_2340, 16, 1024, 128)
    assert wgmma.matrix_descriptor(0, 0, 0, "32B") >> 62 == 3
    with pytest.raises(VerifyException, match="swizzle mode"):
        wgmma.matrix_descriptor(0, 16, 16, "16B")


def c32(b: Builder, v: int):
    return b.insert(arith.ConstantOp.from_int_and_width(v, 32)).result


def build_gemm_tile(n: int = 64) -> ModuleOp:
    """One warpgroup: D(64 x n) = A(64 x 64) @ B(64 x n), A and B^T K-major, 128B swizzle."""
    params = [("ta", k.ArrayType(i8, False)), ("tb", k.ArrayType(i8, False)), ("out", k.ArrayType(f32, True))]
    func = k.KernelFuncOp("gemm", [t for _, t in params], [p for p, _ in params], (128, 1, 1))
    b = Builder(InsertPoint.at_end(func.body.block))
    ta, tb, out = func.body.block.args
    bar = b.insert(mbarrier.AllocOp()).result
    a_buf = b.insert(tma.AllocOp(64 * 128)).result
    b_buf = b.insert(tma.AllocOp(n * 128)).result
    tid = b.insert(k.ThreadIdOp("x")).result
    zero = c32(b, 0)
    leader = b.insert(arith.CmpiOp(tid, zero, "eq")).result
    # the init is made visible to the async proxy (TMA completes on the barrier) before the barrier
    b.insert(scf.IfOp(leader, [], [mbarrier.InitOp(bar, 1), tma.FenceOp(), scf.YieldOp()]))
    b.insert(k.BarrierOp())
    nbytes = c32(b, (64 + n) * 128)
    loads = [
        mbarrier.ArriveExpectTxOp(bar, nbytes),
        tma.LoadOp(ta, [zero, zero], a_buf, bar),
        tma.LoadOp(tb, [zero, zero], b_buf, bar),
        scf.YieldOp(),
    ]
    b.insert(scf.IfOp(leader, [], loads))
    b.insert(mbarrier.WaitParityOp(bar, zero))
    da = b.insert(wgmma.DescriptorOp(a_buf, "128B", 16, 1024)).result
    db = b.insert(wgmma.DescriptorOp(b_buf, "128B", 16, 1024)).result
    acc = b.insert(wgmma.ZeroOp(n)).result
    b.insert(wgmma.FenceOp())
    for step in range(4):  # k16 steps inside the 128-byte swizzle atom: +32 bytes each
        a = b.insert(wgmma.AdvanceOp(da, 32 * step)).result if step else da
        bd = b.insert(wgmma.AdvanceOp(db, 32 * step)).result if step else db
        acc = b.insert(wgmma.MmaAsyncOp(acc, a, bd, f16)).result
    b.insert(wgmma.CommitGroupOp())
    (done,) = b.insert(wgmma.WaitGroupOp([acc], 0)).results_
    b.insert(wgmma.StoreOp(done, out, c32(b, n)))
    b.insert(k.ReturnOp())
    module = ModuleOp([func])
    module.verify()
    return module


def context() -> Context:
    ctx = Context()
    for d in (Builtin, k.Kernel, wgmma.Wgmma, tma.Tma, mbarrier.Mbarrier):
        ctx.load_dialect(d)
    from xdsl.dialects.arith import Arith
    from xdsl.dialects.scf import Scf

    ctx.load_dialect(Arith)
    ctx.load_dialect(Scf)
    return ctx


def test_hopper_dialects_round_trip():
    text = str(build_gemm_tile())
    assert 'wgmma.descriptor %' in text and 'swizzle "128B" lbo 16 sbo 1024' in text
    assert "tma.load %" in text and "mbarrier.wait_parity" in text
    parsed = Parser(context(), text).parse_module()
    parsed.verify()
    assert str(parsed) == text


@pytest.mark.parametrize("n", [64, 128])
def test_lowered_gemm_tile_runs_on_the_simulator(n):
    module = build_gemm_tile(n)
    LowerToPtxPass("sm_90a").apply(None, module)  # type: ignore[arg-type]
    module.verify()
    code = print_ptx(module, "sm_90a")
    assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16" in code
    if toolchain.find_ptxas() is not None:
        report = toolchain.assemble(code, "sm_90a")
        assert report.spill_stores.get("gemm", 0) == 0
        if toolchain.find_cuobjdump() is not None and toolchain.find_nvdisasm() is not None:
            sass = toolchain.disassemble(report.cubin)
            assert "HGMMA.64x" in sass and "UTMALDG.2D" in sass and "SYNCS" in sass
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 64)).astype(np.float16)
    bm = rng.standard_normal((64, n)).astype(np.float16)
    sim = Simulator()
    mem = sim.memory

    def put(data: np.ndarray) -> int:
        addr = mem.alloc(data.nbytes)
        mem.write(addr, np.ascontiguousarray(data))
        return addr

    bt = np.ascontiguousarray(bm.T)
    maps = [
        put(np.frombuffer(encode_tensor_map(put(x), 2, (64, x.shape[0]), (128,), (64, x.shape[0]), 3), dtype=np.uint8))
        for x in (a, bt)
    ]
    out = put(np.full((64, n), np.nan, dtype=np.float32))
    params = [np.uint64(p).tobytes() for p in (*maps, out)]
    sim.load(code).launch("gemm", 1, 128, params)
    got = mem.read(out, 64 * n * 4).view(np.float32).reshape(64, n)
    np.testing.assert_allclose(got, a.astype(np.float64) @ bm.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_wgmma_lowering_needs_sm90a():
    with pytest.raises(KaioTargetError, match="sm_90a"):
        LowerToPtxPass("sm_90").apply(None, build_gemm_tile())  # type: ignore[arg-type]


def test_dialect_verifiers():
    with pytest.raises(VerifyException, match="N is 8..256"):
        wgmma.AccType(100).verify()
    with pytest.raises(VerifyException, match="multiple of 16"):
        wgmma.AdvanceOp(arith.ConstantOp.from_int_and_width(0, 64).result, 8).verify_()
    with pytest.raises(VerifyException, match="power-of-two"):
        tma.AllocOp(64, 48).verify_()
    with pytest.raises(VerifyException, match="arrivals"):
        mbarrier.InitOp(mbarrier.AllocOp().result, 0).verify_()
