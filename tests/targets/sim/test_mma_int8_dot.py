"""``kt.dot`` on 8-bit integer tiles (i8/u8 into i32, mma.sync m16n8k32) through the whole tile
stack on the simulator: bit-exact int32 products for every signedness pair, B row-major (byte
loads) and transposed (ldmatrix), ragged sizes, sm_80 and sm_90a; ptxas without spills; the
type rules' errors at the user's line."""

# No `from __future__ import annotations`: the kernels' annotations name the factories' types.

import numpy as np
import pytest
from kaio.targets.ptx import toolchain

import kaio
import kaio.tile as kt
from kaio.errors import KaioCompileError
from kaio.prelude import Array, MutArray, f16, f32, i8, i32, u8

RANGE = {"i8": (-128, 128), "u8": (0, 256)}
TYPES = {"i8": i8, "u8": u8}


def dot_kernel(a_type, b_type, trans_b: bool):  # type: ignore[no-untyped-def]
    """C = A @ B in i32, one 32x32 tile per program, K in steps of 64; B given (K, N), or
    (N, K) and transposed in the kernel."""
    a_type, b_type = TYPES[a_type], TYPES[b_type]

    @kaio.tile_kernel(num_warps=4, num_stages=2)
    def int8_dot(a: Array[a_type], b: Array[b_type], c: MutArray[i32], m: i32, n: i32, k: i32,
                 BM: kaio.constexpr = 32, BN: kaio.constexpr = 32, BK: kaio.constexpr = 64, TB: kaio.constexpr = 0):  # fmt: skip
        m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
        acc = kt.zeros((BM, BN), i32)
        for k0 in range(0, k, BK):
            if TB != 0:
                bt = kt.trans(kt.load(b, (n0, k0), (BN, BK), (n, k)))
            else:
                bt = kt.load(b, (k0, n0), (BK, BN), (k, n))
            acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), bt, acc)
        kt.store(c, (m0, n0), acc, (m, n))

    return int8_dot


def run(rng, arch, ta, tb, trans_b, m, n, k):  # type: ignore[no-untyped-def]
    kern = dot_kernel(ta, tb, trans_b)
    a = rng.integers(*RANGE[ta], (m, k)).astype(TYPES[ta].np_dtype)
    b = rng.integers(*RANGE[tb], (k, n)).astype(TYPES[tb].np_dtype)
    dev = kaio.Device("sim", arch=arch)
    c = dev.alloc_from(np.full((m, n), -0x5A5A5A5A, np.int32))  # poison
    b_arg = np.ascontiguousarray(b.T) if trans_b else b
    kern[((m + 31) // 32, (n + 31) // 32)](dev.alloc_from(a), dev.alloc_from(b_arg), c, m, n, k, TB=int(trans_b))
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    return c.to_host(), want


@pytest.mark.parametrize("trans_b", [False, True], ids=["b_kn", "b_nk"])
@pytest.mark.parametrize(("ta", "tb"), [("i8", "i8"), ("u8", "i8"), ("i8", "u8"), ("u8", "u8")])
def test_int8_dot_is_bit_exact(rng, ta, tb, trans_b):
    got, want = run(rng, "sm_80", ta, tb, trans_b, 40, 50, 100)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("trans_b", [False, True], ids=["b_kn", "b_nk"])
def test_int8_dot_on_sm90a(rng, trans_b):
    got, want = run(rng, "sm_90a", "i8", "i8", trans_b, 33, 17, 64)
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_int32_accumulation_wraps():
    # 255 * 255 * K passes 2^31 at K > 33026: the dot wraps modulo 2^32 as mma.sync's s32 does
    m, n, k = 16, 16, 64 * 600
    kern = dot_kernel("u8", "u8", False)
    a = np.full((m, k), 255, np.uint8)
    b = np.full((k, n), 255, np.uint8)
    dev = kaio.Device("sim", arch="sm_80")
    c = dev.alloc_from(np.zeros((m, n), np.int32))
    kern[(1, 1)](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    exact = 255 * 255 * k
    assert exact > 2**31
    np.testing.assert_array_equal(c.to_host(), np.full((m, n), exact, np.int64).astype(np.int32))


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["b_kn", "b_nk"])
def test_int8_dot_assembles_without_spills(arch, trans_b):
    kern = dot_kernel("i8", "u8", trans_b)
    facts = {"a": 16, "b": 16, "c": 16, "m": 16, "n": 16, "k": 64}  # aligned: cp.async / TMA-free 16-byte copies
    compiled = kaio.compile(kern, arch, specialization=facts, BM=128, BN=128, BK=64, TB=int(trans_b))
    assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32" in compiled.ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in compiled.ptx  # A (and a transposed B)
    assert ".trans.shared" not in compiled.ptx  # ldmatrix.trans moves 16-bit elements only
    report = toolchain.assemble(compiled.ptx, arch)
    name = next(iter(report.registers))
    assert report.spill_stores[name] == 0 and report.spill_loads[name] == 0


def _kernel_with(a_t, b_t, acc_t):  # type: ignore[no-untyped-def]
    @kaio.tile_kernel(num_warps=4)
    def bad(a: Array[a_t], b: Array[b_t], c: MutArray[f32]):
        acc = kt.dot(kt.load(a, (0, 0), (32, 32), (32, 32)), kt.load(b, (0, 0), (32, 32), (32, 32)), kt.zeros((32, 32), acc_t))
        kt.store(c, (0, 0), f32(acc), (32, 32))

    return bad


@pytest.mark.parametrize(
    ("a_t", "b_t", "acc_t", "message"),
    [
        (i8, f16, i32, "kt.dot of i8 and f16 tiles"),
        (i8, i8, f32, "kt.dot of i8 tiles accumulates in i32, got a f32 accumulator"),
        (u8, i8, f16, "accumulates in i32"),
        (f16, f16, i32, "kt.dot of f16 tiles accumulates in f32"),
    ],
)
def test_type_mismatches_name_both_types(a_t, b_t, acc_t, message):
    with pytest.raises(KaioCompileError, match=message) as info:
        kaio.compile(_kernel_with(a_t, b_t, acc_t), "sm_80")  # (kernels without constexprs build when defined)
    assert "kt.dot(" in str(info.value)  # at the user's line


def test_k_below_one_mma_step_is_refused():
    with pytest.raises(KaioCompileError, match="K of at least 32"):

        @kaio.tile_kernel(num_warps=4)
        def short(a: Array[i8], b: Array[i8], c: MutArray[i32]):
            kt.store(c, (0, 0), kt.dot(kt.load(a, (0, 0), (16, 16), (16, 16)), kt.load(b, (0, 0), (16, 16), (16, 16)), kt.zeros((16, 16), i32)), (16, 16))


@kaio.tile_kernel(num_warps=4, num_stages=2)
def int8_dot_k_major(a: Array[u8], b: Array[i8], c: MutArray[i32], m: i32, n: i32, k: i32,
                     BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 64):  # fmt: skip
    """B given (N, K): both operands K-major in shared memory, as 8-bit wgmma reads them."""
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), i32)
    for k0 in range(0, k, BK):
        acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.trans(kt.load(b, (n0, k0), (BN, BK), (n, k))), acc)
    kt.store(c, (m0, n0), acc, (m, n))


