"""The Hopper instructions of the ptx dialect: verifiers, MLIR round trip, PTX text that ptxas
accepts for sm_90a, and the target checks (wgmma on sm_90a only, mbarrier waits from sm_90)."""

import pytest
from kaio.dialects import ptx
from kaio.dialects import ptx_hopper as hp
from kaio.targets.ptx import toolchain
from kaio.targets.ptx.printer import print_ptx
from xdsl.dialects.builtin import ModuleOp, f32, i1, i32, i64
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from kaio.errors import KaioTargetError

from .test_ptx import context


def build_hopper(a_in_registers: bool = False, n: int = 64) -> ModuleOp:
    entry = ptx.EntryOp("hopper", [("hopper_tmap", "u64"), ("hopper_out", "u64")])
    ops: list = [ptx.SharedDeclOp("hopper_smem", 16384, 1024), ptx.SharedDeclOp("hopper_bar", 8, 8)]

    def emit(op):
        ops.append(op)
        return op.outs[0] if isinstance(op, ptx.PtxInstr) and op.outs else getattr(op, "result", None)

    def const(value, t=i32):
        return emit(ptx.ConstOp(value, t))

    tmap = emit(ptx.LdOp("param.u64", [], [i64], symbol="hopper_tmap"))
    out = emit(ptx.LdOp("param.u64", [], [i64], symbol="hopper_out"))
    smem = emit(ptx.MovOp("u32", [], [i32], symbol="hopper_smem"))
    bar = emit(ptx.MovOp("u32", [], [i32], symbol="hopper_bar"))
    ops.append(hp.SetmaxnregOp("inc.sync.aligned.u32", [const(240)]))
    elect = hp.ElectSyncOp("", [const(-1)], [i32, i1])
    ops.append(elect)
    leader = elect.outs[1]
    ops.append(hp.MbarrierInitOp("shared::cta.b64", [bar, const(1)], guard=leader))
    ops.append(ptx.BarSyncOp("", [const(0)]))
    ops.append(hp.MbarrierArriveExpectTxOp("shared::cta.b64", [bar, const(8192)], [i64], guard=leader))
    load = "2d.shared::cluster.global.mbarrier::complete_tx::bytes"
    ops.append(hp.CpAsyncBulkTensorOp(load, [smem, tmap, const(0), const(64), bar], guard=leader))
    ops.append(ptx.LabelOp("L_wait"))
    done = emit(hp.MbarrierTryWaitParityOp("shared::cta.b64", [bar, const(0)], [i1]))
    ops.append(ptx.BraOp("", guard=done, negate=True, symbol="L_wait"))
    acc = [emit(ptx.ConstOp(0.0, f32)) for _ in range(n // 2)]
    desc_a = emit(ptx.CvtOp("u64.u32", [smem], [i64]))
    desc_b = emit(ptx.AddOp("s64", [desc_a, const(512, i64)], [i64]))
    a = [emit(ptx.LdOp("shared.b32", [smem], [i32], offset=4 * k)) for k in range(4)] if a_in_registers else [desc_a]
    ops.append(hp.WgmmaFenceOp("sync.aligned"))
    scale_d = emit(ptx.SetpOp("ne.u32", [smem, const(0)], [i1]))
    ops.append(hp.WgmmaMmaAsyncOp(f"sync.aligned.m64n{n}k16.f32.f16.f16", acc, a, desc_b, scale_d, trans_b=1))
    ops.append(hp.WgmmaCommitOp("sync.aligned"))
    ops.append(hp.WgmmaWaitOp("sync.aligned", [const(0)]))
    for k, v in enumerate(acc):
        ops.append(ptx.StOp("global.f32", [out, v], offset=4 * k))
    ops.append(hp.FenceProxyAsyncOp("shared::cta"))
    ops.append(hp.CpAsyncBulkOp("global.shared::cta.bulk_group", [out, smem, const(256)]))
    ops.append(hp.CpAsyncBulkOp("shared::cluster.global.mbarrier::complete_tx::bytes", [smem, out, const(256), bar]))
    ops.append(hp.CpAsyncBulkTensorOp("2d.global.shared::cta.bulk_group", [tmap, const(0), const(0), smem]))
    ops.append(hp.CpAsyncBulkCommitOp(""))
    ops.append(hp.CpAsyncBulkWaitOp("read", [const(0)]))
    ops.append(ptx.RetOp(""))
    entry.body.block.add_ops(ops)
    return ModuleOp([entry])


@pytest.mark.parametrize("a_in_registers", [False, True])
def test_hopper_ops_round_trip_and_assemble_for_sm90a(a_in_registers):
    module = build_hopper(a_in_registers)
    module.verify()
    text = str(module)
    assert '"2d.shared::cluster.global.mbarrier::complete_tx::bytes"' in text
    parsed = Parser(context(), text).parse_module()
    parsed.verify()
    assert str(parsed) == text
    code = print_ptx(module, "sm_90a")
    assert ".target sm_90a" in code and ".version 8.0" in code
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {0, 64}], [%r2];" in code
    assert "mbarrier.arrive.expect_tx.shared::cta.b64 %rd" in code
    assert "elect.sync %r3|%p1, -1;" in code
    assert ", 1, 1, 0, 1;" in code if not a_in_registers else ", 1, 1, 1;" in code
    if toolchain.find_ptxas() is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 not installed")
    report = toolchain.assemble(code, "sm_90a")
    assert report.spill_stores.get("hopper", 0) == 0


def test_wgmma_needs_sm90a_and_mbarrier_wait_sm90():
    module = build_hopper()
    with pytest.raises(KaioTargetError, match=r"setmaxnreg needs sm_90a.*the target is sm_90\b"):
        print_ptx(module, "sm_90")
    wait_only = ModuleOp([])
    bar = ptx.ConstOp(0, i32)
    wait_only.body.block.add_ops([bar, hp.MbarrierTryWaitParityOp("shared::cta.b64", [bar.result, bar.result], [i1])])
    with pytest.raises(KaioTargetError, match="mbarrier.try_wait.parity needs sm_90"):
        print_ptx(wait_only, "sm_80")
    with pytest.raises(KaioTargetError) as info:
        ptx.check_target(module, 90, "sm_90")
    assert info.value.min_sm == 90 and "sm_90a" in str(info.value)


@pytest.mark.parametrize(
    "n, a_count, error",
    [(72, 1, None), (260, 1, "unknown modifier"), (64, 2, "four 32-bit registers")],
)
def test_wgmma_verifier(n, a_count, error):
    acc = [ptx.ConstOp(0.0, f32) for _ in range(min(n, 256) // 2)]
    a = [ptx.ConstOp(0, i64 if a_count == 1 else i32) for _ in range(a_count)]
    b = ptx.ConstOp(0, i64)
    p = ptx.ConstOp(1, i1)
    op = hp.WgmmaMmaAsyncOp(f"sync.aligned.m64n{n}k16.f32.bf16.bf16", [c.result for c in acc], [x.result for x in a], b.result, p.result)
    module = ModuleOp([*acc, *a, b, p, op])
    if error is None:
        module.verify()
    else:
        with pytest.raises(VerifyException, match=error):
            module.verify()
