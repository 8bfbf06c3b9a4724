"""if/elif/else, conditional expressions, short-circuit, loops, break/continue, early return."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import i1, i32

from kaio.dialects import kernel as kd

Load = Callable[[str], ModuleType]

CMPI = {
    0: "eq",
    1: "ne",
    2: "slt",
    3: "sle",
    4: "sgt",
    5: "sge",
    6: "ult",
    7: "ule",
    8: "ugt",
    9: "uge",
}


def walk(ir: Any) -> list[Any]:
    return list(ir.module.walk())


def predicates(ops: Any) -> list[str]:
    return [CMPI[op.predicate.value.data] for op in ops if isinstance(op, arith.CmpiOp)]


def top_level(ir: Any) -> list[Any]:
    return list(ir.func.body.block.ops)


def test_if_elif_else_merges_the_assigned_variable(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], s: i32):
            v = 0.0
            if s < 0:
                v = -1.0
            elif s == 0:
                v = x[1]
            else:
                v = x[2] * 2.0
            x[0] = v
        """
    )
    ir = m.k.build()
    ifs = [op for op in walk(ir) if isinstance(op, scf.IfOp)]
    assert len(ifs) == 2
    outer = next(op for op in top_level(ir) if isinstance(op, scf.IfOp))
    assert [str(r.type) for r in outer.results] == ["f32"]
    store = next(op for op in walk(ir) if isinstance(op, kd.StoreOp))
    assert store.value is outer.results[0]


def test_compile_time_condition_prunes_the_dead_branch(load: Load) -> None:
    m = load(
        """
        DEBUG = False

        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], MODE: kaio.constexpr = 1):
            if DEBUG:
                x[0] = 1.0
            if MODE == 1:
                x[1] = 2.0
            elif MODE == 2:
                x[1] = x[5]
            else:
                x[1] = 4.0
        """
    )
    ir = m.k.build()
    assert not any(isinstance(op, scf.IfOp | kd.LoadOp) for op in walk(ir))
    assert len([op for op in walk(ir) if isinstance(op, kd.StoreOp)]) == 1
    assert any(isinstance(op, kd.LoadOp) for op in walk(m.k.build({"MODE": 2})))


def test_conditional_expression_guards_the_load(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: Array[f32], y: MutArray[f32], n: u32):
            i = thread_idx_x()
            y[i] = x[i] if i < n else 0.0
        """
    )
    ir = m.k.build()
    ifs = [op for op in walk(ir) if isinstance(op, scf.IfOp)]
    assert len(ifs) == 1 and [str(r.type) for r in ifs[0].results] == ["f32"]
    assert any(isinstance(op, kd.LoadOp) for op in ifs[0].true_region.walk())
    assert not any(isinstance(op, arith.SelectOp) for op in walk(ir))


def test_conditional_expression_without_side_effects_is_a_select(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[f32], a: f32, b: f32):
            y[0] = a * 2.0 if a > b else b + 1.0
        """
    )
    ir = m.k.build()
    assert not any(isinstance(op, scf.IfOp) for op in walk(ir))
    assert len([op for op in walk(ir) if isinstance(op, arith.SelectOp)]) == 1


def test_and_short_circuits_around_a_load(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: Array[f32], y: MutArray[f32], n: u32):
            i = thread_idx_x()
            if i < n and x[i] > 0.0:
                y[i] = 1.0
        """
    )
    ir = m.k.build()
    top = top_level(ir)
    sc = [op for op in top if isinstance(op, scf.IfOp)]
    assert len(sc) == 2, "one scf.if computes the `and`, one is the statement"
    cond_if, stmt_if = sc
    assert [r.type for r in cond_if.results] == [i1]
    assert any(isinstance(op, kd.LoadOp) for op in cond_if.true_region.walk())
    assert not any(isinstance(op, kd.LoadOp) for op in top), "x[i] is never loaded unguarded"
    assert stmt_if.cond is cond_if.results[0]


def test_or_and_not_and_pure_operands(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[i32], a: i32, b: i32):
            if a < 0 or not (b > 0 and a != b):
                y[0] = 1
        """
    )
    ir = m.k.build()
    names = [op.name for op in walk(ir)]
    assert names.count("scf.if") == 1, "pure operands combine with andi/ori, not scf.if"
    assert "arith.ori" in names and "arith.andi" in names and "arith.xori" in names


