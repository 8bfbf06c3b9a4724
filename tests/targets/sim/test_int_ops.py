"""Integer and bit instructions against Python-integer references built from the PTX ISA's
pseudocode."""

from __future__ import annotations

import numpy as np
import pytest

M32, M64 = (1 << 32) - 1, (1 << 64) - 1


def s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def s64(v: int) -> int:
    v &= M64
    return v - (1 << 64) if v >> 63 else v


def ints(out: np.ndarray) -> list[int]:
    return [int(v) for v in out]


def edge_s32(rng: np.random.Generator, n: int = 96) -> np.ndarray:
    edges = [0, 1, -1, 2, -2, 7, 2**31 - 1, -(2**31), 2**30, -(2**30) - 5, 65535, -65536, 0x00FFFFFF, -0x00800000]
    return np.concatenate([np.array(edges, np.int32), rng.integers(-(2**31), 2**31, n - len(edges), dtype=np.int64).astype(np.int32)])


def test_add_sub_mul_mad_s32(elementwise, rng):
    a, b, c = edge_s32(rng), np.roll(edge_s32(rng), 5), edge_s32(rng)[::-1].copy()
    out = elementwise(
        "add.s32 %add, %a, %b;\n sub.s32 %sub, %a, %b;\n add.sat.s32 %sat, %a, %b;\n sub.sat.s32 %ssat, %a, %b;\n"
        " mul.lo.s32 %lo, %a, %b;\n mul.hi.s32 %hi, %a, %b;\n mul.hi.u32 %uhi, %a, %b;\n mul.wide.s32 %wide, %a, %b;\n"
        " mul.wide.u32 %uwide, %a, %b;\n mad.lo.s32 %mad, %a, %b, %c;\n mad.hi.s32 %madhi, %a, %b, %c;\n"
        " mad.hi.sat.s32 %madsat, %a, %b, %c;",
        {"a": ("s32", a), "b": ("s32", b), "c": ("s32", c)},
        {k: "s32" for k in ("add", "sub", "sat", "ssat", "lo", "hi", "uhi", "mad", "madhi", "madsat")} | {"wide": "s64", "uwide": "u64"},
    )
    A, B, C = (list(map(int, x)) for x in (a, b, c))
    clamp = lambda v: max(-(2**31), min(2**31 - 1, v))  # noqa: E731
    assert ints(out["add"]) == [s32(x + y) for x, y in zip(A, B)]
    assert ints(out["sub"]) == [s32(x - y) for x, y in zip(A, B)]
    assert ints(out["sat"]) == [clamp(x + y) for x, y in zip(A, B)]
    assert ints(out["ssat"]) == [clamp(x - y) for x, y in zip(A, B)]
    assert ints(out["lo"]) == [s32(x * y) for x, y in zip(A, B)]
    assert ints(out["hi"]) == [s32((x * y) >> 32) for x, y in zip(A, B)]
    assert ints(out["uhi"]) == [s32(((x & M32) * (y & M32)) >> 32) for x, y in zip(A, B)]
    assert ints(out["wide"]) == [x * y for x, y in zip(A, B)]
    assert ints(out["uwide"]) == [(x & M32) * (y & M32) for x, y in zip(A, B)]
    assert ints(out["mad"]) == [s32(x * y + z) for x, y, z in zip(A, B, C)]
    assert ints(out["madhi"]) == [s32(((x * y) >> 32) + z) for x, y, z in zip(A, B, C)]
    assert ints(out["madsat"]) == [clamp(((x * y) >> 32) + z) for x, y, z in zip(A, B, C)]


def test_64_bit_multiply_high(elementwise, rng):
    a = rng.integers(-(2**63), 2**63, 64, dtype=np.int64)
    b = rng.integers(-(2**63), 2**63, 64, dtype=np.int64)
    a[:4] = [-(2**63), -1, 2**63 - 1, 0]
    b[:4] = [-(2**63), -1, -(2**63), 5]
    out = elementwise(
        "mul.hi.s64 %hs, %a, %b;\n mul.hi.u64 %hu, %a, %b;\n mul.lo.s64 %lo, %a, %b;",
        {"a": ("s64", a), "b": ("s64", b)},
        {"hs": "s64", "hu": "u64", "lo": "s64"},
    )
    A, B = list(map(int, a)), list(map(int, b))
    assert ints(out["hs"]) == [s64((x * y) >> 64) for x, y in zip(A, B)]
    assert ints(out["hu"]) == [((x & M64) * (y & M64)) >> 64 for x, y in zip(A, B)]
    assert ints(out["lo"]) == [s64(x * y) for x, y in zip(A, B)]


