"""Correctly rounded IEEE arithmetic in every PTX rounding mode, on numpy arrays.

numpy computes ``+ - * / sqrt`` correctly rounded to nearest-even in float32 and float64, which
covers the default ``.rn`` forms. What it lacks: the directed modes (``.rz .rm .rp``), a fused
multiply-add, and correct f64 -> bf16 conversion (ml_dtypes goes through f32 and double-rounds).
The tools here:

* ``to_odd``: round-to-odd in f64 from an exact (sum, error) pair. A value rounded to odd with
  at least p + 2 bits rounds correctly, in any mode, to a format of p bits (Boldo-Melquiond), so
  f32/f16/bf16 results are computed exactly-enough in f64 and rounded once.
* ``round_f64``: rounds an f64 to f32/f16/bf16 in any mode by scaling to the target quantum
  (exact) and rounding to an integer.
* ``nudge``: turns a round-to-nearest result plus the sign of its error into a directed one.
* f64 error terms from ``two_sum``/``two_prod`` (error-free transformations); the few elements
  outside their safe range (overflow, underflow) fall back to exact rational arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .ptx_types import BF16

ROUNDING_MODES = ("rn", "rz", "rm", "rp")


@dataclass(frozen=True)
class FloatFormat:
    name: str
    precision: int  # significand bits including the hidden one
    emin: int  # exponent of the smallest normal number
    emax: int
    dtype: np.dtype

    @property
    def max_finite(self) -> float:
        return math.ldexp(2.0 - math.ldexp(1.0, 1 - self.precision), self.emax)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin)


F16 = FloatFormat("f16", 11, -14, 15, np.dtype(np.float16))
BF16_FORMAT = FloatFormat("bf16", 8, -126, 127, BF16)
F32 = FloatFormat("f32", 24, -126, 127, np.dtype(np.float32))
F64 = FloatFormat("f64", 53, -1022, 1023, np.dtype(np.float64))
FORMAT_BY_DTYPE = {f.dtype: f for f in (F16, BF16_FORMAT, F32, F64)}


# --- building blocks ---------------------------------------------------------------------------


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a + b) and e with a + b == s + e exactly (Knuth); e is 0 where s is not finite."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, np.where(np.isfinite(s), e, 0.0)


_SPLITTER = 134217729.0  # 2**27 + 1 (Veltkamp)


def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p = fl(a * b) and e with a * b == p + e exactly (Dekker), valid inside ``prod_safe``."""
    p = a * b
    ca = _SPLITTER * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLITTER * b
    bh = cb - (cb - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def prod_safe(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Where Dekker's product is exact: no overflow in the split, no underflow in the error."""
    big = 2.0**995
    return (
        (np.abs(a) < big)
        & (np.abs(b) < big)
        & (np.abs(p) < 2.0**1020)
        & ((np.abs(p) > 2.0**-969) | (a == 0) | (b == 0))
    )


def to_odd(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Round-to-odd of the exact value s + e (s its round-to-nearest, |e| <= ulp(s)/2)."""
    inexact = e != 0
    if not inexact.any():
        return s
    toward_zero = inexact & ((e < 0) != (s < 0))
    truncated = np.where(toward_zero, np.nextafter(s, 0.0), s)
    return (truncated.view(np.uint64) | inexact.astype(np.uint64)).view(np.float64)


def round_f64(x: np.ndarray, fmt: FloatFormat, mode: str) -> np.ndarray:
    """Round f64 values (exact, or rounded to odd) to ``fmt`` in ``mode``; returns fmt.dtype."""
    x = np.asarray(x, dtype=np.float64)
    if fmt is F64:
        return x
    if mode == "rn" and fmt is F32:
        return x.astype(np.float32)  # the hardware conversion is correctly rounded
    ax = np.abs(x)
    _, exp = np.frexp(ax)
    quantum = np.maximum(exp - 1, fmt.emin) - (fmt.precision - 1)
    scaled = np.ldexp(ax, -quantum)  # exact: a power-of-two scaling
    negative = np.signbit(x)
    if mode == "rn":
        rounded = np.rint(scaled)
    elif mode == "rz":
        rounded = np.floor(scaled)
    elif mode == "rm":
        rounded = np.where(negative, np.ceil(scaled), np.floor(scaled))
    elif mode == "rp":
        rounded = np.where(negative, np.floor(scaled), np.ceil(scaled))
    else:  # pragma: no cover - decoders only pass the four modes
        raise ValueError(mode)
    mag = np.ldexp(rounded, quantum)
    over = mag > fmt.max_finite
    if over.any():
        if mode == "rn":
            clamp_to_max = np.zeros_like(over)
        elif mode == "rz":
            clamp_to_max = over
        elif mode == "rm":
            clamp_to_max = ~negative
        else:
            clamp_to_max = negative
        mag = np.where(over, np.where(clamp_to_max, fmt.max_finite, np.inf), mag)
    result = np.where(np.isfinite(x), np.copysign(mag, x), x)
    return result.astype(fmt.dtype)


def nudge(rounded: np.ndarray, err_sign: np.ndarray, mode: str) -> np.ndarray:
    """Directed result from the nearest one and sign(exact - rounded) (0 where exact)."""
    if mode == "rn":
        return rounded
    dtype = rounded.dtype.type
    if mode == "rm":
        down, up = err_sign < 0, None
    elif mode == "rp":
        down, up = None, err_sign > 0
    else:  # rz: step toward zero where the nearest value overshot in magnitude
        down = (err_sign < 0) & (rounded > 0)
        up = (err_sign > 0) & (rounded < 0)
    out = rounded
    if down is not None and down.any():
        out = np.where(down, np.nextafter(out, dtype(-np.inf)), out)
    if up is not None and up.any():
        out = np.where(up, np.nextafter(out, dtype(np.inf)), out)
    return out


def exact_zero_sign(result: np.ndarray, x: np.ndarray, y: np.ndarray, exact_zero: np.ndarray, mode: str) -> np.ndarray:
    """IEEE sign of an exactly-zero x + y: -0 in round-down unless both are +0."""
    if mode != "rm":
        return result
    fix = exact_zero & ~((x == 0) & (y == 0) & ~np.signbit(x) & ~np.signbit(y))
    if not fix.any():
        return result
    return np.where(fix, result.dtype.type(-0.0), result)


def flush_subnormal(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """``.ftz``: subnormal values become zero of the same sign."""
    tiny = (np.abs(x) < x.dtype.type(fmt.min_normal)) & (x != 0)
    if not tiny.any():
        return x
    return np.where(tiny, np.copysign(x.dtype.type(0), x), x)


def saturate(x: np.ndarray) -> np.ndarray:
    """``.sat``: clamp to [0, 1]; NaN becomes 0."""
    one = x.dtype.type(1)
    zero = x.dtype.type(0)
    return np.where(np.isnan(x), zero, np.minimum(np.maximum(x, zero), one))


def _sign(x: np.ndarray) -> np.ndarray:
    return np.sign(x).astype(np.float64)


# --- exact fallback for the rare f64 elements outside the error-free range ---------------------


def _fraction_direction(exact: Callable[[int], Fraction | None], rounded: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sign(exact - rounded) for the masked elements, computed with rationals."""
    out = np.zeros(rounded.shape, dtype=np.float64)
    for i in np.flatnonzero(mask):
        x = exact(int(i))
        r = float(rounded[i])
        if x is None or math.isnan(r):
            continue
        if math.isinf(r):
            out[i] = -1.0 if r > 0 else 1.0
            continue
        d = x - Fraction(r)
        out[i] = (d > 0) - (d < 0)
    return out


def _fraction_round(x: Fraction, mode: str) -> float:
    """A nonzero rational rounded to f64 in ``mode``."""
    try:
        r = float(x)  # int / int true division: correctly rounded to nearest
    except OverflowError:
        r = math.inf if x > 0 else -math.inf
    if mode == "rn":
        return r
    if math.isinf(r):
        d = -1 if r > 0 else 1
    else:
        diff = x - Fraction(r)
        d = (diff > 0) - (diff < 0)
    if mode == "rm" and d < 0 or mode == "rz" and d < 0 and r > 0:
        return math.nextafter(r, -math.inf)
    if mode == "rp" and d > 0 or mode == "rz" and d > 0 and r < 0:
        return math.nextafter(r, math.inf)
    return r


# --- f32 operations ----------------------------------------------------------------------------


def add_f32(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    if mode == "rn":
        return a + b
    a64 = np.asarray(a, np.float64)
    b64 = np.asarray(b, np.float64)
    s, e = two_sum(a64, b64)
    r = round_f64(to_odd(s, e), F32, mode)
    return exact_zero_sign(r, a64, b64, (s == 0) & (e == 0), mode)


def mul_f32(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    if mode == "rn":
        return a * b
    return round_f64(np.asarray(a, np.float64) * np.asarray(b, np.float64), F32, mode)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str) -> np.ndarray:
    """Correctly rounded a*b + c: the product is exact in f64, the sum rounded to odd.

    Round-to-nearest takes a shortcut: rounding the f64 sum to f32 is already right unless
    the f64 sum sits exactly on an f32 midpoint (low 29 bits 0x10000000) or in the f32
    subnormal range; only those elements take the round-to-odd path.
    """
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    c64 = np.asarray(c, np.float64)
    if mode == "rn":
        s = p + c64
        r = np.asarray(s.astype(np.float32))
        suspicious = ((s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)) | (np.abs(s) < 2.0**-125)
        if not suspicious.any():
            return r
        if r.ndim == 0:
            return _fma_f32_exact(p, c64, mode)
        fix = np.flatnonzero(suspicious)
        r[fix] = _fma_f32_exact(np.broadcast_to(p, s.shape)[fix], np.broadcast_to(c64, s.shape)[fix], mode)
        return r
    return _fma_f32_exact(p, c64, mode)


def _fma_f32_exact(p: np.ndarray, c64: np.ndarray, mode: str) -> np.ndarray:
    s, e = two_sum(p, c64)
    r = round_f64(to_odd(s, e), F32, mode)
    return exact_zero_sign(r, p, c64, (s == 0) & (e == 0), mode)


def div_f32(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    q = np.asarray(a / b, np.float32)
    if mode == "rn":
        return q
    a64 = np.asarray(a, np.float64)
    b64 = np.asarray(b, np.float64)
    rem = a64 - q.astype(np.float64) * b64  # exact: q*b has 48 bits next to a
    valid = np.isfinite(a64) & np.isfinite(b64) & (b64 != 0) & ~np.isnan(q)
    return nudge(q, np.where(valid, _sign(rem) * _sign(b64), 0.0), mode)


def sqrt_f32(a: np.ndarray, mode: str) -> np.ndarray:
    s = np.sqrt(a)
    if mode == "rn":
        return s
    a64 = np.asarray(a, np.float64)
    s64 = s.astype(np.float64)
    valid = np.isfinite(a64) & (a64 > 0)
    return nudge(s, np.where(valid, _sign(a64 - s64 * s64), 0.0), mode)


# --- f64 operations ----------------------------------------------------------------------------


def add_f64(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    if mode == "rn":
        return a + b
    s, e = two_sum(a, b)
    overflow = np.isinf(s) & np.isfinite(a) & np.isfinite(b)
    err = np.where(overflow, -_sign(s), _sign(e))
    return exact_zero_sign(nudge(s, err, mode), a, b, (s == 0) & (e == 0), mode)


def mul_f64(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    if mode == "rn":
        return a * b
    p, e = two_prod(a, b)
    finite = np.isfinite(a) & np.isfinite(b)
    safe = prod_safe(a, b, p) | ~finite
    err = np.where(finite & safe, _sign(e), 0.0)
    if not safe.all():
        aa, bb = np.broadcast_to(a, p.shape), np.broadcast_to(b, p.shape)
        err += _fraction_direction(lambda i: Fraction(float(aa[i])) * Fraction(float(bb[i])), p, ~safe)
    return nudge(p, err, mode)


def div_f64(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    q = a / b
    if mode == "rn":
        return q
    qb, qb_err = two_prod(q, np.broadcast_to(b, q.shape))
    rem = (a - qb) - qb_err  # a - qb is exact (Sterbenz); the sign survives the last rounding
    finite = np.isfinite(a) & np.isfinite(b) & (b != 0)
    safe = prod_safe(q, b, qb) & np.isfinite(q)
    err = np.where(finite & safe, _sign(rem) * _sign(b), 0.0)
    slow = finite & ~safe
    if slow.any():
        aa, bb = np.broadcast_to(a, q.shape), np.broadcast_to(b, q.shape)
        err += _fraction_direction(lambda i: Fraction(float(aa[i])) / Fraction(float(bb[i])), q, slow)
    return nudge(q, err, mode)


def sqrt_f64(a: np.ndarray, mode: str) -> np.ndarray:
    s = np.sqrt(a)
    if mode == "rn":
        return s
    ss, ss_err = two_prod(s, s)
    rem = (a - ss) - ss_err
    valid = np.isfinite(a) & (a > 0)
    safe = prod_safe(s, s, ss)
    err = np.where(valid & safe, _sign(rem), 0.0)
    slow = valid & ~safe
    if slow.any():
        # sign(sqrt(a) - s) == sign(a - s*s) for s > 0: compare squares exactly
        aa = np.broadcast_to(a, s.shape)
        for i in np.flatnonzero(slow):
            d = Fraction(float(aa[i])) - Fraction(float(s[i])) ** 2
            err[i] = (d > 0) - (d < 0)
    return nudge(s, err, mode)


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str) -> np.ndarray:
    """a*b + c rounded once. Round-to-nearest uses Boldo-Melquiond's emulation (error-free
    product and sum, the tail rounded to odd); directed modes use exact rationals."""
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(c, np.float64))
    naive = a * b + c
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    zero_product = (a == 0) | (b == 0)
    if mode == "rn":
        ph, pl = two_prod(a, b)
        th, tl = two_sum(c, ph)
        fast = th + to_odd(*two_sum(tl, pl))
        safe = finite & ~zero_product & prod_safe(a, b, ph) & (np.abs(c) < 2.0**1020) & (fast != 0)
        result = np.where(safe, fast, naive)
        # a finite product with an infinite addend is that infinity, never inf - inf
        result = np.where(np.isfinite(a) & np.isfinite(b) & np.isinf(c), c, result)
        slow = finite & ~zero_product & ~safe
    else:
        result = np.where(np.isfinite(a) & np.isfinite(b) & np.isinf(c), c, naive)
        slow = finite & ~zero_product
    for i in np.flatnonzero(slow):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        # a nonzero product cancelled exactly by c: +0, or -0 when rounding down (IEEE 754)
        result[i] = (-0.0 if mode == "rm" else 0.0) if exact == 0 else _fraction_round(exact, mode)
    return result
