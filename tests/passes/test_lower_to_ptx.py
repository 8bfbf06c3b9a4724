"""lower-to-ptx on its own: kernel-dialect IR in, ptx-dialect IR out (and PTX ptxas accepts)."""

from collections.abc import Callable

import pytest
from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import arith, scf
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import ModuleOp, bf16, f16, f32, i32, i64

from kaio.dialects import kernel as k
from kaio.errors import KaioCompileError
from kaio.passes.lower_to_ptx import LowerToPtxPass
from kaio.targets.ptx import toolchain
from kaio.targets.ptx.printer import print_ptx


def make_kernel(params, body: Callable[[Builder, list], None], block=(256, 1, 1)) -> ModuleOp:
    types = [t for _, t in params]
    func = k.KernelFuncOp("k", types, [n for n, _ in params], block)
    b = Builder(InsertPoint.at_end(func.body.block))
    body(b, list(func.body.block.args))
    b.insert(k.ReturnOp())
    module = ModuleOp([func])
    module.verify()
    return module


def lower(module: ModuleOp, arch: str = "sm_80") -> ModuleOp:
    LowerToPtxPass(arch).apply(None, module)  # type: ignore[arg-type]
    module.verify()
    return module


def ops_named(module: ModuleOp, name: str) -> list:
    return [op for op in module.walk() if op.name == name]


def specs(module: ModuleOp, name: str) -> list[str]:
    return [op.spec.data for op in ops_named(module, name)]


def assemble(module: ModuleOp, arch: str = "sm_80") -> None:
    if toolchain.find_ptxas() is not None:
        toolchain.assemble(print_ptx(module, arch), arch)


def c32(b: Builder, v: int):
    return b.insert(arith.ConstantOp.from_int_and_width(v, 32)).result


def test_kernel_func_becomes_entry_with_params():
    module = lower(make_kernel([("x", k.ArrayType(f32, False)), ("n", i32)], lambda b, a: None))
    (entry,) = ops_named(module, "ptx.entry")
    assert entry.params == [("k_x", "u64"), ("k_n", "u32")]
    assert specs(module, "ptx.ld") == ["param.u64", "param.u32"]
    assert specs(module, "ptx.cvta") == ["to.global.u64"]
    assert not ops_named(module, "kernel.func")


def test_global_load_uses_widening_multiply():
    def body(b, args):
        x, y = args
        i = b.insert(k.ThreadIdOp("x")).result
        wide = b.insert(arith.ExtUIOp(i, i64)).result
        v = b.insert(k.LoadOp(x, [wide])).result
        b.insert(k.StoreOp(v, y, [wide]))

    module = lower(make_kernel([("x", k.ArrayType(f32, False)), ("y", k.ArrayType(f32, True))], body))
    assert "wide.u32" in specs(module, "ptx.mul")
    assert specs(module, "ptx.ld")[-1] == "global.f32"
    assert specs(module, "ptx.st") == ["global.f32"]
    assemble(module)


def test_constant_index_folds_into_offset():
    def body(b, args):
        (y,) = args
        three = b.insert(arith.ConstantOp.from_int_and_width(3, 64)).result
        b.insert(k.StoreOp(b.insert(arith.ConstantOp.from_int_and_width(7, 32)).result, y, [three]))

    module = lower(make_kernel([("y", k.ArrayType(i32, True))], body))
    (store,) = ops_named(module, "ptx.st")
    assert store.offset.value.data == 12


def test_if_with_results_assigns_one_register():
    def body(b, args):
        (y,) = args
        i = b.insert(k.ThreadIdOp("x")).result
        cond = b.insert(arith.CmpiOp(i, c32(b, 4), "ult")).result
        one, two = c32(b, 1), c32(b, 2)
        if_op = b.insert(scf.IfOp(cond, [i32], [scf.YieldOp(one)], [scf.YieldOp(two)]))
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(if_op.results[0], y, [zero]))

    module = lower(make_kernel([("y", k.ArrayType(i32, True))], body))
    assigns = ops_named(module, "ptx.assign")
    assert len(assigns) == 2 and assigns[0].srcs[0] is assigns[1].srcs[0]
    assert [op.symbol.data.split("_")[1] for op in ops_named(module, "ptx.bra")] == ["else", "endif"]
    assemble(module)


def test_for_loop_is_rotated_with_signed_compares():
    def body(b, args):
        (y,) = args
        lb, ub, step = c32(b, 0), b.insert(k.ThreadIdOp("x")).result, c32(b, 1)
        acc0 = b.insert(arith.ConstantOp.from_int_and_width(0, 32)).result
        loop_body = scf.ForOp(lb, ub, step, [acc0], [iv := _block([i32, i32])])
        iv_arg, acc = iv.args
        iv.add_ops([s := arith.AddiOp(acc, iv_arg), scf.YieldOp(s.result)])
        loop = b.insert(loop_body)
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(loop.results[0], y, [zero]))

    module = lower(make_kernel([("y", k.ArrayType(i32, True))], body))
    assert specs(module, "ptx.setp") == ["ge.s32", "lt.s32"]
    assert len(ops_named(module, "ptx.label")) == 2
    assemble(module)