def test_int8_dot_on_wgmma(rng):
    m, n, k = 70, 80, 192
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, k)).astype(np.int8)
    dev = kaio.Device("sim", arch="sm_90a")
    c = dev.alloc_from(np.full((m, n), -0x5A5A5A5A, np.int32))
    int8_dot_k_major[(2, 2)](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    np.testing.assert_array_equal(c.to_host(), (a.astype(np.int64) @ b.astype(np.int64).T).astype(np.int32))
    facts = {"a": 16, "b": 16, "c": 16, "m": 16, "n": 16, "k": 64}
    ptx = kaio.compile(int8_dot_k_major, "sm_90a", specialization=facts).ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8" in ptx and "mma.sync" not in ptx
    if toolchain.find_ptxas() is not None:
        report = toolchain.assemble(ptx, "sm_90a")
        assert report.spill_stores[next(iter(report.registers))] == 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_stage_round_trips_through_text(arch):
    """tile.dot's unsigned operands, i8 mma fragments and !wgmma.acc<N, i32> print and parse back."""
    from xdsl.parser import Parser

    from kaio.dialect_registry import kaio_context
    from kaio.locations import print_with_locations

    kernel = int8_dot_k_major if arch == "sm_90a" else dot_kernel("u8", "i8", False)
    stages = kaio.compile(kernel, arch, specialization={"a": 16, "b": 16, "c": 16, "m": 16, "n": 16, "k": 64}).stages
    assert "unsigned = [#builtin.int<1>, #builtin.int<0>]" in stages["tile-layout"]  # A is u8
    assert ("!wgmma.acc<64, i32>" if arch == "sm_90a" else "!mma.frag<a, ui8>") in "".join(stages.values())
    for name, text in stages.items():
        if not text.startswith("builtin.module"):  # the PTX text itself
            continue
        module = Parser(kaio_context(), text).parse_module()
        module.verify()
        assert print_with_locations(module) == text, name


def test_a_transposed_8bit_a_is_refused_by_name():
    # ldmatrix.trans moves 16-bit elements: an 8-bit A stored (K, M) has no fragment load
    @kaio.tile_kernel(num_warps=4)
    def a_km(a: Array[i8], b: Array[i8], c: MutArray[i32], UNUSED: kaio.constexpr = 0):  # compiled at kaio.compile
        acc = kt.dot(kt.trans(kt.load(a, (0, 0), (32, 32), (32, 32))), kt.load(b, (0, 0), (32, 32), (32, 32)), kt.zeros((32, 32), i32))
        kt.store(c, (0, 0), acc, (32, 32))

    with pytest.raises(KaioCompileError, match="lower-to-mma-sync: 8-bit A operands are read from shared memory row-major"):
        kaio.compile(a_km, "sm_80")
