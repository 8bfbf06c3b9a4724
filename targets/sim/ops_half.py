"""Half-precision arithmetic: f16, bf16 and the packed f16x2/bf16x2 forms of add sub mul fma
min max neg abs, plus ex2.approx and tanh.approx.

A packed register is viewed as an array of twice the length (lane 0 in the low half), so one
elementwise numpy expression serves scalar and packed forms. add/sub/mul are computed in f32 and
rounded once: f32 carries more than 2p+2 bits for both formats, which makes that double
rounding innocuous. fma rounds a round-to-odd f64 sum once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import floatmath as fm
from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import binary, ternary, unary
from .program import RunFn
from .ptx_types import PtxType
from .syntax import Instruction

_HALF_TYPES = {"f16", "f16x2", "bf16", "bf16x2"}
_CANONICAL_NAN = {"f16": np.uint16(0x7FFF), "bf16": np.uint16(0x7FFF)}


def _fmt(t: PtxType) -> fm.FloatFormat:
    return fm.F16 if t.name.startswith("f16") else fm.BF16_FORMAT


def round_to(fmt: fm.FloatFormat, x: Any) -> Any:
    """Round f32 (or exact f64) values to the half format, to nearest even."""
    x = np.asarray(x)
    if x.dtype == np.float64 and fmt is fm.BF16_FORMAT:
        return fm.round_f64(x, fmt, "rn")  # ml_dtypes would double-round through f32
    return x.astype(fmt.dtype)


class HalfModifiers:
    def __init__(self, mods: Modifiers, ins: Instruction):
        mode = mods.take(*fm.ROUNDING_MODES)
        if mode not in (None, "rn"):
            raise DecodeError(f"{ins.opcode}: half-precision arithmetic rounds to nearest only")
        self.approx = mods.flag("approx")
        self.ftz = mods.flag("ftz")
        self.sat = mods.flag("sat")
        self.relu = mods.flag("relu")
        self.t = mods.one_type(_HALF_TYPES)
        self.fmt = _fmt(self.t)
        self.name = self.t.name.removesuffix("x2")

    def finish(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Apply .ftz (inputs and result), then .sat or .relu to the result."""
        fmt = self.fmt
        if self.ftz:
            inner = fn

            def fn(*args: Any) -> Any:
                return fm.flush_subnormal(np.asarray(inner(*(fm.flush_subnormal(np.asarray(a), fmt) for a in args))), fmt)

        if self.sat:
            unsat = fn

            def fn(*args: Any) -> Any:
                return fm.saturate(np.asarray(unsat(*args)))

        if self.relu:
            norelu = fn
            nan = _CANONICAL_NAN[self.name].view(fmt.dtype)

            def fn(*args: Any) -> Any:
                r = np.asarray(norelu(*args))
                return np.where(np.isnan(r), nan, np.where(r < 0, fmt.dtype.type(0), r))

        return fn


def _f32(x: Any) -> Any:
    return np.asarray(x).astype(np.float32)


def make_arith(op: Callable[[Any, Any], Any]) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        h = HalfModifiers(mods, ins)
        fmt = h.fmt
        return binary(ins, dc, h.t, h.finish(lambda a, b: round_to(fmt, op(_f32(a), _f32(b)))))

    return factory


def make_fma(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    h = HalfModifiers(mods, ins)
    fmt = h.fmt

    def fma(a: Any, b: Any, c: Any) -> Any:
        product = np.asarray(a, np.float64) * np.asarray(b, np.float64)  # exact: 2p <= 22 bits
        s, e = fm.two_sum(product, np.asarray(c, np.float64))
        return fm.round_f64(fm.to_odd(s, e), fmt, "rn")

    return ternary(ins, dc, h.t, h.finish(fma))


def make_min_max(is_max: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        propagate_nan = mods.flag("NaN")
        h = HalfModifiers(mods, ins)
        pick = (np.maximum if is_max else np.minimum) if propagate_nan else (np.fmax if is_max else np.fmin)
        dtype = h.fmt.dtype
        nan = _CANONICAL_NAN[h.name].view(dtype)

        def minmax(a: Any, b: Any) -> Any:
            a32, b32 = _f32(a), _f32(b)
            out = pick(a32, b32).astype(dtype)
            both_zero = (a32 == 0) & (b32 == 0)
            if both_zero.any():  # -0 < +0
                ab, bb = np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16)
                out = np.where(both_zero, ((ab & bb) if is_max else (ab | bb)).view(dtype), out)
            return np.where(np.isnan(out), nan, out)

        return binary(ins, dc, h.t, h.finish(minmax))

    return factory


def make_abs_neg(negate: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        h = HalfModifiers(mods, ins)
        dtype = h.fmt.dtype
        sign = np.uint16(0x8000)

        def flip(a: Any) -> Any:
            raw = np.asarray(a).view(np.uint16)
            return ((raw ^ sign) if negate else (raw & ~sign)).view(dtype)

        return unary(ins, dc, h.t, h.finish(flip))

    return factory


def make_approx(fn64: Callable[[Any], Any]) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        h = HalfModifiers(mods, ins)
        if not h.approx:
            raise DecodeError(f"{ins.opcode}: only the .approx form exists")
        fmt = h.fmt
        return unary(ins, dc, h.t, h.finish(lambda a: round_to(fmt, fn64(np.asarray(a, np.float64)))))

    return factory


TABLE = {
    ("add", "half"): make_arith(lambda a, b: a + b),
    ("sub", "half"): make_arith(lambda a, b: a - b),
    ("mul", "half"): make_arith(lambda a, b: a * b),
    ("fma", "half"): make_fma,
    ("min", "half"): make_min_max(is_max=False),
    ("max", "half"): make_min_max(is_max=True),
    ("abs", "half"): make_abs_neg(negate=False),
    ("neg", "half"): make_abs_neg(negate=True),
    ("ex2", "half"): make_approx(np.exp2),
    ("tanh", "half"): make_approx(np.tanh),
}
