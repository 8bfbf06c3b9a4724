"""ptx-strength-reduce: mul/div/rem by constants become shifts, masks and multiply-highs.

The magic numbers are checked against exact division in Python (every sequence is modelled
instruction by instruction); on the simulator, a kernel dividing by powers of two and by other
constants, signed and unsigned, 32 and 64 bits, agrees with the language's C-truncation
semantics on edge values (INT_MIN, -1, -2^k +- 1, the largest values) and random ones, with no
div or rem left in its PTX; a planted bug (floor instead of truncation, a magic multiplier one
off) is caught by the same comparison."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from kaio.dialects import ptx
from kaio.passes import ptx_strength_reduce as sr
from kaio.passes.magic_division import (
    SignedMagic,
    UnsignedMagic,
    sdiv_model,
    signed_magic,
    udiv_model,
    unsigned_magic,
)
from kaio.passes.ptx_optimize import PtxStrengthReducePass
from kaio.targets.ptx import toolchain
from xdsl.dialects.builtin import i32, i64

import kaio
from kaio.pipeline import kernel_pipeline

from .test_ptx_licm import expanded

# --------------------------------------------------------------------------- magic numbers


def trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("bits", [32, 64])
def test_magic_numbers_divide_exactly(bits: int) -> None:
    rng = np.random.default_rng()
    top = 1 << bits
    divisors = [3, 5, 6, 7, 10, 12, 25, 641, 1000, 7 << 20, (1 << 31) - 1, (1 << 31) + 1, top - 1, (top >> 1) - 1]
    divisors += [int(d) for d in rng.integers(3, 1 << 20, 40)] + [int(rng.integers(3, top - 1, dtype=np.uint64)) for _ in range(40)]
    for d in (d for d in divisors if d & (d - 1)):
        um = unsigned_magic(d, bits)
        xs = [0, 1, d - 1, d, d + 1, top - 1, top - 2, (top - 1) // d * d, (top - 1) // d * d - 1]
        xs += [int(x) for x in rng.integers(0, top - 1, 64, dtype=np.uint64)]
        assert all(udiv_model(x, um, bits) == x // d for x in xs), (d, um)
        if d < top >> 1:
            sm = signed_magic(d, bits)
            low = -(top >> 1)
            xs = [0, 1, -1, low, low + 1, -low - 1, d, -d, d - 1, 1 - d, d + 1, -d - 1]
            xs += [int(x) for x in rng.integers(low, -low, 64, dtype=np.int64 if bits == 64 else np.int32)]
            assert all(sdiv_model(x, sm, bits) == trunc_div(x, d) for x in xs), (d, sm)


def test_magic_numbers_are_the_known_ones() -> None:
    """Hacker's Delight's tables: /3, /7 (needs the add), /641 unsigned; /3, /7 signed."""
    assert unsigned_magic(3, 32) == UnsignedMagic(0xAAAAAAAB, 1, False)
    assert unsigned_magic(7, 32) == UnsignedMagic(0x24924925, 2, True)
    assert signed_magic(3, 32) == SignedMagic(0x55555556, 0, False)
    assert signed_magic(7, 32) == SignedMagic(0x92492493, 2, True)


def test_a_wrong_multiplier_is_caught() -> None:
    good = unsigned_magic(7, 32)
    bad = UnsignedMagic(good.multiplier - 1, good.shift, good.add)
    assert any(udiv_model(x, bad, 32) != x // 7 for x in range(0, 1 << 32, 9973))
    with pytest.raises(ValueError):
        unsigned_magic(8, 32)  # a power of two is the shift's business
    with pytest.raises(ValueError):
        signed_magic(2, 32)


# --------------------------------------------------------------------------- on small IR


def entry_with(op_cls: type[ptx.PtxInstr], spec: str, divisor: int, t=i32) -> ptx.EntryOp:  # type: ignore[no-untyped-def]
    """An entry computing ``x op divisor`` from a parameter and storing it."""
    bits = 32 if t == i32 else 64
    entry = ptx.EntryOp("k", [("k_x", f"u{bits}"), ("k_y", "u64")])
    x = ptx.LdOp(f"param.u{bits}", [], [t], symbol="k_x")
    y = ptx.LdOp("param.u64", [], [i64], symbol="k_y")
    d = ptx.ConstOp(divisor, t)
    op = op_cls(spec, [x.outs[0], d.result], [t])
    store = ptx.StOp(f"global.u{bits}", [y.outs[0], op.outs[0]])
    entry.body.block.add_ops([x, y, d, op, store])
    return entry


def names(entry: ptx.EntryOp) -> list[str]:
    return [f"{op.name[4:]}.{op.spec_text}" for op in entry.body.block.ops if isinstance(op, ptx.PtxInstr)]


def reduced(entry: ptx.EntryOp) -> list[str]:
    from xdsl.dialects.builtin import ModuleOp

    module = ModuleOp([entry])
    PtxStrengthReducePass().apply(None, module)  # type: ignore[arg-type]
    module.verify()
    return names(entry)[2:-1]  # between the parameter loads and the store


def test_unsigned_powers_of_two_become_a_shift_and_a_mask() -> None:
    assert reduced(entry_with(ptx.DivOp, "u32", 16)) == ["shr.u32"]
    assert reduced(entry_with(ptx.RemOp, "u32", 16)) == ["and.b32"]
    assert reduced(entry_with(ptx.MulOp, "lo.s32", 8)) == ["shl.b32"]
    assert reduced(entry_with(ptx.DivOp, "u64", 1 << 40, i64)) == ["shr.u64"]


def test_signed_powers_of_two_round_toward_zero() -> None:
    assert reduced(entry_with(ptx.DivOp, "s32", 8)) == ["shr.s32", "shr.u32", "add.s32", "shr.s32"]
    assert reduced(entry_with(ptx.RemOp, "s32", 8)) == ["shr.s32", "shr.u32", "add.s32", "and.b32", "sub.s32"]
    assert reduced(entry_with(ptx.DivOp, "s32", 2)) == ["shr.u32", "add.s32", "shr.s32"]  # bias = sign bit


def test_a_non_negative_dividend_divides_unsigned() -> None:
    """max(x, 0), a mask, a thread index: no bias, no sign correction."""
    from xdsl.dialects.builtin import ModuleOp

    for make in (
        lambda x, e: ptx.MaxOp("s32", [x, e(0)], [i32]),
        lambda x, e: ptx.AndOp("b32", [x, e(0x7FFF)], [i32]),
        lambda x, e: ptx.ShrOp("u32", [x, e(1)], [i32]),
    ):
        entry = entry_with(ptx.DivOp, "s32", 32)
        ops = list(entry.body.block.ops)
        x, div = ops[0].outs[0], ops[3]
        consts: list[ptx.ConstOp] = []

        def const(v: int, consts: list[ptx.ConstOp] = consts) -> object:
            consts.append(ptx.ConstOp(v, i32))
            return consts[-1].result

        bounded = make(x, const)
        entry.body.block.insert_ops_before([*consts, bounded], div)
        div.operands[0] = bounded.outs[0]
        PtxStrengthReducePass().apply(None, ModuleOp([entry]))  # type: ignore[arg-type]
        assert names(entry)[-2] == "shr.u32" and "shr.s32" not in names(entry)
    assert reduced(entry_with(ptx.DivOp, "s32", 32))[-1] == "shr.s32"  # x itself may be negative


def test_other_constants_take_a_multiply_high() -> None:
    assert reduced(entry_with(ptx.DivOp, "u32", 3)) == ["mul.hi.u32", "shr.u32"]
    assert reduced(entry_with(ptx.DivOp, "u32", 7)) == ["mul.hi.u32", "sub.u32", "shr.u32", "add.u32", "shr.u32"]
    assert reduced(entry_with(ptx.RemOp, "s32", 10)) == ["mul.hi.s32", "shr.s32", "shr.u32", "add.s32", "mad.lo.s32"]


def test_what_it_leaves_alone() -> None:
    """Runtime divisors, a divisor of 1 (ptx-fold's), 0, negative ones, 16-bit words, guarded ops."""
    for op_cls, spec, d in [(ptx.DivOp, "s32", 1), (ptx.DivOp, "u32", 0), (ptx.DivOp, "s32", -4), (ptx.RemOp, "s32", -3)]:
        assert reduced(entry_with(op_cls, spec, d)) == [f"{op_cls.name[4:]}.{spec}"]
    assert reduced(entry_with(ptx.MulOp, "hi.u32", 8)) == ["mul.hi.u32"]


def test_without_magic_only_powers_of_two_change() -> None:
    from xdsl.dialects.builtin import ModuleOp

    for d, want in [(3, ["div.u32"]), (4, ["shr.u32"])]:
        entry = entry_with(ptx.DivOp, "u32", d)
        PtxStrengthReducePass(magic=False).apply(None, ModuleOp([entry]))  # type: ignore[arg-type]
        assert names(entry)[2:-1] == want


# --------------------------------------------------------------------------- on the simulator

POW2 = {32: [1, 2, 4, 8, 64, 1 << 20, 1 << 30], 64: [2, 8, 1 << 33, 1 << 62]}
OTHER = {32: [3, 7, 10, 641, 1000, (1 << 31) - 1], 64: [3, 7, 1000, (1 << 40) + 7]}
UNSIGNED_ONLY = {32: [1 << 31, 3 << 30, (1 << 32) - 1], 64: [1 << 63, (1 << 64) - 1]}


@dataclass(frozen=True)
class Case:
    bits: int
    is_signed: bool

    @property
    def type_name(self) -> str:
        return f"{'i' if self.is_signed else 'u'}{self.bits}"

    @property
    def divisors(self) -> list[int]:
        extra = [] if self.is_signed else UNSIGNED_ONLY[self.bits]
        return POW2[self.bits] + OTHER[self.bits] + extra

    def dtype(self) -> np.dtype:
        return np.dtype(self.type_name.replace("i", "int").replace("u", "uint"))

    def values(self, rng: np.random.Generator) -> np.ndarray:
        info = np.iinfo(self.dtype())
        edges = {int(info.min), int(info.max), 0, 1, int(info.max) - 1, -1, int(info.min) + 1}
        for d in self.divisors:
            edges |= {d - 1, d, d + 1, -d - 1, -d, 1 - d}
        edges = {v for v in edges if info.min <= v <= info.max}
        extra = rng.integers(info.min, info.max, 256 - len(edges), dtype=self.dtype(), endpoint=True)
        return np.concatenate([np.array(sorted(edges), dtype=self.dtype()), extra])


CASES = [Case(32, True), Case(32, False), Case(64, True), Case(64, False)]


def kernel_source(case: Case) -> str:
    t = case.type_name
    lines = [
        "@kaio.gpu_kernel(block_size=128)",
        f"def divide(x: Array[{t}], q: MutArray[{t}], r: MutArray[{t}], n: i32):",
        "    i = i32(thread_idx_x() + block_idx_x() * block_dim_x())",
        "    if i < n:",
        "        v = x[i]",
    ]
    for j, d in enumerate(case.divisors):
        lines += [f"        q[i + {j} * n] = v // {t}({d})", f"        r[i + {j} * n] = v % {t}({d})"]
    return "import kaio\nfrom kaio.prelude import *\n" + "\n".join(lines) + "\n"


def load_kernel(tmp_path: Path, case: Case) -> ModuleType:
    name = f"kaio_strength_reduce_{case.type_name}"
    path = tmp_path / f"{name}.py"
    path.write_text(kernel_source(case))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run(dev: kaio.Device, kernel, case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    n, m = x.size, len(case.divisors)
    poison = np.full(n * m, 0x5A5A5A5A, dtype=case.dtype())
    q, r = dev.alloc_from(poison), dev.alloc_from(poison)
    kernel[(n // 128,), (128,)](dev.alloc_from(x), q, r, n)
    return q.to_host().reshape(m, n), r.to_host().reshape(m, n)


def expected(case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C truncation, in Python integers (exact at every width)."""
    q = [[trunc_div(int(v), d) for v in x] for d in case.divisors]
    r = [[int(v) - trunc_div(int(v), d) * d for v in x] for d in case.divisors]
    mask = (1 << case.bits) - 1

    def as_bits(rows: list[list[int]]) -> np.ndarray:
        return np.array([[v & mask for v in row] for row in rows], dtype=np.uint64)

    return as_bits(q), as_bits(r)


def mismatches(case: Case, x: np.ndarray, q: np.ndarray, r: np.ndarray) -> int:
    """Wrong quotients and remainders, compared as bit patterns."""
    want_q, want_r = expected(case, x)
    width = np.uint64 if case.bits == 64 else np.uint32
    got_q, got_r = q.view(width).astype(np.uint64), r.view(width).astype(np.uint64)
    return int((got_q != want_q).sum() + (got_r != want_r).sum())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.type_name)
def test_division_by_constants_on_the_simulator(dev: kaio.Device, rng: np.random.Generator, tmp_path: Path, case: Case) -> None:
    kernel = load_kernel(tmp_path, case).divide
    ptx_text = kaio.compile(kernel, "sm_80").ptx
    assert not re.search(r"\b(div|rem)\.[su](32|64)\b", ptx_text), "every constant divisor is reduced"
    assert "mul.hi" in ptx_text and "shr.s" * case.is_signed in ptx_text
    if toolchain.find_ptxas() is not None:
        toolchain.assemble(ptx_text, "sm_80")
    x = rng.permutation(case.values(rng))
    x = np.resize(x, 256)
    q, r = run(dev, kernel, case, x)
    assert mismatches(case, x, q, r) == 0


@pytest.mark.parametrize("planted", ["floor", "magic"])
def test_a_planted_bug_is_caught(dev: kaio.Device, rng: np.random.Generator, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch, planted: str) -> None:  # fmt: skip
    """Signed division by 2^k without the bias (Python's floor) and a multiplier one too small:
    the simulator comparison sees both."""
    case = Case(32, True)
    real_quotient, real_magic = sr._pow2_quotient, sr.signed_magic

    def floor_quotient(e, x, k, bits, is_signed, want_rem):  # type: ignore[no-untyped-def]
        if is_signed and not want_rem:  # an arithmetic shift rounds toward -inf
            return e(ptx.ShrOp, f"s{bits}", [x, k], bits)
        return real_quotient(e, x, k, bits, is_signed, want_rem)

    def magic_one_off(d: int, bits: int) -> SignedMagic:
        m = real_magic(d, bits)
        return SignedMagic(m.multiplier - 1, m.shift, m.add)

    if planted == "floor":
        monkeypatch.setattr(sr, "_pow2_quotient", floor_quotient)
    else:
        monkeypatch.setattr(sr, "signed_magic", magic_one_off)

    @dataclass(frozen=True)
    class Planted(PtxStrengthReducePass):
        name = f"test-planted-{planted}"  # its own pipeline string: no cached PTX is reused

    kernel = load_kernel(tmp_path, case).divide.with_pipeline(lambda arch: expanded(kernel_pipeline(arch), strength_reduce=Planted()))
    x = np.resize(rng.permutation(case.values(rng)), 256)
    q, r = run(dev, kernel, case, x)
    assert mismatches(case, x, q, r) > 0
