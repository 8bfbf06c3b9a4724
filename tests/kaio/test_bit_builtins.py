"""dp4a dp2a prmt lop3 bitcast unpack_nibble: SIMT and tile kernels on the simulator against
Python-integer models of the PTX ISA, constant folding, errors, and what ptxas makes of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from kaio.targets.ptx.toolchain import assemble, find_ptxas

import kaio
import kaio.tile as kt
from kaio.prelude import (
    Array,
    MutArray,
    bitcast,
    dp2a,
    dp4a,
    f16,
    f32,
    i32,
    lop3,
    prmt,
    thread_idx_x,
    u16,
    u32,
    unpack_nibble,
)

from ..targets.sim.isa_int_models import M32, dot_model, lanes, lop3_model, prmt_model, words  # noqa: F401


@kaio.gpu_kernel(block_size=64)
def bit_ops(a: Array[i32], b: Array[u32], c: Array[i32], out: MutArray[u32], half: MutArray[f16], n: i32):
    i = i32(thread_idx_x())
    if i < n:
        x, y, z = a[i], b[i], c[i]
        out[i * 10 + 0] = u32(dp4a(x, y, z))  # s32.u32
        out[i * 10 + 1] = u32(dp4a(x, i32(y), z))  # s32.s32
        out[i * 10 + 2] = dp4a(u32(x), y, u32(z))  # u32.u32
        out[i * 10 + 3] = u32(dp2a(x, y, z))  # lo, s32.u32
        out[i * 10 + 4] = u32(dp2a(u32(x), i32(y), z, hi=True))  # hi, u32.s32
        out[i * 10 + 5] = prmt(y, u32(x), u32(z))
        out[i * 10 + 6] = lop3(y, u32(x), u32(z), 0xE8)  # majority
        out[i * 10 + 7] = lop3(y, u32(x), u32(z), (0xF0 & 0xCC) | 0xAA)  # (a & b) | c
        out[i * 10 + 8] = bitcast(f32(x), u32)
        out[i * 10 + 9] = u32(bitcast(bitcast(u16(y & 0xFFFF), f16), u16))
        half[i * 3 + 0] = unpack_nibble(y, 0)
        half[i * 3 + 1] = unpack_nibble(y, 5, zero=8)
        half[i * 3 + 2] = unpack_nibble(y, u32(z) & 7)


def _run_bit_ops(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[int], list[int], list[int]]:
    dev = kaio.Device("sim")
    n = 64  # one block
    a, b, c = words(rng, n), np.roll(words(rng, n), 3), words(rng, n)[::-1].copy()
    out = dev.alloc_from(np.full(n * 10, 0xDEADBEEF, np.uint32))
    half = dev.alloc_from(np.full(n * 3, np.nan, np.float16))
    bit_ops[1](dev.alloc_from(a.view(np.int32)), dev.alloc_from(b), dev.alloc_from(c.view(np.int32)), out, half, n)
    return out.to_host().reshape(n, 10), half.to_host().reshape(n, 3), [int(v) for v in a], [int(v) for v in b], [int(v) for v in c]


def test_bit_builtins_match_the_isa_models(rng: np.random.Generator) -> None:
    out, half, A, B, C = _run_bit_ops(rng)
    for i, (x, y, z) in enumerate(zip(A, B, C)):
        row = [int(v) for v in out[i]]
        assert row[0] == dot_model(x, y, z, True, False)
        assert row[1] == dot_model(x, y, z, True, True)
        assert row[2] == dot_model(x, y, z, False, False)
        assert row[3] == dot_model(x, y, z, True, False, pairs=2)
        assert row[4] == dot_model(x, y, z, False, True, pairs=2, hi=True)
        assert row[5] == prmt_model(y, x, z)
        assert row[6] == lop3_model(y, x, z, 0xE8)
        assert row[7] == (y & x) | z
        assert row[8] == int(np.float32(np.int32(np.uint32(x).view(np.int32))).view(np.uint32))
        assert row[9] == y & 0xFFFF
        assert [float(h) for h in half[i]] == [y & 0xF, ((y >> 20) & 0xF) - 8, (y >> (4 * (z & 7))) & 0xF]


def test_planted_bug_wrong_signedness_is_caught(rng: np.random.Generator) -> None:
    """A kernel whose dp4a read b's bytes as signed (the other signedness) gives other results."""
    out, _, A, B, C = _run_bit_ops(rng)
    wrong = [dot_model(x, y, z, True, True) for x, y, z in zip(A, B, C)]
    assert [int(v) for v in out[:, 0]] != wrong  # s32.u32 differs from s32.s32 on these inputs
    assert [int(v) for v in out[:, 1]] == wrong