def test_or_short_circuits_around_a_load(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: Array[i32], y: MutArray[i32], n: u32):
            i = thread_idx_x()
            y[0] = i32(i >= n or x[i] == 0)
        """
    )
    ir = m.k.build()
    cond_if = next(op for op in top_level(ir) if isinstance(op, scf.IfOp))
    assert [op.name for op in cond_if.true_region.walk()] == ["scf.yield"]  # `or` already true
    assert any(isinstance(op, kd.LoadOp) for op in cond_if.false_region.walk())


def test_chained_comparison_evaluates_the_middle_once(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: Array[i32], y: MutArray[i32], lo: i32, hi: i32):
            if lo <= x[0] < hi:
                y[0] = 1
        """
    )
    ir = m.k.build()
    assert len([op for op in walk(ir) if isinstance(op, kd.LoadOp)]) == 1
    assert predicates(walk(ir)) == ["sle", "slt"]


def test_range_loop_with_signed_constant_step_is_scf_for(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], n: i32):
            acc = 0.0
            count = 0
            for i in range(2, n, 3):
                acc += x[i]
                count += 1
            x[0] = acc / f32(count)
        """
    )
    ir = m.k.build()
    loop = next(op for op in walk(ir) if isinstance(op, scf.ForOp))
    assert loop.lb.owner.value.value.data == 2 and loop.step.owner.value.value.data == 3
    assert [str(r.type) for r in loop.results] == ["f32", "i32"]
    assert loop.body.block.args[0].type == i32


def test_u32_range_loop_compares_unsigned(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[u32], n: u32):
            s = u32(0)
            for i in range(n):
                s += i
            x[0] = s
        """
    )
    ir = m.k.build()
    assert not any(isinstance(op, scf.ForOp) for op in walk(ir))
    loop = next(op for op in walk(ir) if isinstance(op, scf.WhileOp))
    assert predicates(loop.before_region.walk()) == ["ult"]
    assert "arith.addi" in [op.name for op in loop.after_region.walk()]


def test_negative_and_runtime_steps(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[i32], n: i32, m: u32, step: i32):
            s = 0
            for i in range(n, 0, -2):
                s += i
            for j in range(m, 0, -1):
                s += 1
            for q in range(0, n, step):
                s += q
            x[0] = s
        """
    )
    ir = m.k.build()
    loops = [op for op in top_level(ir) if isinstance(op, scf.WhileOp)]
    assert len(loops) == 3
    assert predicates(loops[0].before_region.walk()) == ["sgt"]
    assert predicates(loops[1].before_region.walk()) == ["ugt"]
    assert "arith.subi" in [op.name for op in loops[1].after_region.walk()], (
        "u32 counts down by subtracting"
    )
    # A runtime step: (step > 0 and i < n) or (step < 0 and i > n).
    assert sorted(predicates(loops[2].before_region.walk())) == ["sgt", "sgt", "slt", "slt"]


def test_break_and_continue_lower_to_flags(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[i32], n: i32):
            s = 0
            for i in range(n):
                if x[i] < 0:
                    continue
                if x[i] > 100:
                    break
                s += x[i]
            x[0] = s
        """
    )
    ir = m.k.build()
    loop = next(op for op in walk(ir) if isinstance(op, scf.WhileOp))
    assert [str(t) for t in loop.result_types] == ["i32", "i32", "i1"]  # i, s, the break flag
    before = [op.name for op in loop.before_region.walk()]
    assert "arith.xori" in before and "arith.andi" in before, "the break flag stops the loop"
    # After `continue`, the rest of the body runs under one guard; after `break` under another.
    body_ifs = [op for op in loop.after_region.block.ops if isinstance(op, scf.IfOp)]
    assert len(body_ifs) == 1
    nested = [op for op in body_ifs[0].true_region.walk() if isinstance(op, scf.IfOp)]
    assert len(nested) == 1


def test_continue_only_keeps_scf_for(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[i32], n: i32):
            for i in range(n):
                if x[i] == 0:
                    continue
                x[i] = 1
        """
    )
    ir = m.k.build()
    assert any(isinstance(op, scf.ForOp) for op in walk(ir))
    assert not any(isinstance(op, scf.WhileOp) for op in walk(ir))


def test_while_loop_carries_changed_variables(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], n: u32):
            i = thread_idx_x()
            total = 0.0
            while i < n:
                total += x[i]
                i += block_dim_x()
            x[0] = total
        """
    )
    ir = m.k.build()
    loop = next(op for op in walk(ir) if isinstance(op, scf.WhileOp))
    assert [str(t) for t in loop.result_types] == ["f32", "i32"]  # total, i
    assert predicates(loop.before_region.walk()) == ["ult"]


