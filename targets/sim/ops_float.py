"""f32 and f64 arithmetic: add sub mul fma mad div rcp sqrt rsqrt ex2 lg2 sin cos tanh abs neg
min max copysign testp, with .rn/.rz/.rm/.rp, .ftz and .sat.

Round-to-nearest is numpy's own IEEE float32/float64 arithmetic (the fast path); directed modes
and fma go through ``floatmath``. The ``.approx`` functions are computed in f64 and rounded once
to f32, so they are *more* accurate than the hardware: within 0.5 ulp plus the f64 library
error (about 2**-52 relative), where PTX documents e.g. 2 ulp for ex2.approx.f32 and 2**-11
relative for tanh.approx.f32. Code that is right on hardware is right here; code that depends
on a specific approximation error is not reproduced.
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
from .ptx_types import PTX_TYPES, PtxType
from .syntax import Instruction

_FLOAT_TYPES = {"f32", "f64"}
_SIGN: dict[int, Any] = {32: np.uint32(0x80000000), 64: np.uint64(0x8000000000000000)}


def _format(t: PtxType) -> fm.FloatFormat:
    return fm.F32 if t.bits == 32 else fm.F64


class FloatModifiers:
    """The modifiers every float instruction may carry, parsed once."""

    def __init__(self, mods: Modifiers, *, default_mode: str | None = "rn"):
        self.mode = mods.take(*fm.ROUNDING_MODES) or default_mode
        self.approx = mods.flag("approx")
        self.full = mods.flag("full")
        self.ftz = mods.flag("ftz")
        self.sat = mods.flag("sat")
        self.t = mods.one_type(_FLOAT_TYPES)

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn with the .ftz flush of inputs and outputs and the .sat clamp, if asked for."""
        fmt = _format(self.t)
        if self.ftz:
            inner = fn

            def fn(*args: Any) -> Any:
                flushed = [fm.flush_subnormal(np.asarray(a), fmt) for a in args]
                return fm.flush_subnormal(np.asarray(inner(*flushed)), fmt)

        if self.sat:
            unsat = fn

            def fn(*args: Any) -> Any:
                return fm.saturate(np.asarray(unsat(*args)))

        return fn


def _correct(fn32: Callable[..., Any], fn64: Callable[..., Any], t: PtxType, mode: str) -> Callable[..., Any]:
    impl = fn32 if t.bits == 32 else fn64
    return lambda *args: impl(*args, mode)


