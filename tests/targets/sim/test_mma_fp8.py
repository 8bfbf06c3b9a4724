"""mma.sync m16n8k32 on fp8 (e4m3/e5m2, sm_89) against the PTX ISA's fragment tables: the
packing loops of test_tensor_core (plain loops, independent of the simulator's layouts) and
a numpy model that decodes the bytes with ml_dtypes and sums the exact products in float64."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.errors import KaioCompileError, KaioLaunchError, KaioTargetError
from kaio.prelude import Array, MutArray, f8e4m3, f8e5m2, f32, i8, i32

from .conftest import check_ptx
from .test_tensor_core import MMA, pack_a, pack_b, pack_c, unpack_c

HEADER_89 = ".version 8.4\n.target sm_89\n.address_size 64\n"
FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
_SPEC = ".visible .entry mma"


def _text(ta: str, tb: str, a_regs: str = "%a0, %a1, %a2, %a3", b_regs: str = "%b0, %b1") -> str:
    body = MMA[MMA.index(_SPEC) :]
    return HEADER_89 + body.format(
        shape="m16n8k32", sat="", td="f32", ta=ta, tb=tb, tc="f32", guard="",
        d="%d0, %d1, %d2, %d3", a=a_regs, b=b_regs, c="%c0, %c1, %c2, %c3",
    )  # fmt: skip


def _fp8(rng: np.random.Generator, t: str, shape: tuple[int, int]) -> np.ndarray:
    """Random finite fp8 values over the type's range (normals and subnormals)."""
    finite = np.arange(256, dtype=np.uint8).view(FP8[t])
    finite = finite[np.isfinite(finite.astype(np.float32))]
    return rng.choice(finite, size=shape)


