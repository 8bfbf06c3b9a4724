"""The ptx dialect on its own: verifiers, MLIR round trip, PTX text that ptxas accepts."""

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp, f32, i1, i32, i64
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from kaio.dialects import ptx
from kaio.errors import KaioTargetError
from kaio.targets.ptx import toolchain
from kaio.targets.ptx.printer import print_ptx


def build_saxpy() -> ModuleOp:
    entry = ptx.EntryOp(
        "saxpy",
        [("saxpy_x", "u64"), ("saxpy_y", "u64"), ("saxpy_alpha", "f32"), ("saxpy_n", "u32")],
        maxntid=(256, 1, 1),
    )
    ops: list = []

    def emit(op):
        ops.append(op)
        return op.outs[0] if isinstance(op, ptx.PtxInstr) and op.outs else getattr(op, "result", None)

    x = emit(ptx.LdOp("param.u64", [], [i64], symbol="saxpy_x"))
    y = emit(ptx.LdOp("param.u64", [], [i64], symbol="saxpy_y"))
    alpha = emit(ptx.LdOp("param.f32", [], [f32], symbol="saxpy_alpha"))
    n = emit(ptx.LdOp("param.u32", [], [i32], symbol="saxpy_n"))
    tid = emit(ptx.MovOp("u32", [], [i32], symbol="%tid.x"))
    bid = emit(ptx.MovOp("u32", [], [i32], symbol="%ctaid.x"))
    bdim = emit(ptx.MovOp("u32", [], [i32], symbol="%ntid.x"))
    i = emit(ptx.MadOp("lo.s32", [bid, bdim, tid], [i32]))
    p = emit(ptx.SetpOp("ge.u32", [i, n], [i1]))
    ops.append(ptx.BraOp("", guard=p, symbol="L_done"))
    four = emit(ptx.ConstOp(4, i32))
    off = emit(ptx.MulOp("wide.u32", [i, four], [i64]))
    gx = emit(ptx.CvtaOp("to.global.u64", [x], [i64]))
    gy = emit(ptx.CvtaOp("to.global.u64", [y], [i64]))
    ax = emit(ptx.AddOp("s64", [gx, off], [i64]))
    ay = emit(ptx.AddOp("s64", [gy, off], [i64]))
    vx = emit(ptx.LdOp("global.f32", [ax], [f32]))
    vy = emit(ptx.LdOp("global.f32", [ay], [f32]))
    r = emit(ptx.FmaOp("rn.f32", [alpha, vx, vy], [f32]))
    ops.append(ptx.StOp("global.f32", [ay, r]))
    ops.append(ptx.LabelOp("L_done"))
    ops.append(ptx.RetOp(""))
    entry.body.block.add_ops(ops)
    return ModuleOp([entry])


def context() -> Context:
    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(ptx.Ptx)
    return ctx


def test_saxpy_verifies_and_round_trips():
    module = build_saxpy()
    module.verify()
    text = str(module)
    assert "ptx.fma rn.f32" in text
    parsed = Parser(context(), text).parse_module()
    parsed.verify()
    assert str(parsed) == text


def test_saxpy_prints_ptx_with_immediates():
    text = print_ptx(build_saxpy(), "sm_80")
    assert ".version 7.0" in text and ".target sm_80" in text
    assert "mul.wide.u32 \t" not in text  # tabs only in .reg declarations
    assert "mul.wide.u32 %rd" in text and ", 4;" in text  # the constant is inlined
    assert "@%p1 bra $L_done;" in text
    assert ".maxntid 256, 1, 1" in text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_saxpy(arch):
    if toolchain.find_ptxas() is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 not installed")
    report = toolchain.assemble(print_ptx(build_saxpy(), arch), arch)
    assert report.spill_stores.get("saxpy", 0) == 0
    assert report.registers["saxpy"] > 0