def test_early_return_guards_the_rest_of_the_kernel(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], n: u32):
            i = thread_idx_x()
            if i >= n:
                return
            x[i] = 1.0
            x[i + 1] = 2.0
        """
    )
    ir = m.k.build()
    top = top_level(ir)
    assert not any(isinstance(op, kd.StoreOp) for op in top)
    guard = next(op for op in top if isinstance(op, scf.IfOp))
    assert len([op for op in guard.true_region.walk() if isinstance(op, kd.StoreOp)]) == 2
    negation = guard.cond.owner
    assert isinstance(negation, arith.XOrIOp) and isinstance(negation.lhs.owner, arith.CmpiOp)


def test_return_inside_a_loop_stops_the_loop_and_the_kernel(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[i32], n: i32):
            for i in range(n):
                if x[i] == 0:
                    return
                x[i] = 1
            x[0] = 7
        """
    )
    ir = m.k.build()
    loop = next(op for op in walk(ir) if isinstance(op, scf.WhileOp))
    after = [op for op in top_level(ir) if isinstance(op, scf.IfOp)]
    assert len(after) == 1 and after[0].cond.owner is not None
    assert any(isinstance(op, kd.StoreOp) for op in after[0].true_region.walk())
    assert len(loop.results) == 2  # the loop variable and the return flag


def test_code_after_unconditional_exit_is_not_compiled(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[i32], n: i32):
            for i in range(n):
                x[i] = 1
                break
                x[i] = 2
            return
            x[0] = 3
        """
    )
    ir = m.k.build()
    stores = [op for op in walk(ir) if isinstance(op, kd.StoreOp)]
    assert len(stores) == 1


def test_static_range_unrolls_with_a_compile_time_variable(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], N: kaio.constexpr = 4):
            t = shared_mem(f32, N)
            for j in static_range(N):
                t[j] = f32(j * j)
            for j in static_range(N - 1, -1, -1):
                x[j] = t[j]
        """
    )
    ir = m.k.build()
    assert not any(isinstance(op, scf.ForOp | scf.WhileOp) for op in walk(ir))
    loads = [op for op in walk(ir) if isinstance(op, kd.LoadOp)]
    assert [op.indices[0].owner.value.value.data for op in loads] == [3, 2, 1, 0]
    stores = [op for op in walk(ir) if isinstance(op, kd.StoreOp) and op in top_level(ir)]
    values = [op.value.owner.value.value.data for op in stores[:4]]
    assert values == [0.0, 1.0, 4.0, 9.0]


def test_break_in_static_range_with_runtime_condition_guards_later_iterations(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[i32]):
            for j in static_range(3):
                if x[j] == 0:
                    break
                x[j] = 1
        """
    )
    ir = m.k.build()
    assert len([op for op in walk(ir) if isinstance(op, kd.StoreOp)]) == 3
    assert not any(isinstance(op, scf.WhileOp | scf.ForOp) for op in walk(ir))


def test_tuple_assignment_swaps(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], n: i32):
            a = x[0]
            b = x[1]
            for i in range(n):
                a, b = b, a + b
            x[0] = a
        """
    )
    ir = m.k.build()
    loop = next(op for op in walk(ir) if isinstance(op, scf.ForOp))
    y = loop.body.block.last_op
    assert isinstance(y, scf.YieldOp)
    _, b_arg = loop.body.block.args[1:]
    assert y.operands[0] is b_arg
    assert isinstance(y.operands[1].owner, arith.AddfOp)


def test_loop_skipped_when_constant_bounds_are_empty(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], N: kaio.constexpr = 0):
            for i in range(N):
                x[i] = 1.0
        """
    )
    assert not any(isinstance(op, scf.ForOp | kd.StoreOp) for op in walk(m.k.build()))
    assert any(isinstance(op, scf.ForOp) for op in walk(m.k.build({"N": 3})))


def test_annotated_augmented_and_comment_statements(load: Load) -> None:
    m = load(
        '''
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], i: u32, j: i32):
            """A docstring, and a bare `...`, compile to nothing."""
            ...
            t = shared_mem(f32, (4, 4))
            acc: f32 = 0
            t[i, j] = x[0]
            t[i, j] -= 2.0
            acc += t[i, j]
            x[1] = acc
        '''
    )
    ir = m.k.build()
    ops = [op.name for op in walk(ir) if op.parent_op() is ir.func]
    assert ops.count("kernel.load") == 3 and ops.count("kernel.store") == 3
    assert "arith.subf" in ops and "arith.addf" in ops
    sub = next(op for op in walk(ir) if isinstance(op, arith.SubfOp))
    assert sub.rhs.owner.value.value.data == 2.0
    add = next(op for op in walk(ir) if isinstance(op, arith.AddfOp))
    assert add.lhs.owner.value.value.data == 0.0, "`acc: f32 = 0` is an f32 zero"
    texts = [op.text.data for op in walk(ir) if isinstance(op, kd.SourceLocOp)]
    assert not any('"""' in t or t == "..." for t in texts)
