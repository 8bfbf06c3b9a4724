"""ptx-fold: constant folding, identities, local value numbering and dead code on the ptx dialect.

The folder is checked against the simulator (the executable model of the ISA): one entry
computes each instruction on operands loaded from memory and again on constants that
ptx-fold folds; both land side by side and must agree bit for bit, over wrapping, clamped
shifts, truncating division, widening and narrowing conversions. A planted bug (floor division
in the folder) breaks that agreement."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.dialects import ptx
from kaio.passes import ptx_fold
from kaio.passes.ptx_optimize import PtxFoldPass
from kaio.targets.ptx import toolchain
from kaio.targets.ptx.printer import print_ptx
from kaio.targets.sim import Simulator
from xdsl.dialects.builtin import ModuleOp, f32, i1, i32, i64
from xdsl.ir import SSAValue


class Entry:
    """A ``ptx.entry k(in, out)`` built op by op; ``load(slot)`` reads in[slot] (8-byte slots)."""

    def __init__(self) -> None:
        self.entry = ptx.EntryOp("k", [("k_in", "u64"), ("k_out", "u64")])
        self.block = self.entry.body.block
        self.inp = self.op(ptx.LdOp("param.u64", [], [i64], symbol="k_in"))
        self.out = self.op(ptx.LdOp("param.u64", [], [i64], symbol="k_out"))
        self.stores = 0

    def op(self, op: ptx.PtxInstr | ptx.ConstOp | ptx.LabelOp | ptx.RegOp) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def const(self, value: int, t=i32) -> SSAValue:  # type: ignore[no-untyped-def]
        return self.op(ptx.ConstOp(value, t))

    def load(self, slot: int, t=i32) -> SSAValue:  # type: ignore[no-untyped-def]
        return self.op(ptx.LdOp(f"global.u{32 if t == i32 else 64}", [self.inp], [t], offset=8 * slot))

    def store(self, v: SSAValue) -> int:
        bits = 32 if v.type == i32 else 64
        self.op(ptx.StOp(f"global.u{bits}", [self.out, v], offset=8 * self.stores))
        self.stores += 1
        return self.stores - 1

    def fold(self, window: int = 64) -> ModuleOp:
        module = ModuleOp([self.entry])
        PtxFoldPass(window=window).apply(None, module)  # type: ignore[arg-type]
        module.verify()
        return module

    def instrs(self) -> list[str]:
        return [f"{op.name[4:]}.{op.spec_text}" for op in self.block.ops if isinstance(op, ptx.PtxInstr)][2:]


S32_EDGES = [0, 1, -1, 7, -7, 2, -2, 0x7FFFFFFF, -0x80000000, 0x12345678, 40, 32, 31, 5]
S64_EDGES = [0, 1, -1, 7, -7, 3, (1 << 63) - 1, -(1 << 63), 0x123456789ABCDEF, 40, 64, 63]

# (instruction class, spec, operand count, operand width, result width)
CASES = [
    (ptx.AddOp, "s32", 2, 32, 32), (ptx.SubOp, "s32", 2, 32, 32), (ptx.MulOp, "lo.s32", 2, 32, 32),
    (ptx.MulOp, "hi.s32", 2, 32, 32), (ptx.MulOp, "hi.u32", 2, 32, 32), (ptx.MulOp, "wide.s32", 2, 32, 64),
    (ptx.MulOp, "wide.u32", 2, 32, 64), (ptx.DivOp, "s32", 2, 32, 32), (ptx.DivOp, "u32", 2, 32, 32),
    (ptx.RemOp, "s32", 2, 32, 32), (ptx.RemOp, "u32", 2, 32, 32), (ptx.ShlOp, "b32", 2, 32, 32),
    (ptx.ShrOp, "s32", 2, 32, 32), (ptx.ShrOp, "u32", 2, 32, 32), (ptx.AndOp, "b32", 2, 32, 32),
    (ptx.OrOp, "b32", 2, 32, 32), (ptx.XorOp, "b32", 2, 32, 32), (ptx.MinOp, "s32", 2, 32, 32),
    (ptx.MinOp, "u32", 2, 32, 32), (ptx.MaxOp, "s32", 2, 32, 32), (ptx.MaxOp, "u32", 2, 32, 32),
    (ptx.NegOp, "s32", 1, 32, 32), (ptx.NotOp, "b32", 1, 32, 32), (ptx.MadOp, "lo.s32", 3, 32, 32),
    (ptx.CvtOp, "s64.s32", 1, 32, 64), (ptx.CvtOp, "u64.u32", 1, 32, 64), (ptx.CvtOp, "u32.u64", 1, 64, 32),
    (ptx.CvtOp, "s32.s64", 1, 64, 32), (ptx.AddOp, "s64", 2, 64, 64), (ptx.MulOp, "lo.s64", 2, 64, 64),
    (ptx.MulOp, "hi.u64", 2, 64, 64), (ptx.MulOp, "hi.s64", 2, 64, 64), (ptx.DivOp, "s64", 2, 64, 64),
    (ptx.RemOp, "u64", 2, 64, 64), (ptx.ShrOp, "s64", 2, 64, 64), (ptx.ShlOp, "b64", 2, 64, 64),
    (ptx.MaxOp, "u64", 2, 64, 64),
]  # fmt: skip


def build_agreement(rng: np.random.Generator) -> tuple[Entry, np.ndarray, list[tuple[int, int, str]]]:
    """Each case twice: on loaded operands (left alone) and on constants (folded)."""
    e = Entry()
    inputs: list[int] = []
    pairs: list[tuple[int, int, str]] = []
    for cls, spec, n, width, out_width in CASES:
        edges = S32_EDGES if width == 32 else S64_EDGES
        for _ in range(6):
            values = [int(rng.choice(edges)) for _ in range(n)]
            if cls in (ptx.DivOp, ptx.RemOp) and values[1] == 0:
                values[1] = 3
            if cls in (ptx.ShlOp, ptx.ShrOp):
                values[1] = int(rng.choice([0, 1, 5, 31, 32, 40, 63, 64]))
            t = i32 if width == 32 else i64
            types = [t, i32] if cls in (ptx.ShlOp, ptx.ShrOp) else [t] * n
            loaded = []
            for v, vt in zip(values, types):
                loaded.append(e.load(len(inputs), vt))
                inputs.append(v & ((1 << 64) - 1) if vt == i64 else v & 0xFFFFFFFF)
            out_t = i32 if out_width == 32 else i64
            live = e.store(e.op(cls(spec, loaded, [out_t])))
            consts = [e.const(v, vt) for v, vt in zip(values, types)]
            folded = e.store(e.op(cls(spec, consts, [out_t])))
            pairs.append((live, folded, f"{cls.name[4:]}.{spec} {values}"))
    return e, np.array(inputs, dtype=np.uint64), pairs


def run_on_simulator(e: Entry, module: ModuleOp, inputs: np.ndarray) -> np.ndarray:
    sim = Simulator()
    text = print_ptx(module, "sm_80")
    if toolchain.find_ptxas() is not None:
        toolchain.assemble(text, "sm_80")
    inp = sim.memory.alloc(inputs.nbytes)
    sim.memory.write(inp, inputs)
    out = sim.memory.alloc(8 * e.stores)
    sim.memory.write(out, np.full(e.stores, 0xA5A5A5A5A5A5A5A5, dtype=np.uint64))  # poison
    sim.load(text).launch("k", (1, 1, 1), (1, 1, 1), [int(inp).to_bytes(8, "little"), int(out).to_bytes(8, "little")])
    return sim.memory.read(out, 8 * e.stores).view(np.uint64)


def disagreements(rng: np.random.Generator) -> list[str]:
    e, inputs, pairs = build_agreement(rng)
    module = e.fold()
    folded_left = [op for op in e.block.ops if isinstance(op, ptx.PtxInstr) and op.srcs and all(isinstance(v.owner, ptx.ConstOp) for v in op.srcs)]
    assert not [op for op in folded_left if not isinstance(op, ptx.StOp)], "every all-constant instruction folds"
    out = run_on_simulator(e, module, inputs)
    bad = []
    for live, folded, what in pairs:  # a 32-bit result leaves the same poison in both upper halves
        if out[live] != out[folded]:
            bad.append(f"{what}: simulator {int(out[live]):#x}, folded {int(out[folded]):#x}")
    return bad


def test_folding_agrees_with_the_simulator(rng: np.random.Generator) -> None:
    assert disagreements(rng) == []


def test_a_planted_folding_bug_is_caught(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ptx_fold, "_trunc_div", lambda a, b: a // b)  # Python's floor, not C's truncation
    assert any(w.startswith(("div.s", "rem.s")) for w in disagreements(rng))


# --------------------------------------------------------------------------- golden structure


def test_identities() -> None:
    e = Entry()
    x, y = e.load(0), e.load(1)
    p = e.op(ptx.SetpOp("lt.s32", [x, y], [i1]))
    zero, one = e.const(0), e.const(1)
    for op in [
        ptx.AddOp("s32", [x, zero], [i32]), ptx.MulOp("lo.s32", [x, one], [i32]), ptx.DivOp("u32", [x, one], [i32]),
        ptx.ShlOp("b32", [x, zero], [i32]), ptx.SelpOp("b32", [x, x, p], [i32]), ptx.OrOp("b32", [x, zero], [i32]),
        ptx.AndOp("b32", [x, e.const(-1)], [i32]),
    ]:  # fmt: skip
        e.store(e.op(op))  # each is x: its store reads x
    e.store(e.op(ptx.RemOp("u32", [x, one], [i32])))  # 0
    e.store(e.op(ptx.MadOp("lo.s32", [x, one, y], [i32])))  # x + y
    e.store(e.op(ptx.MadOp("lo.s32", [x, zero, y], [i32])))  # y
    added = e.op(ptx.AddOp("s32", [x, e.const(64)], [i32]))
    e.store(e.op(ptx.AndOp("b32", [added, e.const(15)], [i32])))  # x & 15: 64's low 4 bits are 0
    added = e.op(ptx.AddOp("s32", [x, e.const(72)], [i32]))
    e.store(e.op(ptx.AndOp("b32", [added, e.const(15)], [i32])))  # kept: 72 has bit 3
    e.fold()
    stores = [op for op in e.block.ops if isinstance(op, ptx.StOp)]
    assert all(s.srcs[1] is x for s in stores[:7])
    assert const_of(stores[7].srcs[1]) == 0
    assert e.instrs() == ["ld.global.u32", "ld.global.u32"] + ["st.global.u32"] * 8 + [
        "add.s32", "st.global.u32", "st.global.u32", "and.b32", "st.global.u32", "add.s32", "and.b32", "st.global.u32"]  # fmt: skip
    assert stores[9].srcs[1] is y


def const_of(v: SSAValue) -> int | None:
    owner = v.owner
    return owner.value.value.data if isinstance(owner, ptx.ConstOp) else None  # type: ignore[attr-defined]


def test_constants_move_second_and_floats_stay() -> None:
    e = Entry()
    x = e.load(0)
    e.store(e.op(ptx.AddOp("s32", [e.const(5), x], [i32])))
    a = e.op(ptx.ConstOp(1.5, f32))
    e.op(ptx.StOp("global.f32", [e.out, e.op(ptx.AddOp("f32", [a, a], [f32]))], offset=64))
    e.fold()
    add = next(op for op in e.block.ops if isinstance(op, ptx.AddOp) and op.spec_text == "s32")
    assert add.srcs[0] is x and const_of(add.srcs[1]) == 5
    assert "add.f32" in e.instrs()


def test_repeats_merge_within_a_straight_line_only() -> None:
    e = Entry()
    x, y = e.load(0), e.load(1)
    first = e.op(ptx.AddOp("s32", [x, y], [i32]))
    again = e.op(ptx.AddOp("s32", [x, y], [i32]))
    e.store(first)
    e.store(again)
    e.op(ptx.LabelOp("L_join"))
    after = e.op(ptx.AddOp("s32", [x, y], [i32]))  # another path may reach the label: kept
    e.store(after)
    reg = e.op(ptx.RegOp(i32))
    e.op(ptx.AssignOp("b32", [reg, x]))
    r1 = e.op(ptx.AddOp("s32", [reg, y], [i32]))
    e.op(ptx.AssignOp("b32", [reg, y]))
    r2 = e.op(ptx.AddOp("s32", [reg, y], [i32]))  # the register changed in between: kept
    e.store(r1)
    e.store(r2)
    dead = e.op(ptx.MulOp("lo.s32", [x, y], [i32]))  # nobody reads it: goes
    assert dead is not None
    e.fold()
    assert e.instrs().count("add.s32") == 4 and "mul.lo.s32" not in e.instrs()
    stores = [op for op in e.block.ops if isinstance(op, ptx.StOp)]
    assert stores[0].srcs[1] is stores[1].srcs[1]


def test_distant_repeats_stay_apart() -> None:
    """Merging them would keep the first result live across everything between (``window``)."""
    e = Entry()
    x, y = e.load(0), e.load(1)
    e.store(e.op(ptx.AddOp("s32", [x, y], [i32])))
    for slot in range(12):
        e.store(e.load(2 + slot))
    e.store(e.op(ptx.AddOp("s32", [x, y], [i32])))
    module = ModuleOp([e.entry])
    PtxFoldPass(window=8).apply(None, module)  # type: ignore[arg-type]
    assert e.instrs().count("add.s32") == 2
    PtxFoldPass().apply(None, module)  # type: ignore[arg-type]
    assert e.instrs().count("add.s32") == 2  # the default merges none
    PtxFoldPass(window=100).apply(None, module)  # type: ignore[arg-type]
    assert e.instrs().count("add.s32") == 1


def test_the_scalar_passes_come_after_lower_to_ptx() -> None:
    from kaio.pass_contracts import order_problems
    from kaio.pipeline import SCALAR_PASSES, Pipeline

    assert order_problems(Pipeline.parse("lower-to-ptx," + ",".join(SCALAR_PASSES)).passes) == []
    early = order_problems(Pipeline.parse("ptx-fold,ptx-licm,ptx-strength-reduce,lower-to-ptx").passes)
    assert len(early) == 3 and "'ptx-fold' runs before 'lower-to-ptx'" in early[0]
