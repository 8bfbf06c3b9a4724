"""The documented semantics of kaio's scalar operations, in plain Python and numpy, independent of
the compiler: the reference the differential fuzzer compares the simulator with.

Integers are Python ints wrapped to their type (two's complement); ``//`` and ``%`` truncate
toward zero like C. Floats are numpy scalars of their type (``numpy.float16``/``float32``/
``float64``, ``ml_dtypes.bfloat16``): numpy rounds each + - * / once to the type (f16 and bf16
compute in f32, which has more than twice their precision, so that is the one correct rounding).
Conversions to bf16 and from 64-bit integers are rounded here by hand, once: ml_dtypes and numpy
go through f32/f64 and can round twice.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from kaio.dtypes import ScalarType

FLOAT_NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}


def wrap(value: int, t: ScalarType) -> int:
    v = value & ((1 << t.bits) - 1)
    if t.kind == "int" and v >= 1 << (t.bits - 1):
        v -= 1 << t.bits
    return v


def int_bounds(t: ScalarType) -> tuple[int, int]:
    if t.kind == "uint":
        return 0, (1 << t.bits) - 1
    return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1


def trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def trunc_rem(a: int, b: int) -> int:
    return a - b * trunc_div(a, b)


# --- rounding to a float type, once ----------------------------------------------------------


def _odd_f64(x: Fraction) -> float:
    """``x`` as an f64 rounded to odd (truncated, last bit set when inexact)."""
    f = float(x)  # Python rounds a Fraction correctly, to nearest even
    if Fraction(f) == x or math.isinf(f):
        return f if not math.isinf(f) else math.copysign(1.7976931348623157e308, f)
    if abs(Fraction(f)) > abs(x):
        f = math.nextafter(f, 0.0)
    (bits,) = struct.unpack("<Q", struct.pack("<d", f))
    return float(struct.unpack("<d", struct.pack("<Q", bits | 1))[0])


def _odd_f32(x: float) -> np.float32:
    with np.errstate(over="ignore"):
        f = np.float32(x)
    if math.isnan(x) or float(f) == x:
        return f
    if math.isinf(f) or abs(float(f)) > abs(x):
        f = np.nextafter(f, np.float32(0))
    return np.uint32(f.view(np.uint32) | 1).view(np.float32)


def round_to(x: Fraction | int | float, name: str) -> Any:
    """The exact value ``x`` rounded once, to nearest even, to float type ``name``. Round-to-odd
    steps through wider formats keep the final rounding the only one (each wider format has at
    least two more bits than the next)."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return FLOAT_NP[name](x)
    wide = _odd_f64(Fraction(x)) if not isinstance(x, float) else x
    if name == "f64":
        return np.float64(float(Fraction(x))) if not isinstance(x, float) else np.float64(x)
    with np.errstate(over="ignore"):
        if name == "bf16":
            return np.array([_odd_f32(wide)], np.float32).astype(ml_dtypes.bfloat16)[0]
        return FLOAT_NP[name](wide)  # numpy's f64 -> f32 / f16 casts round once


def float_cast(v: Any, src: str, dst: str) -> Any:
    """A float value of type ``src`` as ``dst`` (widening is exact; narrowing rounds once)."""
    x = float(v)
    if math.isnan(x):
        return FLOAT_NP[dst]("nan")
    if math.isinf(x):
        return FLOAT_NP[dst](x)
    if x == 0.0:
        return FLOAT_NP[dst](x)  # keeps the sign of zero
    return round_to(x, dst)
