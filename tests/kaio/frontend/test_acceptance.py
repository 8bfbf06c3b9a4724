"""The acceptance kernels of the spine issue, built and checked at the IR level."""

# ruff: noqa: F405 - kernels use the names of `from kaio.prelude import *`, the public surface

from __future__ import annotations

import math

from xdsl.dialects import arith, scf
from xdsl.dialects import builtin as ir_types
from xdsl.dialects.builtin import MemRefType

import kaio
from kaio.compiled import KernelParam
from kaio.dialects import kernel as kd
from kaio.prelude import *  # noqa: F403
from kaio.prelude import f32 as kf32
from kaio.prelude import u32 as ku32

from acceptance_kernels import (
    block_sum,
    half_math,
    histogram,
    matmul,
    saxpy,
    silu_gate,
    vector_add,
    warp_sum,
)


def ops_of(ir: kaio.frontend.KernelIR) -> list[object]:
    return list(ir.module.walk())


def names(ir: kaio.frontend.KernelIR) -> list[str]:
    return [op.name for op in ir.module.walk()]


def test_every_acceptance_kernel_builds_one_verified_kernel_func() -> None:
    for k in (vector_add, saxpy, silu_gate, warp_sum, block_sum, matmul, histogram, half_math):
        ir = k.build()
        ir.module.verify()
        funcs = kd.kernel_funcs(ir.module)
        assert len(funcs) == 1 and funcs[0].sym_name.data == k.name
        assert isinstance(ir.module.body.block.last_op, kd.KernelFuncOp)


def test_saxpy_signature_and_body() -> None:
    ir = saxpy.build()
    func = ir.func
    assert [s.data for s in func.param_names] == ["x", "y", "alpha", "n"]
    assert func.block_shape == (256, 1, 1)
    assert list(func.function_type.inputs) == [
        kd.ArrayType(ir_types.f32, mutable=False),
        kd.ArrayType(ir_types.f32, mutable=True),
        ir_types.f32,
        ir_types.i32,
    ]
    assert saxpy.runtime_params == (
        KernelParam("x", kf32, is_array=True, mutable=False),
        KernelParam("y", kf32, is_array=True, mutable=True),
        KernelParam("alpha", kf32, is_array=False),
        KernelParam("n", ku32, is_array=False),
    )
    top = [op.name for op in func.body.block.ops]
    assert top[-2:] == ["scf.if", "kernel.return"]
    cmp = next(op for op in ops_of(ir) if isinstance(op, arith.CmpiOp))
    assert cmp.predicate.value.data == 6  # ult: u32 thread index against u32 n
    loads = [op for op in ops_of(ir) if isinstance(op, kd.LoadOp)]
    assert len(loads) == 2 and all(op.indices[0].type == ir_types.i64 for op in loads)
    ext = [op for op in ops_of(ir) if isinstance(op, arith.ExtUIOp)]
    assert ext, "u32 indices are zero-extended to i64"
    assert names(ir).count("kernel.store") == 1


def test_vector_add_has_two_loads_one_store_under_the_guard() -> None:
    ir = vector_add.build()
    guard = next(op for op in ir.func.body.block.ops if isinstance(op, scf.IfOp))
    inner = [op.name for op in guard.true_region.walk()]
    assert inner.count("kernel.load") == 2 and inner.count("kernel.store") == 1
    assert inner.count("arith.addf") == 1


def test_silu_gate_inlines_sigmoid_and_guards_the_rest_after_early_return() -> None:
    ir = silu_gate.build()
    n = names(ir)
    assert "math.exp" in n and n.count("arith.divf") == 1  # sigmoid inlined once
    assert n.count("arith.mulf") == 2
    top = [op for op in ir.func.body.block.ops]
    guard = [op for op in top if isinstance(op, scf.IfOp)]
    assert len(guard) == 1, "the statements after `return` run under one guard"
    inner = [op.name for op in guard[0].true_region.walk()]
    assert "kernel.load" in inner and "kernel.store" in inner
    assert not guard[0].false_region.blocks, "nothing runs on the exited path"
    assert not any(op.name == "kernel.load" for op in top)


def test_warp_shuffle_reduction_unrolls_five_shuffles_down() -> None:
    ir = warp_sum.build()
    shuffles = [op for op in ops_of(ir) if isinstance(op, kd.ShuffleOp)]
    assert len(shuffles) == 5
    assert all(op.mode.data == kd.ShuffleMode.DOWN and op.width.value.data == 32 for op in shuffles)
    offsets = [op.offset.owner.value.value.data for op in shuffles]  # type: ignore[union-attr]
    assert offsets == [16, 8, 4, 2, 1]
    atomics = [op for op in ops_of(ir) if isinstance(op, kd.AtomicRMWOp)]
    assert len(atomics) == 1 and atomics[0].combine.data == kd.Combine.ADDF
    # The guarded load is a scf.if, never a speculative load.
    assert any(isinstance(op, scf.IfOp) and op.results for op in ops_of(ir))