def test_mul24_mad24(elementwise, rng):
    a, b, c = edge_s32(rng), np.roll(edge_s32(rng), 3), edge_s32(rng)[::-1].copy()
    out = elementwise(
        "mul24.lo.s32 %sl, %a, %b;\n mul24.hi.s32 %sh, %a, %b;\n mul24.lo.u32 %ul, %a, %b;\n mul24.hi.u32 %uh, %a, %b;\n"
        " mad24.lo.s32 %ml, %a, %b, %c;",
        {"a": ("s32", a), "b": ("s32", b), "c": ("s32", c)},
        {"sl": "s32", "sh": "s32", "ul": "u32", "uh": "u32", "ml": "s32"},
    )
    sext24 = lambda v: ((v & 0xFFFFFF) ^ 0x800000) - 0x800000  # noqa: E731
    A, B, C = (list(map(int, x)) for x in (a, b, c))
    assert ints(out["sl"]) == [s32(sext24(x) * sext24(y)) for x, y in zip(A, B)]
    assert ints(out["sh"]) == [s32((sext24(x) * sext24(y)) >> 16) for x, y in zip(A, B)]
    assert ints(out["ul"]) == [((x & 0xFFFFFF) * (y & 0xFFFFFF)) & M32 for x, y in zip(A, B)]
    assert ints(out["uh"]) == [(((x & 0xFFFFFF) * (y & 0xFFFFFF)) >> 16) & M32 for x, y in zip(A, B)]
    assert ints(out["ml"]) == [s32(sext24(x) * sext24(y) + z) for x, y, z in zip(A, B, C)]


def test_div_rem_truncate_toward_zero(elementwise, rng):
    a = edge_s32(rng)
    b = np.roll(edge_s32(rng), 7)
    b[b == 0] = 3
    b[:3] = [-1, 0, 7]
    a[:3] = [-(2**31), 5, -9]
    out = elementwise(
        "div.s32 %q, %a, %b;\n rem.s32 %r, %a, %b;\n div.u32 %uq, %a, %b;\n rem.u32 %ur, %a, %b;",
        {"a": ("s32", a), "b": ("s32", b)},
        {"q": "s32", "r": "s32", "uq": "u32", "ur": "u32"},
    )
    for i, (x, y) in enumerate(zip(map(int, a), map(int, b))):
        if y == 0:  # undefined in PTX; the simulator's documented choice
            assert int(out["q"][i]) == -1 and int(out["r"][i]) == x
            assert int(out["uq"][i]) == M32 and int(out["ur"][i]) == x & M32
            continue
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        assert int(out["q"][i]) == s32(q), (x, y)
        assert int(out["r"][i]) == s32(x - q * y), (x, y)
        assert int(out["uq"][i]) == (x & M32) // (y & M32)
        assert int(out["ur"][i]) == (x & M32) % (y & M32)


def test_abs_neg_min_max(elementwise, rng):
    a, b = edge_s32(rng), np.roll(edge_s32(rng), 1)
    out = elementwise(
        "abs.s32 %abs, %a;\n neg.s32 %neg, %a;\n min.s32 %min, %a, %b;\n max.u32 %umax, %a, %b;\n max.s64 %m64, %w, %v;",
        {"a": ("s32", a), "b": ("s32", b), "w": ("s64", a.astype(np.int64) * 3), "v": ("s64", b.astype(np.int64) << 20)},
        {"abs": "s32", "neg": "s32", "min": "s32", "umax": "u32", "m64": "s64"},
    )
    A, B = list(map(int, a)), list(map(int, b))
    assert ints(out["abs"]) == [s32(abs(x)) for x in A]  # abs(INT_MIN) wraps to INT_MIN
    assert ints(out["neg"]) == [s32(-x) for x in A]
    assert ints(out["min"]) == [min(x, y) for x, y in zip(A, B)]
    assert ints(out["umax"]) == [max(x & M32, y & M32) for x, y in zip(A, B)]
    assert ints(out["m64"]) == [max(3 * x, y << 20) for x, y in zip(A, B)]