def _launch(sim, dev, text: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = dev.empty((32, 4), np.uint32)
    dev.launch(sim.load(text), "mma", (1, 1, 1), (32, 1, 1), dev.array(pack_a(a, 4)), dev.array(pack_b(b, 4)), dev.array(pack_c(c).view(np.uint32)), out)
    return unpack_c(dev.read(out).view(np.float32))


def model(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The ISA's D = A B + C with f32 D: exact products and sum, rounded once."""
    with np.errstate(invalid="ignore"):  # inf * 0 in the NaN/inf tests
        return (a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize(("ta", "tb"), [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e5m2", "e4m3")])
def test_fp8_mma_matches_the_isa_fragment_layout(sim, dev, rng, ta, tb):
    text = _text(ta, tb)
    check_ptx(text, "sm_89")
    a, b = _fp8(rng, ta, (16, 32)), _fp8(rng, tb, (32, 8))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(_launch(sim, dev, text, a, b, c), model(a, b, c))


def test_fp8_nan_and_infinity_propagate(sim, dev, rng):
    a, b = _fp8(rng, "e5m2", (16, 32)), _fp8(rng, "e5m2", (32, 8))
    c = np.zeros((16, 8), np.float32)
    a[3, 7] = np.float32("inf")  # e5m2 has infinities: row 3 becomes +-inf or NaN
    b[5, 2] = np.float32("nan")  # column 2 becomes NaN
    got = _launch(sim, dev, _text("e5m2", "e5m2"), a, b, c)
    want = model(a, b, c)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[:, 2]).all() and not np.isfinite(got[3]).any()
    e4m3 = _fp8(rng, "e4m3", (16, 32))
    e4m3.view(np.uint8)[0, 0] = 0x7F  # e4m3's NaN
    got = _launch(sim, dev, _text("e4m3", "e4m3"), e4m3, _fp8(rng, "e4m3", (32, 8)), c)
    assert np.isnan(got[0]).all() and np.isfinite(got[1:]).all()


@pytest.mark.parametrize(
    ("a_regs", "b_regs"),
    [("%a1, %a0, %a2, %a3", "%b0, %b1"), ("%a0, %a1, %a2, %a3", "%b1, %b0"), ("%a0, %a2, %a1, %a3", "%b0, %b1")],
)
def test_planted_fragment_bugs_are_caught(sim, dev, rng, a_regs, b_regs):
    # a kernel that hands mma a wrong fragment register order computes another product
    a, b = _fp8(rng, "e4m3", (16, 32)), _fp8(rng, "e4m3", (32, 8))
    c = np.zeros((16, 8), np.float32)
    got = _launch(sim, dev, _text("e4m3", "e4m3", a_regs, b_regs), a, b, c)
    assert not np.array_equal(got, model(a, b, c))


def test_planted_operand_type_bug_is_caught(sim, dev, rng):
    # e5m2 bytes read as e4m3 (the wrong type name in the instruction) give other values
    a, b = _fp8(rng, "e5m2", (16, 32)), _fp8(rng, "e5m2", (32, 8))
    c = np.zeros((16, 8), np.float32)
    got = _launch(sim, dev, _text("e4m3", "e5m2"), a.view(np.uint8).view(FP8["e4m3"]), b, c)
    assert not np.array_equal(np.nan_to_num(got), np.nan_to_num(model(a, b, c)))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("m16n8k32.row.col.f32.e4m3.s8.f32", "unsupported input types"),
        ("m16n8k32.row.col.s32.e4m3.e4m3.s32", "accumulators"),
        ("m16n8k16.row.col.f32.e4m3.e4m3.f32", "unsupported input types"),
        ("m16n8k32.row.col.satfinite.f32.e4m3.e4m3.f32", "satfinite"),
    ],
)
def test_malformed_fp8_mma_is_a_load_error(sim, spec, message):
    text = HEADER_89 + (
        ".visible .entry k()\n{\n\t.reg .b32 %a<4>, %b<2>, %c<4>, %d<4>;\n"
        f"\tmma.sync.aligned.{spec} {{%d0, %d1, %d2, %d3}}, {{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{%c0, %c1, %c2, %c3}};\n\tret;\n}}\n"
    )
    with pytest.raises(KaioLaunchError, match=message):
        sim.load(text)


# --- kt.dot on fp8 tiles ---------------------------------------------------------------------


def _fp8_dot_source():  # type: ignore[no-untyped-def]
    @kaio.tile_kernel(num_warps=4, num_stages=2)
    def fp8_dot(a: Array[f8e4m3], b: Array[f8e5m2], c: MutArray[f32], m: i32, n: i32, k: i32,
                BM: kaio.constexpr = 32, BN: kaio.constexpr = 32, BK: kaio.constexpr = 32):  # fmt: skip
        m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, BK):
            acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
        kt.store(c, (m0, n0), acc, (m, n))

    return fp8_dot


@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_fp8_dot_tile_kernel(rng, arch):
    m, n, k = 40, 33, 96
    a, b = _fp8(rng, "e4m3", (m, k)), _fp8(rng, "e5m2", (k, n))
    dev = kaio.Device("sim", arch=arch)
    c = dev.alloc_from(np.full((m, n), np.nan, np.float32))
    _fp8_dot_source()[(2, 2)](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    want = a.astype(np.float64) @ b.astype(np.float64)  # each mma rounds its 32-deep partial sum to f32
    np.testing.assert_allclose(c.to_host(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_fp8_dot_before_sm89_names_the_minimum_at_the_users_line():
    with pytest.raises(KaioTargetError, match=r"test_mma_fp8.py:\d+: fp8 tensor cores .*needs sm_89 or newer; the target is sm_80") as info:
        kaio.compile(_fp8_dot_source(), "sm_80")
    assert "acc = kt.dot(" in str(info.value)


def test_fp8_dot_with_an_integer_tile_names_both_types():

    with pytest.raises(KaioCompileError, match="kt.dot of f8e4m3 and i8 tiles"):

        @kaio.tile_kernel(num_warps=4)
        def mixed(a: Array[f8e4m3], b: Array[i8], c: MutArray[f32]):
            acc = kt.dot(kt.load(a, (0, 0), (32, 32), (32, 32)), kt.load(b, (0, 0), (32, 32), (32, 32)), kt.zeros((32, 32), f32))
            kt.store(c, (0, 0), acc, (32, 32))


@kaio.tile_kernel(num_warps=4, num_stages=2)
def fp8_dot_k_major(a: Array[f8e4m3], b: Array[f8e5m2], c: MutArray[f32], m: i32, n: i32, k: i32,
                    BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 64):  # fmt: skip
    """B given (N, K): both operands K-major in shared memory, as 8-bit wgmma reads them."""
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for k0 in range(0, k, BK):
        acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.trans(kt.load(b, (n0, k0), (BN, BK), (n, k))), acc)
    kt.store(c, (m0, n0), acc, (m, n))


def test_fp8_dot_on_wgmma(rng):
    m, n, k = 70, 80, 192
    a, b = _fp8(rng, "e4m3", (m, k)), _fp8(rng, "e5m2", (n, k))
    dev = kaio.Device("sim", arch="sm_90a")
    c = dev.alloc_from(np.full((m, n), np.nan, np.float32))
    fp8_dot_k_major[(2, 2)](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c.to_host(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    facts = {"a": 16, "b": 16, "c": 16, "m": 16, "n": 16, "k": 64}
    ptx = kaio.compile(fp8_dot_k_major, "sm_90a", specialization=facts).ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2" in ptx and "mma.sync" not in ptx
    check_ptx(ptx, "sm_90a")


def test_fp8_wgmma_refuses_transposed_operands():
    from xdsl.dialects.builtin import f8E4M3FN, i64
    from xdsl.utils.exceptions import VerifyException
    from xdsl.utils.test_value import create_ssa_value

    from kaio.dialects import wgmma

    acc, desc = create_ssa_value(wgmma.AccType(64)), create_ssa_value(i64)
    with pytest.raises(VerifyException, match="8-bit wgmma reads K-major"):
        wgmma.MmaAsyncOp(acc, desc, desc, f8E4M3FN, trans_b=1).verify()