def test_verifier_rejects_width_mismatch():
    a = ptx.ConstOp(1, i32)
    bad = ptx.AddOp("s64", [a.result, a.result], [i64])
    with pytest.raises(VerifyException, match="64-bit register"):
        ModuleOp([a, bad]).verify()


def test_verifier_rejects_a_32_bit_global_address():
    a = ptx.ConstOp(1, i32)
    bad = ptx.LdOp("global.f32", [a.result], [f32])
    with pytest.raises(VerifyException, match=r"ld\.global\.f32: address must be 64-bit"):
        ModuleOp([a, bad]).verify()
    b = ptx.ConstOp(1, i32)
    ModuleOp([b, ptx.LdOp("shared.f32", [b.result], [f32])]).verify()  # 32-bit is fine for shared


def test_verifier_rejects_unknown_modifier():
    a = ptx.ConstOp(1, i32)
    bad = ptx.AddOp("banana.s32", [a.result, a.result], [i32])
    with pytest.raises(VerifyException, match="unknown modifier"):
        ModuleOp([a, bad]).verify()


def test_cp_async_needs_sm80():
    entry = ptx.EntryOp("k", [("k_p", "u64")])
    src = ptx.LdOp("param.u64", [], [i64], symbol="k_p")
    dst = ptx.ConstOp(0, i32)
    size = ptx.ConstOp(16, i32)
    copy = ptx.CpAsyncOp("cg.shared.global", [dst.result, src.outs[0], size.result])
    entry.body.block.add_ops([src, dst, size, copy, ptx.RetOp("")])
    module = ModuleOp([entry])
    module.verify()
    with pytest.raises(KaioTargetError, match="sm_80"):
        print_ptx(module, "sm_75")
    assert "cp.async.cg.shared.global [%r1], [%rd1], 16;" in print_ptx(module, "sm_80")


def test_local_array_declaration_round_trips_and_assembles():
    entry = ptx.EntryOp("k", [("k_p", "u64")])
    local = ptx.LocalDeclOp("k_stack", 64, 8)
    base = ptx.MovOp("u64", [], [i64], symbol="k_stack")
    value = ptx.ConstOp(3, i32)
    store = ptx.StOp("local.u32", [base.outs[0], value.result], offset=8)
    entry.body.block.add_ops([local, base, value, store, ptx.RetOp("")])
    module = ModuleOp([entry])
    module.verify()
    text = str(module)
    assert str(Parser(context(), text).parse_module()) == text
    out = print_ptx(module, "sm_80")
    assert ".local .align 8 .b8 k_stack[64];" in out and "st.local.u32 [%rd1+8]" in out
    if toolchain.find_ptxas() is not None:
        toolchain.assemble(out, "sm_80")


def test_requirements_are_kept_per_op_class_and_spec():
    """The printer's per-(class, spec) cache gives what each op says: an f32 add printed first
    does not make a later bf16 add (sm_90, PTX 7.8) look free, nor the reverse."""
    from kaio.dialects.ptx_base import spec_requirements

    a = ptx.ConstOp(1, i32)
    b = ptx.ConstOp(1, i32)
    plain = ptx.AddOp("f32", [a.result, a.result], [i32])
    half = ptx.AddOp("bf16", [b.result, b.result], [i32])
    for op in (plain, half, plain, half):
        assert spec_requirements(op) == tuple(op.requirements())
    assert spec_requirements(plain) == () and spec_requirements(half)[0].min_sm == 90

    def module_with(op_spec: str) -> ModuleOp:
        entry = ptx.EntryOp("k", [])
        x = ptx.MovOp("u32", [], [i32], symbol="%tid.x")
        add = ptx.AddOp(op_spec, [x.outs[0], x.outs[0]], [i32])
        entry.body.block.add_ops([x, add, ptx.RetOp("")])
        return ModuleOp([entry])

    assert "add.s32" in print_ptx(module_with("s32"), "sm_80")
    with pytest.raises(KaioTargetError, match="sm_90"):
        print_ptx(module_with("bf16"), "sm_80")
