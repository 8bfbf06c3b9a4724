"""dp4a/dp2a in every signedness, lop3 with all 256 truth tables, prmt with sign replication:
the simulator against Python-integer models of the PTX ISA, and planted simulator bugs that
these tests must catch."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import Device, check_ptx
from .isa_int_models import M32, words
from .isa_int_models import dot_model as dot
from .isa_int_models import lop3_model as lop3
from .isa_int_models import prmt_model as prmt

DOT_FORMS = [(op, sa, sb, half) for op in ("dp4a", "dp2a") for sa in ("s32", "u32") for sb in ("s32", "u32")
             for half in (("",) if op == "dp4a" else (".lo", ".hi"))]  # fmt: skip


def run_dots(elementwise, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    n = 64
    a, b = words(rng, n), np.roll(words(rng, n), 5)
    c = np.concatenate([np.array([0x7FFFFFFF, 0x80000000, M32], np.uint32), rng.integers(0, 1 << 32, n - 3, dtype=np.uint64).astype(np.uint32)])
    body = "\n ".join(f"{op}{half}.{sa}.{sb} %d{i}, %a, %b, %c;" for i, (op, sa, sb, half) in enumerate(DOT_FORMS))
    out = elementwise(body, {"a": ("u32", a), "b": ("u32", b), "c": ("u32", c)}, {f"d{i}": "u32" for i in range(len(DOT_FORMS))})
    for i, (op, sa, sb, half) in enumerate(DOT_FORMS):
        want = [dot(int(x), int(y), int(z), sa == "s32", sb == "s32", 4 if op == "dp4a" else 2, half == ".hi") for x, y, z in zip(a, b, c)]
        assert [int(v) for v in out[f"d{i}"]] == want, (op, sa, sb, half)


def test_dp4a_and_dp2a_in_every_signedness(elementwise, rng) -> None:  # type: ignore[no-untyped-def]
    run_dots(elementwise, rng)


def run_prmt(elementwise, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    n = 96
    a, b = words(rng, n), words(rng, n)[::-1].copy()
    sel = rng.integers(0, 1 << 16, n).astype(np.uint32) | np.uint32(0x8888)  # every byte sign-replicated...
    sel[::2] &= np.uint32(0x7777)  # ... in half the threads, none in the others
    sel[:4] = [0x3210, 0x7654, 0xBA98, 0xF0E1]
    out = elementwise("prmt.b32 %d, %a, %b, %s;", {"a": ("u32", a), "b": ("u32", b), "s": ("u32", sel)}, {"d": "u32"})["d"]
    assert [int(v) for v in out] == [prmt(int(x), int(y), int(s)) for x, y, s in zip(a, b, sel)]


def test_prmt_with_sign_replication(elementwise, rng) -> None:  # type: ignore[no-untyped-def]
    run_prmt(elementwise, rng)


def lop3_kernel() -> str:
    """Each thread computes lop3 of its three words under all 256 tables, stored side by side."""
    lines = [
        ".version 8.0\n.target sm_80\n.address_size 64\n",
        ".visible .entry all_luts(.param .u64 p_a, .param .u64 p_b, .param .u64 p_c, .param .u64 p_out)",
        "{",
        "  .reg .b32 %t, %a, %b, %c, %d;",
        "  .reg .b64 %pa, %pb, %pc, %po, %off, %addr;",
        "  mov.u32 %t, %tid.x;",
        "  ld.param.u64 %pa, [p_a];\n  ld.param.u64 %pb, [p_b];\n  ld.param.u64 %pc, [p_c];\n  ld.param.u64 %po, [p_out];",
        "  mul.wide.u32 %off, %t, 4;",
        "  add.s64 %addr, %pa, %off;\n  ld.global.b32 %a, [%addr];",
        "  add.s64 %addr, %pb, %off;\n  ld.global.b32 %b, [%addr];",
        "  add.s64 %addr, %pc, %off;\n  ld.global.b32 %c, [%addr];",
        "  mul.wide.u32 %off, %t, 1024;\n  add.s64 %addr, %po, %off;",
    ]
    for lut in range(256):
        lines.append(f"  lop3.b32 %d, %a, %b, %c, {lut};\n  st.global.b32 [%addr+{4 * lut}], %d;")
    lines += ["  ret;", "}", ""]
    return "\n".join(lines)


def run_lop3(sim, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    ptx = lop3_kernel()
    check_ptx(ptx)
    dev = Device(sim)
    n = 32
    a, b, c = words(rng, n), np.roll(words(rng, n), 1), np.roll(words(rng, n), 2)
    out = dev.empty((n, 256), np.uint32)
    dev.launch(sim.load(ptx), "all_luts", (1, 1, 1), (n, 1, 1), dev.array(a), dev.array(b), dev.array(c), out)
    got = dev.read(out)
    for t in range(n):
        x, y, z = int(a[t]), int(b[t]), int(c[t])
        assert [int(v) for v in got[t]] == [lop3(x, y, z, lut) for lut in range(256)], t


def test_lop3_all_256_tables(sim, rng) -> None:  # type: ignore[no-untyped-def]
    run_lop3(sim, rng)


# --------------------------------------------------------------------------- planted bugs


def test_planted_bug_dp4a_ignoring_signedness_is_caught(elementwise, rng, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kaio.targets.sim import ops_bits

    real = ops_bits._lanes
    monkeypatch.setattr(ops_bits, "_lanes", lambda x, width, signed: real(x, width, True))
    with pytest.raises(AssertionError):
        run_dots(elementwise, rng)


def test_planted_bug_dp2a_hi_reading_the_low_bytes_is_caught(elementwise, rng, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kaio.targets.sim import ops_bits

    real = ops_bits._lanes

    def low_bytes_twice(x, width, signed):  # type: ignore[no-untyped-def]
        v = real(x, width, signed)
        return v[:2] * 2 if width == 8 else v

    monkeypatch.setattr(ops_bits, "_lanes", low_bytes_twice)
    with pytest.raises(AssertionError):
        run_dots(elementwise, rng)


def test_planted_bug_prmt_without_sign_replication_is_caught(elementwise, rng, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kaio.targets.sim import ops_bits

    real = ops_bits._prmt_select
    monkeypatch.setattr(ops_bits, "_prmt_select", lambda mode, c: [(s, None) for s, _ in real(mode, c)])
    with pytest.raises(AssertionError):
        run_prmt(elementwise, rng)


def test_planted_bug_lop3_with_its_inputs_swapped_is_caught(sim, rng, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A lop3 reading the table with a and c swapped agrees on symmetric tables only."""
    import dataclasses

    from kaio.targets.sim import instruction_table, ops_bits

    real = ops_bits.make_lop3

    def swapped(ins, mods, dc):  # type: ignore[no-untyped-def]
        d, a, b, c, lut = ins.operands
        return real(dataclasses.replace(ins, operands=(d, c, b, a, lut)), mods, dc)

    monkeypatch.setitem(instruction_table.INSTRUCTIONS, ("lop3", "int"), swapped)
    with pytest.raises(AssertionError):
        run_lop3(sim, rng)