def test_block_reduction() -> None:
    ir = block_sum.build()
    red = [op for op in ops_of(ir) if isinstance(op, kd.BlockReduceOp)]
    assert (
        len(red) == 1
        and red[0].combine.data == kd.Combine.ADDF
        and red[0].result.type == ir_types.f32
    )


def test_tiled_matmul_with_2d_blocks_and_shared_tiles() -> None:
    ir = matmul.build()
    assert ir.func.block_shape == (16, 16, 1)
    allocs = [op for op in ops_of(ir) if isinstance(op, kd.SharedAllocOp)]
    assert len(allocs) == 2
    assert all(
        isinstance(a.result.type, MemRefType) and a.result.type.get_shape() == (16, 16)
        for a in allocs
    )
    assert ir.shared_bytes == 2 * 16 * 16 * 4
    fors = [op for op in ops_of(ir) if isinstance(op, scf.ForOp)]
    assert len(fors) == 1, "signed loop var, constant positive step: scf.for"
    loop = fors[0]
    assert [r.type for r in loop.results] == [ir_types.f32], "the accumulator is loop-carried"
    body = [op.name for op in loop.body.walk()]
    assert body.count("kernel.barrier") == 2
    shared_loads = [
        op
        for op in loop.body.walk()
        if isinstance(op, kd.LoadOp) and isinstance(op.ref.type, MemRefType)
    ]
    assert len(shared_loads) == 32, "static_range(16) unrolled: 16 x 2 shared loads"
    assert body.count("arith.addf") == 16


def test_histogram_uses_shared_and_global_atomics_with_unsigned_loops() -> None:
    ir = histogram.build()
    atomics = [op for op in ops_of(ir) if isinstance(op, kd.AtomicRMWOp)]
    assert len(atomics) == 2 and all(a.combine.data == kd.Combine.ADDI for a in atomics)
    assert isinstance(atomics[0].ref.type, MemRefType) and isinstance(
        atomics[1].ref.type, kd.ArrayType
    )
    whiles = [op for op in ops_of(ir) if isinstance(op, scf.WhileOp)]
    assert len(whiles) == 3, "u32 range loops and the while loop are scf.while"
    predicates = {
        op.predicate.value.data
        for w in whiles
        for op in w.before_region.walk()
        if isinstance(op, arith.CmpiOp)
    }
    assert predicates <= {6, 8}, "u32 loops compare unsigned (ult, ugt)"
    assert "arith.remui" in names(ir)


def test_f16_math_stays_f16_where_written() -> None:
    ir = half_math.build()
    ops = ops_of(ir)
    mulf = [op for op in ops if isinstance(op, arith.MulfOp)]
    assert mulf and all(op.result.type == ir_types.f16 for op in mulf)
    assert [op.result.type for op in ops if isinstance(op, arith.ExtFOp)] == [ir_types.f32]
    assert [op.result.type for op in ops if isinstance(op, arith.TruncFOp)] == [ir_types.f16]
    assert any(op.name == "math.tanh" and op.result.type == ir_types.f32 for op in ops)
    assert any(op.name == "math.absf" and op.result.type == ir_types.f16 for op in ops)
    const = [
        op for op in ops if isinstance(op, arith.ConstantOp) and op.result.type == ir_types.f16
    ]
    assert [c.value.value.data for c in const] == [1.0]  # the literal adapted to f16


def test_source_markers_map_statements_to_lines() -> None:
    ir = saxpy.build()
    locs = [op for op in ops_of(ir) if isinstance(op, kd.SourceLocOp)]
    texts = [op.text.data for op in locs]
    assert texts == [
        "i = thread_idx_x() + block_idx_x() * block_dim_x()",
        "if i < n:",
        "y[i] = alpha * x[i] + y[i]",
    ]
    decorator_line = saxpy.fn.__code__.co_firstlineno
    assert [op.line.value.data - decorator_line for op in locs] == [2, 3, 4]
    assert all(op.file.data == saxpy.fn.__code__.co_filename for op in locs)


def test_each_build_is_a_fresh_module() -> None:
    a, b = saxpy.build(), saxpy.build()
    assert a.module is not b.module and a.func is not b.func
    assert str(a.module) == str(b.module)


def test_literal_infinity_from_the_math_module() -> None:
    @kaio.gpu_kernel(block_size=32)
    def k(out: MutArray[f32]):
        out[0] = -math.inf

    stores = [op for op in k.build().module.walk() if isinstance(op, kd.StoreOp)]
    assert stores[0].value.owner.value.value.data == -math.inf  # type: ignore[union-attr]
