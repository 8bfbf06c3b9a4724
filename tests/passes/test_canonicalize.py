"""kaio's ``canonicalize`` (xDSL's with per-class look-ups kept) rewrites exactly as xDSL's."""

from __future__ import annotations

from typing import Any

import pytest
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i32
from xdsl.ir import Block, Region
from xdsl.transforms.canonicalize import CanonicalizePass as XdslCanonicalizePass

import kaio
from kaio import compiler, dtypes
from kaio.pass_manager import kaio_context
from kaio.passes.canonicalize import CanonicalizePass


def both(module: ModuleOp) -> tuple[str, str]:
    ours, theirs = module.clone(), module.clone()
    CanonicalizePass().apply(kaio_context(), ours)
    XdslCanonicalizePass().apply(kaio_context(), theirs)
    return str(ours), str(theirs)


def test_folds_removes_dead_code_and_applies_patterns_as_xdsl() -> None:
    two, three = arith.ConstantOp(IntegerAttr(2, i32)), arith.ConstantOp(IntegerAttr(3, i32))
    x = func.FuncOp("f", ((i32,), (i32,)), Region(Block(arg_types=[i32])))
    arg = x.body.block.args[0]
    folded = arith.AddiOp(two.result, three.result)  # folds to 5
    unit = arith.MuliOp(arg, arith.ConstantOp(IntegerAttr(1, i32)).result)  # x * 1 -> x
    dead = arith.SubiOp(arg, two.result)  # unused
    ops = [two, three, folded, unit.operands[1].owner, unit, dead, arith.AddiOp(unit.result, folded.result)]
    x.body.block.add_ops([*ops, func.ReturnOp(ops[-1].results[0])])  # type: ignore[arg-type]
    module = ModuleOp([x])
    ours, theirs = both(module)
    assert ours == theirs
    assert "arith.subi" not in ours and "arith.muli" not in ours  # the pass did work


def stage_before_canonicalize(kernel: Any, arch: str, **constexprs: Any) -> ModuleOp:
    built = kernel.build(constexprs)
    passes = compiler._resolve_pipeline(kernel, arch, None).passes  # pyright: ignore[reportPrivateUsage]
    at = next(i for i, p in enumerate(passes) if p.name == "canonicalize")
    for p in passes[:at]:
        p.apply(kaio_context(), built.module)
    assert isinstance(passes[at], CanonicalizePass)  # the pipelines use kaio's
    return built.module


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_library_matmul_tile_ir_canonicalizes_as_xdsl(arch: str) -> None:
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG, default_config
    from kaio.ops_library.matmul_kernel import MatmulKernel

    config = DEFAULT_CONFIG if arch == "sm_80" else default_config(True, (16, 16, 16), 2, arch=arch)
    module = stage_before_canonicalize(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), config), arch)
    ours, theirs = both(module)
    assert ours == theirs and ours != str(module)


def test_simt_kernel_pipeline_uses_it() -> None:
    @kaio.gpu_kernel(block_size=32)
    def copy(a: kaio.prelude.Array[kaio.prelude.f32], b: kaio.prelude.MutArray[kaio.prelude.f32]):
        b[kaio.prelude.thread_idx_x()] = a[kaio.prelude.thread_idx_x()] * 1.0

    module = stage_before_canonicalize(copy, "sm_80")
    ours, theirs = both(module)
    assert ours == theirs


def _ops_of_library_kernels() -> list[Any]:
    from kaio.ir_walk import ops_within
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG
    from kaio.ops_library.matmul_kernel import MatmulKernel

    module = stage_before_canonicalize(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG), "sm_80")
    return ops_within(module)


def test_would_be_trivially_dead_answers_as_xdsl_per_op() -> None:
    """The per-class answer (an op whose only effect traits are ``NoMemoryEffect``'s has no
    effect) is xDSL's answer for every op of a matmul's tile IR, effectful ones included."""
    from xdsl.transforms.dead_code_elimination import would_be_trivially_dead as xdsl_answer

    from kaio.passes import canonicalize as ours

    ops = _ops_of_library_kernels()
    answers = [(op.name, ours.would_be_trivially_dead(op), bool(xdsl_answer(op))) for op in ops]
    assert [a for a in answers if a[1] != a[2]] == []
    assert {a[1] for a in answers} == {True, False}  # both answers occur
    assert any(ours._may_die.get(type(op)) is None for op in ops)  # some classes ask the op


def test_a_class_answer_for_effectful_ops_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted bug: every class declared effect-free makes stores and barriers dead, which
    the comparison with xDSL's answer (and the canonicalized IR) catches."""
    from xdsl.transforms.dead_code_elimination import would_be_trivially_dead as xdsl_answer

    from kaio.passes import canonicalize as ours

    monkeypatch.setattr(ours, "_may_die", {})
    monkeypatch.setattr(ours, "_class_may_die", lambda cls: True)
    ops = _ops_of_library_kernels()
    assert any(ours.would_be_trivially_dead(op) != bool(xdsl_answer(op)) for op in ops)