def test_shifts_clamp_large_amounts(elementwise, rng):
    a = edge_s32(rng, 40)
    amount = np.array(list(range(0, 40)), dtype=np.uint32)
    out = elementwise(
        "shl.b32 %l, %a, %s;\n shr.u32 %ru, %a, %s;\n shr.s32 %rs, %a, %s;\n shl.b64 %l64, %w, %s;",
        {"a": ("s32", a), "s": ("u32", amount), "w": ("u64", a.astype(np.int64).view(np.uint64))},
        {"l": "u32", "ru": "u32", "rs": "s32", "l64": "u64"},
    )
    A, S = list(map(int, a)), list(map(int, amount))
    assert ints(out["l"]) == [((x & M32) << s) & M32 if s < 32 else 0 for x, s in zip(A, S)]
    assert ints(out["ru"]) == [(x & M32) >> s if s < 32 else 0 for x, s in zip(A, S)]
    assert ints(out["rs"]) == [x >> min(s, 31) for x, s in zip(A, S)]
    assert ints(out["l64"]) == [((x & M64) << s) & M64 for x, s in zip(A, S)]


def _bfe(a: int, pos: int, length: int, bits: int, signed: bool) -> int:
    msb = bits - 1
    pos, length = pos & 0xFF, length & 0xFF
    sbit = 0 if (not signed or length == 0) else (a >> min(pos + length - 1, msb)) & 1
    d = 0
    for i in range(bits):
        bit = (a >> (pos + i)) & 1 if (i < length and pos + i <= msb) else sbit
        d |= bit << i
    return d


def _bfi(a: int, b: int, pos: int, length: int, bits: int) -> int:
    pos, length = pos & 0xFF, length & 0xFF
    f = b
    for i in range(length):
        if pos + i > bits - 1:
            break
        f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
    return f


def test_bfe_bfi(elementwise, rng):
    n = 128
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    pos = rng.integers(0, 40, n).astype(np.uint32)
    length = rng.integers(0, 40, n).astype(np.uint32)
    pos[:3], length[:3] = [300, 0, 31], [4, 0, 8]  # only the low byte counts; zero length; overhang
    w = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
    out = elementwise(
        "bfe.u32 %eu, %a, %p, %l;\n bfe.s32 %es, %a, %p, %l;\n bfi.b32 %fi, %a, %b, %p, %l;\n bfe.s64 %e64, %w, %p, %l;",
        {"a": ("u32", a), "b": ("u32", b), "p": ("u32", pos), "l": ("u32", length), "w": ("u64", w)},
        {"eu": "u32", "es": "u32", "fi": "u32", "e64": "u64"},
    )
    for i in range(n):
        x, y, p, ln = int(a[i]), int(b[i]), int(pos[i]), int(length[i])
        assert int(out["eu"][i]) == _bfe(x, p, ln, 32, False), (x, p, ln)
        assert int(out["es"][i]) == _bfe(x, p, ln, 32, True), (x, p, ln)
        assert int(out["fi"][i]) == _bfi(x, y, p, ln, 32), (x, y, p, ln)
        assert int(out["e64"][i]) == _bfe(int(w[i]), p, ln, 64, True), (int(w[i]), p, ln)