def test_constant_calls_fold_to_the_runtime_values() -> None:
    @kaio.gpu_kernel(block_size=32)
    def folded(out: MutArray[u32], half: MutArray[f16]):
        if thread_idx_x() == 0:
            out[0] = u32(dp4a(i32(-0x7F7F7F80), u32(0xFF80017F), i32(5)))
            out[1] = u32(dp2a(i32(0x7FFF8000), i32(0x80FF0102), 7, hi=True))
            out[2] = prmt(u32(0x89ABCDEF), u32(0x01234567), u32(0xB8F1))
            out[3] = lop3(u32(0x12345678), u32(0xF0F0F0F0), u32(0x0F0F0000), 0x6A)
            out[4] = bitcast(f32(-1.5), u32)
            half[0] = unpack_nibble(u32(0x9ABCDEF0), 6, zero=3)

    ir = folded.build()
    from kaio.dialects import kernel_bits

    assert not any(isinstance(op, tuple(kernel_bits.BIT_OPS)) for op in ir.module.walk())  # all folded
    dev = kaio.Device("sim")
    out, half = dev.alloc_from(np.zeros(5, np.uint32)), dev.alloc_from(np.full(1, np.nan, np.float16))
    folded[1](out, half)
    want = [
        dot_model(-0x7F7F7F80 & M32, 0xFF80017F, 5, True, False),
        dot_model(0x7FFF8000, 0x80FF0102, 7, True, True, pairs=2, hi=True),
        prmt_model(0x89ABCDEF, 0x01234567, 0xB8F1),
        lop3_model(0x12345678, 0xF0F0F0F0, 0x0F0F0000, 0x6A),
        int(np.float32(-1.5).view(np.uint32)),
    ]
    assert [int(v) for v in out.to_host()] == want
    assert float(half.to_host()[0]) == 0xA - 3


