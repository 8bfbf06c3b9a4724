"""ptx-licm: invariant instructions leave single-entry loops; loads only leave loops that write
nothing and synchronise nothing, and only when every trip executes them.

Golden structure on hand-built loops (what moves, what stays: loads past stores, barriers,
asynchronous copies, volatile loads, loads under a branch, guarded instructions, %clock, loops
entered from outside), and a kernel on the simulator whose loop reads what it stored the trip
before: correct with the pass, wrong when a planted bug lets the load out."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.dialects import ptx
from kaio.passes import ptx_licm
from kaio.passes.ptx_optimize import PtxFoldPass, PtxLicmPass, PtxStrengthReducePass
from kaio.passes.ptx_scalar import block_ops
from xdsl.dialects.builtin import ModuleOp, i1, i32, i64
from xdsl.ir import Block, Operation, SSAValue

import kaio
from kaio.pipeline import Pipeline, kernel_pipeline
from kaio.prelude import MutArray, thread_idx_x
from kaio.prelude import i32 as I32


class Loop:
    """``entry k(p)``: a prologue, then ``L_head: body; k += 1; @p bra L_head``."""

    def __init__(self) -> None:
        self.entry = ptx.EntryOp("k", [("k_p", "u64"), ("k_n", "u32")])
        self.block = self.entry.body.block
        self.p = self.add(ptx.LdOp("param.u64", [], [i64], symbol="k_p"))
        self.n = self.add(ptx.LdOp("param.u32", [], [i32], symbol="k_n"))
        self.k = self.add(ptx.RegOp(i32))
        self.add(ptx.AssignOp("b32", [self.k, self.const(0)]))
        self.add(ptx.LabelOp("L_head"))

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def const(self, v: int, t=i32) -> SSAValue:  # type: ignore[no-untyped-def]
        return self.add(ptx.ConstOp(v, t))

    def close(self) -> list[str]:
        """Add the latch, run ptx-licm; returns the op names from the label on."""
        nxt = self.add(ptx.AddOp("s32", [self.k, self.const(1)], [i32]))
        self.add(ptx.AssignOp("b32", [self.k, nxt]))
        more = self.add(ptx.SetpOp("lt.s32", [self.k, self.n], [i1]))
        self.add(ptx.BraOp("", guard=more, symbol="L_head"))
        module = ModuleOp([self.entry])
        PtxLicmPass().apply(None, module)  # type: ignore[arg-type]
        module.verify()
        return self.after_label()

    def names(self) -> list[str]:
        """Instructions and labels (constants left out: they move wherever they are needed)."""
        return [f"{op.name[4:]}.{op.spec_text}" if isinstance(op, ptx.PtxInstr) else op.name[4:]
                for op in self.block.ops if not isinstance(op, ptx.ConstOp | ptx.RegOp)]  # fmt: skip

    def after_label(self) -> list[str]:
        names = self.names()
        return names[names.index("label") :]

    def before_label(self) -> list[str]:
        names = self.names()
        return names[: names.index("label")]


LATCH = ["add.s32", "assign.b32", "setp.lt.s32", "bra."]


def test_invariant_math_leaves_and_variant_math_stays() -> None:
    lp = Loop()
    inv = lp.add(ptx.MulOp("lo.s32", [lp.n, lp.const(12)], [i32]))
    inv2 = lp.add(ptx.ShrOp("u32", [inv, lp.const(2)], [i32]))  # reads a moved value: moves too
    tid = lp.add(ptx.MovOp("u32", [], [i32], symbol="%tid.x"))  # fixed special register: moves
    clock = lp.add(ptx.MovOp("u32", [], [i32], symbol="%clock"))  # changes: stays
    var = lp.add(ptx.AddOp("s32", [lp.k, inv2], [i32]))  # reads the loop counter: stays
    total = lp.add(ptx.AddOp("s32", [var, lp.add(ptx.AddOp("s32", [tid, clock], [i32]))], [i32]))
    lp.add(ptx.StOp("global.u32", [lp.p, total]))
    after = lp.close()
    assert after == ["label", "mov.u32", "add.s32", "add.s32", "add.s32", "st.global.u32", *LATCH]
    assert lp.before_label()[-3:] == ["mul.lo.s32", "shr.u32", "mov.u32"]


def test_guarded_and_side_effecting_instructions_stay() -> None:
    lp = Loop()
    p = lp.add(ptx.SetpOp("lt.u32", [lp.n, lp.const(5)], [i1]))  # invariant: moves
    guarded = ptx.AddOp("s32", [lp.n, lp.const(3)], [i32], guard=p)
    lp.add(guarded)
    lp.add(ptx.StOp("global.u32", [lp.p, lp.n]))
    lp.add(ptx.AtomOp("global.add.u32", [lp.p, lp.n], [i32]))
    lp.add(ptx.BarSyncOp("", [lp.const(0)]))
    after = lp.close()
    assert after == ["label", "add.s32", "st.global.u32", "atom.global.add.u32", "bar.sync.", *LATCH]
    assert lp.before_label()[-1] == "setp.lt.u32"


@pytest.mark.parametrize("writer", ["store", "barrier", "cp.async", "none"])
def test_loads_stay_in_loops_that_write_or_synchronise(writer: str) -> None:
    lp = Loop()
    value = lp.add(ptx.LdOp("global.u32", [lp.p], [i32], offset=64))
    if writer == "store":
        lp.add(ptx.StOp("global.u32", [lp.p, value]))
    elif writer == "barrier":
        lp.add(ptx.BarSyncOp("", [lp.const(0)]))
    elif writer == "cp.async":
        shared = lp.add(ptx.MovOp("u32", [], [i32], symbol="buf"))
        lp.add(ptx.CpAsyncOp("cg.shared.global", [shared, lp.p, lp.const(16), lp.const(16)]))
    lp.add(ptx.AddOp("s32", [lp.k, value], [i32]))
    after = lp.close()
    if writer == "none":
        assert "ld.global.u32" in lp.before_label() and "ld.global.u32" not in after
    else:
        assert "ld.global.u32" in after


def test_only_loads_every_trip_executes_and_weak_loads_leave() -> None:
    lp = Loop()
    lp.add(ptx.LdOp("volatile.global.u32", [lp.p], [i32]))
    skip = lp.add(ptx.SetpOp("eq.u32", [lp.k, lp.const(3)], [i1]))
    lp.add(ptx.BraOp("", guard=skip, symbol="L_skip"))
    lp.add(ptx.LdOp("global.u32", [lp.p], [i32], offset=4))  # under a branch: a trip may skip it
    lp.add(ptx.LabelOp("L_skip"))
    after = lp.close()
    assert after.count("ld.volatile.global.u32") + after.count("ld.global.u32") == 2


def test_a_loop_entered_from_outside_is_left_alone() -> None:
    lp = Loop()
    block = lp.block
    head = next(op for op in block.ops if isinstance(op, ptx.LabelOp))
    block.insert_op_before(ptx.BraOp("", symbol="L_inside"), head)  # jumps into the body
    lp.add(ptx.MulOp("lo.s32", [lp.n, lp.const(3)], [i32]))
    lp.add(ptx.LabelOp("L_inside"))
    after = lp.close()
    assert "mul.lo.s32" in after


def test_nested_loops_hoist_through_both() -> None:
    lp = Loop()
    j = lp.add(ptx.RegOp(i32))
    lp.add(ptx.AssignOp("b32", [j, lp.const(0)]))
    lp.add(ptx.LabelOp("L_inner"))
    inv = lp.add(ptx.MulOp("lo.s32", [lp.n, lp.const(7)], [i32]))  # invariant in both loops
    outer_only = lp.add(ptx.AddOp("s32", [lp.k, lp.n], [i32]))  # varies with k only
    lp.add(ptx.StOp("global.u32", [lp.p, lp.add(ptx.AddOp("s32", [inv, outer_only], [i32]))]))
    nj = lp.add(ptx.AddOp("s32", [j, lp.const(1)], [i32]))
    lp.add(ptx.AssignOp("b32", [j, nj]))
    again = lp.add(ptx.SetpOp("lt.s32", [j, lp.n], [i1]))
    lp.add(ptx.BraOp("", guard=again, symbol="L_inner"))
    after = lp.close()
    assert "mul.lo.s32" in lp.before_label()
    inner = after[after.index("label", 1) :]
    assert after[: after.index("label", 1)] == ["label", "assign.b32", "add.s32", "add.s32"]  # k + n, then inv + it
    assert "mul.lo.s32" not in inner and inner[1] == "st.global.u32"


# --------------------------------------------------------------------------- on the simulator


@kaio.gpu_kernel(block_size=32)
def running_sum(x: MutArray[I32], out: MutArray[I32], n: I32, a: I32, b: I32):  # type: ignore[no-untyped-def]
    i = I32(thread_idx_x())
    acc = I32(0)
    for _ in range(n):
        acc += (a * b + i) // 4  # invariant: leaves the loop
        x[i] = x[i] + acc  # reads what the previous trip stored: must stay
    out[i] = acc


def expected(x: np.ndarray, n: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    x = x.astype(np.int64).copy()
    step = np.array([int((a * b + i) / 4) for i in range(32)], dtype=np.int64)  # C truncation
    acc = np.zeros(32, dtype=np.int64)
    for _ in range(n):
        acc += step
        x += acc
    return x.astype(np.int32), acc.astype(np.int32)


def expanded(pipeline: Pipeline, **planted: object) -> Pipeline:
    """``pipeline`` with its ptx-optimize stage as the three passes, one of them replaced."""
    passes = {"strength_reduce": PtxStrengthReducePass(), "licm": PtxLicmPass(), "fold": PtxFoldPass(), **planted}
    return Pipeline((*pipeline.without("ptx-optimize").passes, *passes.values()))  # type: ignore[arg-type]


def run(dev: kaio.Device, kernel, rng: np.random.Generator) -> tuple[bool, bool]:  # type: ignore[no-untyped-def]
    x = rng.integers(-1000, 1000, 32).astype(np.int32)
    n, a, b = 5, int(rng.integers(-50, 50)), int(rng.integers(1, 50))
    xs, out = dev.alloc_from(x), dev.alloc_from(np.full(32, 0x5A5A5A5A, np.int32))
    kernel[(1,), (32,)](xs, out, n, a, b)
    want_x, want_acc = expected(x, n, a, b)
    return bool((xs.to_host() == want_x).all()), bool((out.to_host() == want_acc).all())


def test_a_loop_reading_its_own_stores_on_the_simulator(dev: kaio.Device, rng: np.random.Generator) -> None:
    text = kaio.compile(running_sum, "sm_80").ptx
    loop = text[text.index("$L_") :]
    assert "div" not in loop and "ld.global" in loop
    assert run(dev, running_sum, rng) == (True, True)


def test_a_planted_bug_hoisting_the_load_is_caught(dev: kaio.Device, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ptx_licm, "_hoistable_load", lambda op, before_control, read_only: isinstance(op, ptx.LdOp) and "global" in op.spec_text)

    class Planted(PtxLicmPass):
        name = "test-planted-licm"  # its own pipeline string: no cached PTX is reused

    kernel = running_sum.with_pipeline(lambda arch: expanded(kernel_pipeline(arch), licm=Planted()))
    assert run(dev, kernel, rng)[0] is False


def test_block_ops_lists_the_block_as_it_is_now():
    """The one-walk list the scalar passes take of an entry: every op in order, and a block
    changed since a first call is listed as changed (no stale list kept per block)."""
    a, b, c = (ptx.ConstOp(n, i32) for n in range(3))
    block = Block([a, b])
    assert block_ops(block) == [a, b] == list(block.ops)
    block.add_op(c)
    b.detach()
    assert block_ops(block) == [a, c]


def test_repeats_merge_before_the_loop_and_in_its_body() -> None:
    """Two copies' bounds math: the moved repeats merge, so do the body's rows and compares
    reading them."""
    lp = Loop()
    rows = [lp.add(ptx.ShrOp("u32", [lp.n, lp.const(3)], [i32])) for _ in range(2)]  # invariant repeats
    k1 = lp.add(ptx.AddOp("s32", [lp.k, lp.const(1)], [i32]))  # reads the counter: stays
    row = [lp.add(ptx.AddOp("s32", [k1, r], [i32])) for r in rows]  # k + 1 + row, twice
    masks = [lp.add(ptx.SetpOp("lt.u32", [r, lp.n], [i1])) for r in row]
    for m in masks:
        lp.add(ptx.StOp("global.u32", [lp.p, lp.add(ptx.SelpOp("b32", [lp.const(16), lp.const(0), m], [i32]))]))
    for _ in range(2):  # reads the counter (a register an assign may change between them): stays
        lp.add(ptx.StOp("global.u32", [lp.p, lp.add(ptx.MulOp("lo.s32", [lp.k, lp.const(3)], [i32]))]))
    after = lp.close()
    assert after.count("mul.lo.s32") == 2
    assert lp.before_label().count("shr.u32") == 1
    assert after.count("setp.lt.u32") == 1 and after.count("selp.b32") == 1
    assert after.count("add.s32") == 2 + 1  # k + 1, one k + 1 + row, the latch's


def test_repeats_do_not_merge_across_a_label() -> None:
    lp = Loop()
    a = lp.add(ptx.AddOp("s32", [lp.n, lp.k], [i32]))
    lp.add(ptx.StOp("global.u32", [lp.p, a]))
    lp.add(ptx.LabelOp("L_join"))  # another path may enter here
    b = lp.add(ptx.MulOp("lo.s32", [a, lp.const(3)], [i32]))
    c = lp.add(ptx.MulOp("lo.s32", [a, lp.const(3)], [i32]))
    lp.add(ptx.StOp("global.u32", [lp.p, b]))
    lp.add(ptx.StOp("global.u32", [lp.p, c]))
    after = lp.close()
    assert after.count("mul.lo.s32") == 1  # the two after the label merge
    ops = block_ops(lp.block)
    label = next(i for i, op in enumerate(ops) if isinstance(op, ptx.LabelOp) and op.sym_name.data == "L_join")
    assert any(isinstance(op, ptx.MulOp) for op in ops[label:])  # and stay after it


def test_body_repeats_far_apart_stay() -> None:
    """A merged repeat lives from the first to the last use: far apart in a body they stay."""
    lp = Loop()
    k1 = lp.add(ptx.AddOp("s32", [lp.k, lp.const(1)], [i32]))
    first = lp.add(ptx.MulOp("lo.s32", [k1, lp.const(3)], [i32]))
    lp.add(ptx.StOp("global.u32", [lp.p, first]))
    for _ in range(ptx_licm.BODY_WINDOW):
        lp.add(ptx.StOp("global.u32", [lp.p, k1]))
    second = lp.add(ptx.MulOp("lo.s32", [k1, lp.const(3)], [i32]))
    lp.add(ptx.StOp("global.u32", [lp.p, second]))
    assert lp.close().count("mul.lo.s32") == 2


def test_repeat_keys_read_constants_by_value_and_other_values_by_identity() -> None:
    """Merge keys: two ``ptx.const`` of the same value and type are one key part; a computed
    value, a register and a block argument are themselves (a key that read them by value would
    merge instructions reading different registers)."""
    lp = Loop()
    three, three_again, three_wide = lp.const(3), lp.const(3), lp.const(3, i64)
    assert ptx_licm._by_value(three) == ptx_licm._by_value(three_again)
    assert ptx_licm._by_value(three) != ptx_licm._by_value(three_wide)
    shifted = lp.add(ptx.ShrOp("u32", [lp.n, three], [i32]))
    arg = Block(arg_types=[i32]).args[0]
    for v in (shifted, lp.k, lp.n, arg):
        assert ptx_licm._by_value(v) is v
