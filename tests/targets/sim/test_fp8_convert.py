"""cvt to and from FP8 pairs (e4m3x2, e5m2x2; sm_89) against an exact model of the PTX ISA.

The model does not reuse the simulator's code: it rounds by exact rational arithmetic to the
nearest of the format's finite values (ties to the even code), saturates beyond the largest
(``satfinite``: infinities too), and gives the canonical NaN 0x7F for any NaN; unpacking gives
each code's exact value, computed from its bits. ml_dtypes must agree on every finite case.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from fractions import Fraction
from functools import cache

import ml_dtypes
import numpy as np
import pytest

FORMATS = {
    # name: (exponent bits, fraction bits, bias, has infinity, ml_dtypes type)
    "e4m3": (4, 3, 7, False, ml_dtypes.float8_e4m3fn),
    "e5m2": (5, 2, 15, True, ml_dtypes.float8_e5m2),
}


def code_value(code: int, name: str) -> Fraction | float:
    """The value of an fp8 code from its bits (a Fraction; inf/nan as floats)."""
    ebits, fbits, bias, has_inf, _ = FORMATS[name]
    sign = -1 if code & 0x80 else 1
    e, f = (code >> fbits) & ((1 << ebits) - 1), code & ((1 << fbits) - 1)
    if e == (1 << ebits) - 1:
        if has_inf:
            return sign * float("inf") if f == 0 else float("nan")
        if f == (1 << fbits) - 1:
            return float("nan")
    if e == 0:
        return sign * Fraction(f, 1 << fbits) * Fraction(2) ** (1 - bias)
    return sign * (1 + Fraction(f, 1 << fbits)) * Fraction(2) ** (e - bias)


@cache
def finite_codes(name: str) -> list[tuple[Fraction, int]]:
    out = []
    for code in range(0x80):  # magnitudes; the sign bit is applied afterwards
        v = code_value(code, name)
        if isinstance(v, Fraction):
            out.append((v, code))
    return out


def model_to_fp8(x: float, name: str) -> int:
    if np.isnan(x):
        return 0x7F
    sign = 0x80 if np.signbit(x) else 0
    table = finite_codes(name)
    largest, largest_code = table[-1]
    if np.isinf(x):
        return sign | largest_code
    mag = abs(Fraction(float(x)))
    if mag >= largest:
        return sign | largest_code
    i = bisect_left(table, (mag, -1))
    neighbours = table[max(i - 1, 0) : i + 1]
    best = min(neighbours, key=lambda vc: (abs(vc[0] - mag), vc[1] & 1))  # nearest, ties to even code
    return sign | best[1]


def model_from_fp8(code: int, name: str) -> int:
    v = code_value(code, name)
    if isinstance(v, float) and np.isnan(v):
        return 0x7FFF
    if isinstance(v, Fraction) and v == 0:
        return 0x8000 if code & 0x80 else 0
    return int(np.float16(float(v)).view(np.uint16))


def interesting_floats(rng: np.random.Generator, name: str) -> np.ndarray:
    """Every fp8 value, the midpoints between neighbours (ties) and a hair either side, values
    beyond the range, subnormals, zeros, infinities, NaNs and random floats."""
    values = [float(v) for v, _ in finite_codes(name)]
    mids = [(a + b) / 2 for a, b in itertools.pairwise(values)]
    largest = values[-1]
    step = values[-1] - values[-2]
    extra = [largest + step / 2, largest + step / 2 - 1e-3, largest * 4, 1e30, 3e38, values[1] / 2, values[1] / 4, 0.0]
    base = np.array(values + mids + extra, dtype=np.float64)
    near = np.concatenate([np.nextafter(base.astype(np.float32), np.float32(np.inf)), np.nextafter(base.astype(np.float32), np.float32(0))])
    rand = (rng.standard_normal(300) * np.exp2(rng.integers(-12, 18, 300))).astype(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, -np.nan, np.float32(np.nan) * 0], dtype=np.float32)
    allv = np.concatenate([base.astype(np.float32), near, rand, special])
    return np.concatenate([allv, -allv]).astype(np.float32)


def _f32_pairs(elementwise, name: str, x: np.ndarray) -> np.ndarray:
    hi = np.roll(x, 7)
    out = elementwise(
        f"cvt.rn.satfinite.{name}x2.f32 %d, %a, %b;", {"a": ("f32", hi), "b": ("f32", x)}, {"d": "u16"}, arch="sm_89", version="8.1"
    )["d"]
    assert [int(v) >> 8 for v in out] == [model_to_fp8(float(v), name) for v in hi]  # a -> high byte
    return (out & 0xFF).astype(np.uint8)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_f32_to_fp8_rounds_saturates_and_makes_the_canonical_nan(elementwise, rng, name: str) -> None:
    x = interesting_floats(rng, name)
    got = _f32_pairs(elementwise, name, x)
    want = np.array([model_to_fp8(float(v), name) for v in x], dtype=np.uint8)
    np.testing.assert_array_equal(got, want)
    # ml_dtypes (the host's fp8) agrees wherever it neither overflows nor meets a NaN
    ml = FORMATS[name][4]
    largest = float(ml_dtypes.finfo(ml).max)
    ok = np.isfinite(x) & (np.abs(x.astype(np.float64)) <= largest)
    np.testing.assert_array_equal(got[ok], x[ok].astype(np.float64).astype(ml).view(np.uint8))


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_f16x2_to_fp8_pairs(elementwise, rng, name: str) -> None:
    with np.errstate(over="ignore"):
        narrow = interesting_floats(rng, name).astype(np.float16)
    halves = np.concatenate([narrow, rng.integers(0, 1 << 16, 200).astype(np.uint16).view(np.float16)])
    halves = halves[: len(halves) // 2 * 2]
    words = halves.view(np.uint32)
    out = elementwise(
        f"cvt.rn.satfinite.{name}x2.f16x2 %d, %a;", {"a": ("u32", words)}, {"d": "u16"}, arch="sm_89", version="8.1"
    )["d"]
    want = [model_to_fp8(float(halves[2 * i]), name) | model_to_fp8(float(halves[2 * i + 1]), name) << 8 for i in range(len(words))]
    assert [int(v) for v in out] == want


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_fp8_pairs_unpack_to_exact_f16_for_every_code(elementwise, name: str) -> None:
    codes = np.arange(256, dtype=np.uint16)
    pairs = codes | (codes[::-1] << np.uint16(8))  # every code in both bytes
    out = elementwise(f"cvt.rn.f16x2.{name}x2 %d, %a;", {"a": ("u16", pairs)}, {"d": "u32"}, arch="sm_89", version="8.1")["d"]
    for c, word in zip(range(256), out):
        assert int(word) & 0xFFFF == model_from_fp8(c, name), hex(c)
        assert int(word) >> 16 == model_from_fp8(255 - c, name), hex(255 - c)
    finite = np.array([isinstance(code_value(c, name), Fraction) for c in range(256)])
    lows = (out.astype(np.uint32) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16)
    ml = codes.astype(np.uint8).view(FORMATS[name][4]).astype(np.float16)
    np.testing.assert_array_equal(lows[finite], ml[finite])


def test_conversion_needs_satfinite_and_round_to_nearest(sim) -> None:
    from kaio.targets.sim.faults import DecodeError

    from .conftest import elementwise_ptx

    for body in ("cvt.rn.e4m3x2.f32 %d, %a, %a;", "cvt.rz.satfinite.e4m3x2.f32 %d, %a, %a;"):
        ptx = elementwise_ptx(body, {"a": "f32"}, {"d": "u16"}, arch="sm_89", version="8.1")
        with pytest.raises(Exception) as info:
            sim.load(ptx)
        assert isinstance(info.value, DecodeError) or "satfinite" in str(info.value) or "nearest" in str(info.value)


def test_planted_bug_a_sign_keeping_nan_is_caught(elementwise, rng, monkeypatch) -> None:
    """A simulator that kept the sign of a NaN (as ml_dtypes does: -nan -> 0xFF) fails the model."""
    from kaio.targets.sim import ops_convert

    real = ops_convert.to_fp8_bits

    def signed_nan(x, name):  # type: ignore[no-untyped-def]
        bits = real(x, name)
        return np.where(np.isnan(np.asarray(x, np.float64)) & np.signbit(np.asarray(x, np.float64)), np.uint8(0xFF), bits).astype(np.uint8)

    monkeypatch.setattr(ops_convert, "to_fp8_bits", signed_nan)
    with pytest.raises(AssertionError):
        test_f32_to_fp8_rounds_saturates_and_makes_the_canonical_nan(elementwise, rng, "e4m3")


def test_planted_bug_overflow_to_nan_instead_of_saturating_is_caught(elementwise, rng, monkeypatch) -> None:
    """ml_dtypes' own overflow (e4m3 -> NaN, e5m2 -> inf) is not satfinite: the model catches it."""
    from kaio.targets.sim import ops_convert

    def plain(x, name):  # type: ignore[no-untyped-def]
        from kaio.targets.sim.ptx_types import PTX_TYPES

        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(x).astype(np.float64).astype(PTX_TYPES[name].value).view(np.uint8)

    monkeypatch.setattr(ops_convert, "to_fp8_bits", plain)
    for name in FORMATS:
        with pytest.raises(AssertionError):
            test_f32_to_fp8_rounds_saturates_and_makes_the_canonical_nan(elementwise, rng, name)