@kaio.tile_kernel(num_warps=4)
def dequant_int4(q: Array[u32], scale: Array[u16], out: MutArray[f16], K: i32, N: i32, BK: kaio.constexpr, BN: kaio.constexpr):
    """GPTQ layout: q (K/8, N), nibble k % 8 of word (k // 8, n) is W[k, n] (low nibble first);
    the f16 scales arrive as raw 16-bit words (as in a GGUF byte stream): bitcast on a tile."""
    k = i32(kt.program_id(0)) * BK + kt.arange(BK)
    n = kt.arange(BN)
    kk, nn = kt.expand_dims(k, 1), kt.expand_dims(n, 0)
    mask = (kk < K) & (nn < N)
    word = kt.load(q, (kk // 8) * N + nn, mask=mask)
    w = unpack_nibble(word, u32(kk % 8), zero=8) * kt.bitcast(kt.load(scale, nn + kk * 0, mask=mask), f16)
    kt.store(out, kk * N + nn, w, mask=mask)


def test_tile_kernel_dequantises_int4_words(rng: np.random.Generator) -> None:
    K, N = 64, 32
    w = rng.integers(0, 16, (K, N)).astype(np.uint32)
    q = np.zeros((K // 8, N), np.uint32)
    for j in range(8):
        q |= w[j::8] << np.uint32(4 * j)
    scale = rng.uniform(0.5, 2.0, N).astype(np.float16)
    dev = kaio.Device("sim")
    out = dev.alloc_from(np.full((K, N), np.nan, np.float16))
    dequant_int4[K // 32](dev.alloc_from(q), dev.alloc_from(scale.view(np.uint16)), out, K, N, BK=32, BN=32)
    want = ((w.astype(np.float32) - 8) * scale.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out.to_host(), want)  # (q - 8) * s is one rounding: exact in f16


@kaio.tile_kernel(num_warps=4)
def dp4a_rows(a: Array[i32], b: Array[i32], out: MutArray[i32], BLOCK: kaio.constexpr):
    offs = kt.arange(BLOCK)
    acc = kt.zeros((BLOCK,), i32)
    acc = kt.dp4a(kt.load(a, offs), kt.load(b, offs), acc)
    kt.store(out, offs, kt.dp4a(kt.load(a, offs), u32(0x01010101), acc))


def test_tile_maps_lift_dp4a(rng: np.random.Generator) -> None:
    a, b = words(rng, 128), words(rng, 128)
    dev = kaio.Device("sim")
    out = dev.alloc_from(np.full(128, -1, np.int32))
    dp4a_rows[1](dev.alloc_from(a.view(np.int32)), dev.alloc_from(b.view(np.int32)), out, BLOCK=128)
    want = [dot_model(int(x), 0x01010101, dot_model(int(x), int(y), 0, True, True), True, False) for x, y in zip(a, b)]
    assert [int(v) & M32 for v in out.to_host()] == want


@pytest.mark.skipif(find_ptxas() is None, reason="needs the ptxas wheel")
@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a"])
def test_ptxas_assembles_without_spills(arch: str) -> None:
    for k, kw in ((bit_ops, {}), (dequant_int4, {"BK": 32, "BN": 32}), (dp4a_rows, {"BLOCK": 128})):
        report = assemble(kaio.compile(k, arch=arch, **kw).ptx, arch)
        assert not any(report.spill_stores.values()) and not any(report.spill_loads.values()), report.log


@pytest.mark.skipif(not __import__("kaio.targets.ptx.sass").targets.ptx.sass.tools_available(), reason="needs the CUDA tool wheels")
def test_unpack_nibble_is_a_lop3_and_a_half_subtract_in_sass() -> None:
    """Marlin's trick survives ptxas: per nibble a shift, one LOP3 and one HADD2, no I2F."""
    from kaio.targets.ptx import sass

    @kaio.gpu_kernel(block_size=32)
    def one_word(q: Array[u32], out: MutArray[f16]):
        i = thread_idx_x()
        w = q[i]
        out[i * 8 + 0] = unpack_nibble(w, 0, zero=8)
        out[i * 8 + 1] = unpack_nibble(w, 1, zero=8)
        out[i * 8 + 2] = unpack_nibble(w, 2, zero=8)
        out[i * 8 + 3] = unpack_nibble(w, 3, zero=8)
        out[i * 8 + 4] = unpack_nibble(w, 4, zero=8)
        out[i * 8 + 5] = unpack_nibble(w, 5, zero=8)
        out[i * 8 + 6] = unpack_nibble(w, 6, zero=8)
        out[i * 8 + 7] = unpack_nibble(w, 7, zero=8)

    report = sass.analyze(kaio.compile(one_word, arch="sm_80").ptx, "sm_80")["one_word"]
    ops = [ins.opcode.split(".")[0] for ins in report.instructions]
    assert "I2F" not in ops and "F2F" not in ops
    assert ops.count("LOP3") == 8, ops  # one per nibble: mask and magic in one
    assert ops.count("HADD2") + ops.count("HFMA2") <= 8, ops  # ... and one half subtract (or fewer)


def _load_kernel(tmp_path: Path, body: str, params: str = "x: Array[u32], y: MutArray[u32]") -> None:
    src = f"import kaio\nfrom kaio.prelude import *\n@kaio.gpu_kernel(block_size=32)\ndef k({params}):\n    {body}\n"
    path = tmp_path / "bad_kernel.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("bad_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kaio.compile(module.k)


@pytest.mark.parametrize(
    ("body", "params", "message"),
    [
        ("y[0] = dp4a(f32(x[0]), x[0], u32(0))", None, "32-bit word"),
        ("y[0] = u32(dp4a(i32(x[0]), x[0], u32(0)))", None, "accumulator c must be i32"),
        ("y[0] = u32(dp2a(i32(x[0]), x[0], i32(0), hi=x[0] > 0))", None, "compile-time bool"),
        ("y[0] = lop3(x[0], x[1], x[2], x[3])", None, "compile-time integer in 0 .. 255"),
        ("y[0] = lop3(x[0], x[1], x[2], 256)", None, "compile-time integer in 0 .. 255"),
        ("y[0] = prmt(x[0], x[1], 1.5)", None, "32-bit word"),
        ("y[0] = bitcast(f16(x[0]), u32)", None, "one width"),
        ("y[0] = bitcast(x[0], 7)", None, "must be a kaio type"),
        ("h[0] = unpack_nibble(x[0], 8)", "x: Array[u32], h: MutArray[f16]", "0 .. 7"),
        ("h[0] = unpack_nibble(x[0], 1, zero=16)", "x: Array[u32], h: MutArray[f16]", "0 .. 15"),
        ("h[0] = f16(unpack_nibble(x[0], 1, f32))", "x: Array[u32], h: MutArray[f16]", "f16 or bf16"),
        ("y[0] = u32(unpack_nibble(u16(x[0]), 1))", None, "32-bit word"),
    ],
)
def test_bad_arguments_are_compile_errors(tmp_path: Path, body: str, params: str | None, message: str) -> None:
    with pytest.raises(kaio.KaioCompileError, match=message):
        _load_kernel(tmp_path, body, params or "x: Array[u32], y: MutArray[u32]")


# --------------------------------------------------------------------------- lop3 from operators


def _logic_source() -> str:
    return """
import kaio
from kaio.prelude import *

@kaio.gpu_kernel(block_size=64)
def logic_pairs(x: Array[u32], y: MutArray[u32]):
    i = i32(thread_idx_x())
    v = x[i]
    y[i * 6 + 0] = (v & 0xF) | 0x6400
    y[i * 6 + 1] = (v | 0x0F0F0F0F) ^ 0xFF00FF00
    y[i * 6 + 2] = 0x12345678 & (0xCAFE0000 ^ v)
    w = v & 0xFF
    y[i * 6 + 3] = (w | 0x100) + w  # w has two users: it stays an and
    y[i * 6 + 4] = ((v >> 4) & 0xF) | 0x6400
    y[i * 6 + 5] = (v ^ 0xFFFFFFFF) & 0x80000000
"""


def _logic_model(v: int) -> list[int]:
    w = v & 0xFF
    return [(v & 0xF) | 0x6400, (v | 0x0F0F0F0F) ^ 0xFF00FF00, 0x12345678 & (0xCAFE0000 ^ v), ((w | 0x100) + w) & M32,
            ((v >> 4) & 0xF) | 0x6400, (v ^ M32) & 0x80000000]  # fmt: skip


def _run_logic(tmp_path: Path, rng: np.random.Generator) -> tuple[list[list[int]], np.ndarray, str]:
    path = tmp_path / "logic_kernels.py"
    path.write_text(_logic_source())
    spec = importlib.util.spec_from_file_location("logic_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = words(rng, 64)
    dev = kaio.Device("sim")
    y = dev.alloc_from(np.full(64 * 6, 0xA5A5A5A5, np.uint32))
    module.logic_pairs[1](dev.alloc_from(x), y)
    return [[int(v) for v in row] for row in y.to_host().reshape(64, 6)], x, kaio.compile(module.logic_pairs).ptx


def test_two_logic_ops_with_constants_become_one_lop3(tmp_path: Path, rng: np.random.Generator) -> None:
    got, x, ptx_text = _run_logic(tmp_path, rng)
    assert got == [_logic_model(int(v)) for v in x]
    body = ptx_text.split("ld.global.u32", 1)[1]
    ops = [line.split()[0] for line in body.splitlines() if line.strip() and not line.strip().startswith((".", "//", "$"))]
    assert ops.count("lop3.b32") == 5, body  # every pair but the shared `w`
    assert (ops.count("and.b32"), ops.count("or.b32"), ops.count("xor.b32")) == (1, 1, 0), body  # w & 0xFF, w | 0x100
    if find_ptxas() is not None:  # immediates of any sign assemble
        assemble(ptx_text, "sm_80")


def test_planted_bug_a_wrong_lop3_table_is_caught(tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    from kaio.passes.to_ptx import lop3_fusion

    real = lop3_fusion.lop3_table
    monkeypatch.setattr(lop3_fusion, "lop3_table", lambda inner, outer: real(outer, inner))  # operations swapped
    got, x, _ = _run_logic(tmp_path, rng)
    assert got != [_logic_model(int(v)) for v in x]


# --------------------------------------------------------------------------- the IR


def test_bit_ops_verify_and_round_trip_through_text() -> None:
    from kaio.dialects import kernel_bits, ptx
    from kaio.dialects.kernel import Kernel
    from xdsl.context import Context
    from xdsl.dialects import arith as xarith
    from xdsl.dialects.builtin import Builtin
    from xdsl.parser import Parser

    ir = bit_ops.build()  # every kernel_bits op but prmt's mode, which the frontend never sets
    text = str(ir.module)
    assert all(name in text for name in ("kernel.dp4a", "kernel.dp2a", "kernel.prmt", "kernel.lop3"))
    ctx = Context()
    for d in (Builtin, Kernel, xarith.Arith):
        ctx.load_dialect(d)
    from xdsl.dialects import scf

    ctx.load_dialect(scf.Scf)
    parsed = Parser(ctx, text).parse_module()
    parsed.verify()
    assert str(parsed) == text
    # the verifiers refuse what PTX cannot spell
    from xdsl.dialects.builtin import i32 as xi32
    from xdsl.ir import Block
    from xdsl.utils.exceptions import VerifyException

    block = Block(arg_types=[xi32, xi32, xi32])
    a, b, c = block.args
    for bad in (kernel_bits.Lop3Op(a, b, c, 256), kernel_bits.PrmtOp(a, b, c, "f5e")):
        with pytest.raises(VerifyException):
            bad.verify()
    kernel_bits.PrmtOp(a, b, c, "rc8").verify()
    assert ptx.PrmtOp("rc8.b32", [a, b, c], [xi32]).opcode() == "prmt.b32.rc8"
    with pytest.raises(VerifyException):
        ptx.Dp2aOp("s32.s32", [a, b, c], [xi32]).verify()  # .lo or .hi
    ptx.Dp2aOp("hi.s32.u32", [a, b, c], [xi32]).verify()