def _prmt(a: int, b: int, c: int) -> int:
    src = (b << 32) | a
    d = 0
    for k in range(4):
        sel = (c >> (4 * k)) & 0xF
        byte = (src >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        d |= byte << (8 * k)
    return d


def test_prmt_lop3_popc_clz_brev_bfind(elementwise, rng):
    n = 96
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    a[:3] = [0, 1, 0x80000000]
    out = elementwise(
        "prmt.b32 %pr, %a, %b, %c;\n lop3.b32 %l1, %a, %b, %c, 0x96;\n lop3.b32 %l2, %a, %b, %c, 0xE8;\n"
        " lop3.b32 %l3, %a, %b, %c, 0x0;\n popc.b32 %pc, %a;\n clz.b32 %cz, %a;\n brev.b32 %br, %a;\n"
        " bfind.u32 %bf, %a;\n popc.b64 %pc64, %w;\n clz.b64 %cz64, %w;\n brev.b64 %br64, %w;\n cnot.b32 %cn, %a;\n"
        " not.b32 %nt, %a;",
        {"a": ("u32", a), "b": ("u32", b), "c": ("u32", c), "w": ("u64", (a.astype(np.uint64) << np.uint64(11)) | np.uint64(1))},
        {k: "u32" for k in ("pr", "l1", "l2", "l3", "pc", "cz", "br", "bf", "pc64", "cz64", "cn", "nt")} | {"br64": "u64"},
    )
    for i in range(n):
        x, y, z = int(a[i]), int(b[i]), int(c[i])
        w = (x << 11) | 1
        assert int(out["pr"][i]) == _prmt(x, y, z)
        assert int(out["l1"][i]) == x ^ y ^ z
        assert int(out["l2"][i]) == (x & y) | (x & z) | (y & z)  # majority
        assert int(out["l3"][i]) == 0
        assert int(out["pc"][i]) == bin(x).count("1")
        assert int(out["cz"][i]) == 32 - x.bit_length()
        assert int(out["br"][i]) == int(f"{x:032b}"[::-1], 2)
        assert int(out["bf"][i]) == (x.bit_length() - 1 if x else M32)
        assert int(out["pc64"][i]) == bin(w).count("1")
        assert int(out["cz64"][i]) == 64 - w.bit_length()
        assert int(out["br64"][i]) == int(f"{w:064b}"[::-1], 2)
        assert int(out["cn"][i]) == (1 if x == 0 else 0)
        assert int(out["nt"][i]) == x ^ M32


@pytest.mark.parametrize("mode", ["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
def test_prmt_modes(elementwise, rng, mode):
    a = np.array([0x33221100] * 8, dtype=np.uint32)
    b = np.array([0x77665544] * 8, dtype=np.uint32)
    c = np.arange(8, dtype=np.uint32)
    out = elementwise(f"prmt.b32.{mode} %d, %a, %b, %c;", {"a": ("u32", a), "b": ("u32", b), "c": ("u32", c)}, {"d": "u32"})["d"]
    tables = {
        "f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
        "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
        "rc8": [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
        "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
        "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
        "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]],
    }
    for s in range(8):
        want = sum((0x11 * sel) << (8 * k) for k, sel in enumerate(tables[mode][s & 3]))
        assert int(out[s]) == want, (mode, s)


def test_carry_chain_128_bit_add_and_sub(elementwise, rng):
    n = 64
    words = [rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(4)]
    words[0][:2] = [M32, 0]
    words[2][:2] = [1, 1]
    body = (
        "add.cc.u32 %s0, %x0, %y0;\n addc.cc.u32 %s1, %x1, %y1;\n addc.u32 %c, 0, 0;\n"
        " sub.cc.u32 %d0, %x0, %y0;\n subc.u32 %d1, %x1, %y1;"
    )
    out = elementwise(
        body,
        {"x0": ("u32", words[0]), "x1": ("u32", words[1]), "y0": ("u32", words[2]), "y1": ("u32", words[3])},
        {"s0": "u32", "s1": "u32", "c": "u32", "d0": "u32", "d1": "u32"},
    )
    for i in range(n):
        x = int(words[0][i]) | int(words[1][i]) << 32
        y = int(words[2][i]) | int(words[3][i]) << 32
        total, diff = x + y, (x - y) & M64
        assert int(out["s0"][i]) | int(out["s1"][i]) << 32 == total & M64
        assert int(out["c"][i]) == total >> 64
        assert int(out["d0"][i]) | int(out["d1"][i]) << 32 == diff


def test_predicate_logic_selp_slct_set(elementwise, rng):
    n = 64
    p = rng.integers(0, 2, n).astype(bool)
    q = rng.integers(0, 2, n).astype(bool)
    a = rng.integers(-100, 100, n).astype(np.int32)
    f = rng.standard_normal(n).astype(np.float32)
    out = elementwise(
        "and.pred %pa, %p, %q;\n or.pred %po, %p, %q;\n xor.pred %px, %p, %q;\n not.pred %pn, %p;\n"
        " selp.s32 %sel, %a, 77, %p;\n slct.s32.s32 %sl, 5, 6, %a;\n slct.f32.f32 %sf, %f, 0f3F800000, %f;\n"
        " set.lt.u32.s32 %st, %a, 0;\n set.gt.f32.s32 %sfl, %a, 0;",
        {"p": ("pred", p), "q": ("pred", q), "a": ("s32", a), "f": ("f32", f)},
        {"pa": "pred", "po": "pred", "px": "pred", "pn": "pred", "sel": "s32", "sl": "s32", "sf": "f32", "st": "u32", "sfl": "f32"},
    )
    np.testing.assert_array_equal(out["pa"].astype(bool), p & q)
    np.testing.assert_array_equal(out["po"].astype(bool), p | q)
    np.testing.assert_array_equal(out["px"].astype(bool), p ^ q)
    np.testing.assert_array_equal(out["pn"].astype(bool), ~p)
    np.testing.assert_array_equal(out["sel"], np.where(p, a, 77))
    np.testing.assert_array_equal(out["sl"], np.where(a >= 0, 5, 6))
    np.testing.assert_array_equal(out["sf"], np.where(f >= 0, f, np.float32(1)))
    np.testing.assert_array_equal(out["st"], np.where(a < 0, M32, 0).astype(np.uint32))
    np.testing.assert_array_equal(out["sfl"], np.where(a > 0, 1.0, 0.0).astype(np.float32))


def test_mad_carry_chain_builds_a_64_bit_product(elementwise, rng):
    a = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    a[0], b[0], c[0] = M32, M32, M32
    out = elementwise(
        "mad.lo.cc.u32 %lo, %a, %b, %c;\n madc.hi.u32 %hi, %a, %b, 0;",
        {"a": ("u32", a), "b": ("u32", b), "c": ("u32", c)},
        {"lo": "u32", "hi": "u32"},
    )
    for i in range(64):
        assert int(out["lo"][i]) | int(out["hi"][i]) << 32 == int(a[i]) * int(b[i]) + int(c[i])


def test_funnel_shift_and_dot_products(elementwise, rng):
    n = 64
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 70, n).astype(np.uint32)
    acc = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    out = elementwise(
        "shf.l.wrap.b32 %lw, %a, %b, %c;\n shf.r.clamp.b32 %rc, %a, %b, %c;\n dp4a.s32.u32 %d4, %a, %b, %acc;\n"
        " dp4a.u32.u32 %u4, %a, %b, %acc;\n dp2a.hi.s32.s32 %d2, %a, %b, %acc;",
        {"a": ("u32", a), "b": ("u32", b), "c": ("u32", c), "acc": ("s32", acc)},
        {"lw": "u32", "rc": "u32", "d4": "s32", "u4": "u32", "d2": "s32"},
    )

    def lanes(x: int, width: int, signed: bool) -> list[int]:
        vals = [(x >> (width * k)) & ((1 << width) - 1) for k in range(32 // width)]
        return [v - (1 << width) if signed and v >> (width - 1) else v for v in vals]

    for i in range(n):
        x, y, s, z = int(a[i]), int(b[i]), int(c[i]), int(acc[i])
        src = y << 32 | x
        assert int(out["lw"][i]) == (src << (s & 31)) >> 32 & M32
        assert int(out["rc"][i]) == (src >> min(s, 32)) & M32
        assert int(out["d4"][i]) == s32(z + sum(p * q for p, q in zip(lanes(x, 8, True), lanes(y, 8, False))))
        assert int(out["u4"][i]) == (z + sum(p * q for p, q in zip(lanes(x, 8, False), lanes(y, 8, False)))) & M32
        assert int(out["d2"][i]) == s32(z + sum(p * q for p, q in zip(lanes(x, 16, True), lanes(y, 8, True)[2:])))