def _block(types):
    from xdsl.ir import Block

    return Block(arg_types=types)


def test_while_loop_forwards_values():
    def body(b, args):
        (y,) = args
        start = b.insert(k.ThreadIdOp("x")).result
        before = _block([i32])
        after = _block([i32])
        limit = c32(b, 100)
        before.add_ops([cmp := arith.CmpiOp(before.args[0], limit, "ult"), scf.ConditionOp(cmp.result, before.args[0])])
        after.add_ops([d := arith.MuliOp(after.args[0], limit), scf.YieldOp(d.result)])
        loop = b.insert(scf.WhileOp([start], [i32], [before], [after]))
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(loop.results[0], y, [zero]))

    module = lower(make_kernel([("y", k.ArrayType(i32, True))], body))
    assert "lt.u32" in specs(module, "ptx.setp")
    assert len(ops_named(module, "ptx.bra")) == 2
    assemble(module)


@pytest.mark.parametrize(("arch", "native"), [("sm_80", False), ("sm_90", True)])
def test_bf16_add_is_native_only_on_sm90(arch, native):
    def body(b, args):
        a, y = args
        s = b.insert(arith.AddfOp(a, a)).result
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(s, y, [zero]))

    module = lower(make_kernel([("a", bf16), ("y", k.ArrayType(bf16, True))], body), arch)
    types = [spec.rsplit(".", 1)[-1] for spec in specs(module, "ptx.add")]  # after "rn."
    assert ("bf16" in types) == native
    assert ("f32" in types) == (not native)
    assemble(module, arch)


def test_f16_math_goes_through_f32_sfu():
    def body(b, args):
        a, y = args
        e = b.insert(xmath.ExpOp(a)).result
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(e, y, [zero]))

    module = lower(make_kernel([("a", f16), ("y", k.ArrayType(f16, True))], body))
    assert specs(module, "ptx.ex2") == ["approx.f32"]
    assert specs(module, "ptx.cvt") == ["f32.f16", "rn.f16.f32"]
    assemble(module)


def test_block_reduce_uses_shared_scratch_and_two_barriers():
    def body(b, args):
        a, y = args
        r = b.insert(k.BlockReduceOp("addf", a)).result
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(r, y, [zero]))

    module = lower(make_kernel([("a", f32), ("y", k.ArrayType(f32, True))], body, block=(128, 1, 1)))
    assert len(ops_named(module, "ptx.shared")) == 1
    assert len(ops_named(module, "ptx.bar.sync")) == 2
    assert len(ops_named(module, "ptx.shfl")) == 10
    assemble(module)


def test_warp_reduce_refuses_partial_warps():
    def body(b, args):
        (a,) = args
        b.insert(k.WarpReduceOp("addf", a))

    with pytest.raises(KaioCompileError, match="multiple of 32"):
        lower(make_kernel([("a", f32)], body, block=(48, 1, 1)))


def test_unknown_op_is_named():
    def body(b, args):
        b.insert(xmath.AtanOp(args[0]))

    with pytest.raises(KaioCompileError, match="math.atan"):
        lower(make_kernel([("a", f32)], body))


def test_shuffle_of_64_bit_value_splits_in_halves():
    def body(b, args):
        a, y = args
        s = b.insert(k.ShuffleOp("idx", a, c32(b, 0), c32(b, -1))).result
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(s, y, [zero]))

    module = lower(make_kernel([("a", i64), ("y", k.ArrayType(i64, True))], body))
    assert len(ops_named(module, "ptx.shfl")) == 2
    assemble(module)


def test_atomics_and_casts_assemble():
    def body(b, args):
        a, y = args
        i = b.insert(k.ThreadIdOp("x")).result
        wide = b.insert(arith.ExtUIOp(i, i64)).result
        b.insert(k.AtomicRMWOp("addf", a, y, [wide]))
        as_int = b.insert(arith.FPToSIOp(a, i32)).result
        back = b.insert(arith.SIToFPOp(as_int, f32)).result
        half = b.insert(arith.TruncFOp(back, f16)).result
        wider = b.insert(arith.ExtFOp(half, f32)).result
        cmp = b.insert(arith.CmpfOp(wider, a, "olt")).result
        sel = b.insert(arith.SelectOp(cmp, wider, a)).result
        b.insert(k.AtomicRMWOp("maxf" if False else "addf", sel, y, [wide]))

    module = lower(make_kernel([("a", f32), ("y", k.ArrayType(f32, True))], body))
    assert specs(module, "ptx.atom") == ["global.add.f32", "global.add.f32"]
    assert "rzi.s32.f32" in specs(module, "ptx.cvt")
    assemble(module)