def make_add_sub(subtract: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        f = FloatModifiers(mods)
        if f.mode == "rn":
            fn: Callable[..., Any] = (lambda a, b: a - b) if subtract else (lambda a, b: a + b)
        else:
            add = _correct(fm.add_f32, fm.add_f64, f.t, f.mode or "rn")
            fn = (lambda a, b: add(a, -b)) if subtract else add
        return binary(ins, dc, f.t, f.wrap(fn))

    return factory


def make_mul(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    f = FloatModifiers(mods)
    fn = (lambda a, b: a * b) if f.mode == "rn" else _correct(fm.mul_f32, fm.mul_f64, f.t, f.mode or "rn")
    return binary(ins, dc, f.t, f.wrap(fn))


def make_fma(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    f = FloatModifiers(mods)
    return ternary(ins, dc, f.t, f.wrap(_correct(fm.fma_f32, fm.fma_f64, f.t, f.mode or "rn")))


def _approx_f32(fn64: Callable[..., Any]) -> Callable[..., Any]:
    """An approximate f32 function computed in f64 and rounded once."""
    return lambda *args: fn64(*(np.asarray(a, dtype=np.float64) for a in args)).astype(np.float32)


def make_div(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    f = FloatModifiers(mods, default_mode=None)
    if f.approx or f.full or f.mode is None:
        if f.t.bits != 32:
            raise DecodeError(f"{ins.opcode}: f64 division needs a rounding mode")
        return binary(ins, dc, f.t, f.wrap(_approx_f32(np.divide)))
    return binary(ins, dc, f.t, f.wrap(_correct(fm.div_f32, fm.div_f64, f.t, f.mode)))


def make_rcp(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    f = FloatModifiers(mods, default_mode=None)
    if f.approx or f.mode is None:
        fn = _approx_f32(np.reciprocal) if f.t.bits == 32 else (lambda a: 1.0 / a)
        return unary(ins, dc, f.t, f.wrap(fn))
    one = f.t.value.type(1)
    div = _correct(fm.div_f32, fm.div_f64, f.t, f.mode)
    return unary(ins, dc, f.t, f.wrap(lambda a: div(one, a)))


def make_sqrt(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    f = FloatModifiers(mods, default_mode=None)
    if f.approx or f.mode is None:
        return unary(ins, dc, f.t, f.wrap(np.sqrt))
    return unary(ins, dc, f.t, f.wrap(_correct(fm.sqrt_f32, fm.sqrt_f64, f.t, f.mode)))


def make_approx(fn64: Callable[[Any], Any], f64_ok: bool = False) -> Any:
    """rsqrt ex2 lg2 sin cos tanh: ``.approx`` only, f32 (rsqrt also f64)."""

    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        f = FloatModifiers(mods, default_mode=None)
        if not f.approx or f.mode is not None:
            raise DecodeError(f"{ins.opcode}: only the .approx form exists")
        if f.t.bits == 64:
            if not f64_ok:
                raise DecodeError(f"{ins.opcode}: no .f64 form")
            return unary(ins, dc, f.t, fn64)
        return unary(ins, dc, f.t, f.wrap(_approx_f32(fn64)))

    return factory


def _rsqrt(x: Any) -> Any:
    return 1.0 / np.sqrt(x)


def make_abs_neg(negate: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        f = FloatModifiers(mods, default_mode=None)
        sign = _SIGN[f.t.bits]
        bits = PTX_TYPES[f"b{f.t.bits}"]
        value = f.t.value

        def flip(a: Any) -> Any:  # a sign-bit operation: NaN payloads and -0 stay exact
            raw = np.asarray(a).view(bits.value)
            return ((raw ^ sign) if negate else (raw & ~sign)).view(value)

        return unary(ins, dc, f.t, f.wrap(flip))

    return factory


def make_min_max(is_max: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        propagate_nan = mods.flag("NaN")
        f = FloatModifiers(mods, default_mode=None)
        bits = PTX_TYPES[f.t.name.replace("f", "b")].value
        pick = np.fmax if is_max else np.fmin  # fmin/fmax: a NaN operand yields the other one
        strict = np.maximum if is_max else np.minimum

        def minmax(a: Any, b: Any) -> Any:
            a, b = np.asarray(a), np.asarray(b)
            out = strict(a, b) if propagate_nan else pick(a, b)
            # -0 < +0 for min/max: combine the sign bits when both are zeros
            both_zero = (a == 0) & (b == 0)
            if both_zero.any():
                ab, bb = a.view(bits), b.view(bits)
                signed = (ab & bb) if is_max else (ab | bb)
                out = np.where(both_zero, signed.view(f.t.value), out)
            return out

        return binary(ins, dc, f.t, f.wrap(minmax))

    return factory


def make_copysign(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type(_FLOAT_TYPES)
    # copysign d, a, b: b's magnitude with a's sign
    return binary(ins, dc, t, lambda a, b: np.copysign(b, a))


_TESTS: dict[str, Callable[[Any, fm.FloatFormat], Any]] = {
    "finite": lambda x, fmt: np.isfinite(x),
    "infinite": lambda x, fmt: np.isinf(x),
    "number": lambda x, fmt: ~np.isnan(x),
    "notanumber": lambda x, fmt: np.isnan(x),
    "normal": lambda x, fmt: np.isfinite(x) & (np.abs(x) >= fmt.min_normal),
    "subnormal": lambda x, fmt: (x != 0) & (np.abs(x) < fmt.min_normal),
}


def make_testp(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    test = mods.require(*_TESTS)
    t = mods.one_type(_FLOAT_TYPES)
    fmt = _format(t)
    check = _TESTS[test]
    return unary(ins, dc, t, lambda a: np.asarray(check(np.asarray(a), fmt)), dst=PTX_TYPES["pred"])


TABLE = {
    ("add", "float"): make_add_sub(subtract=False),
    ("sub", "float"): make_add_sub(subtract=True),
    ("mul", "float"): make_mul,
    ("fma", "float"): make_fma,
    ("mad", "float"): make_fma,  # mad.rnd.f32/f64 is fma.rnd
    ("div", "float"): make_div,
    ("rcp", "float"): make_rcp,
    ("sqrt", "float"): make_sqrt,
    ("rsqrt", "float"): make_approx(_rsqrt, f64_ok=True),
    ("ex2", "float"): make_approx(np.exp2),
    ("lg2", "float"): make_approx(np.log2),
    ("sin", "float"): make_approx(np.sin),
    ("cos", "float"): make_approx(np.cos),
    ("tanh", "float"): make_approx(np.tanh),
    ("abs", "float"): make_abs_neg(negate=False),
    ("neg", "float"): make_abs_neg(negate=True),
    ("min", "float"): make_min_max(is_max=False),
    ("max", "float"): make_min_max(is_max=True),
    ("copysign", "float"): make_copysign,
    ("testp", "float"): make_testp,
}
