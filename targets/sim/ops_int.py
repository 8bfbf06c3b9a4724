"""Integer arithmetic: add sub (with .sat and the carry chain) mul mad (.lo .hi .wide)
mul24 mad24 div rem abs neg min max. Wraparound is numpy's native modular arithmetic on the
typed views; widths beyond 64 bits (mul.hi.u64) are built from 32-bit halves."""

from __future__ import annotations

from typing import Any

import numpy as np

from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import INT_TYPES, binary, operands, ternary
from .program import Idx, RunFn
from .ptx_types import PtxType, signed_type, unsigned_type
from .syntax import Instruction

_M32 = np.uint64(0xFFFFFFFF)
_S32_MIN, _S32_MAX = -(2**31), 2**31 - 1


def _wider(t: PtxType) -> PtxType:
    if t.bits >= 64:
        raise DecodeError(f".wide is not defined for .{t.name}")
    return (signed_type if t.is_signed else unsigned_type)(t.bits * 2)


def _sat_s32(wide: Any) -> Any:
    return np.clip(wide, _S32_MIN, _S32_MAX).astype(np.int32)


def mulhi_u64(a: Any, b: Any) -> Any:
    """High 64 bits of the 128-bit product of two uint64 arrays."""
    a_lo, a_hi = a & _M32, a >> np.uint64(32)
    b_lo, b_hi = b & _M32, b >> np.uint64(32)
    lh = a_lo * b_hi
    hl = a_hi * b_lo
    mid = ((a_lo * b_lo) >> np.uint64(32)) + (lh & _M32) + (hl & _M32)
    return a_hi * b_hi + (lh >> np.uint64(32)) + (hl >> np.uint64(32)) + (mid >> np.uint64(32))


def mulhi_s64(a: Any, b: Any) -> Any:
    ua, ub = np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64)
    high = mulhi_u64(ua, ub)
    high = high - np.where(np.asarray(a) < 0, ub, np.uint64(0)) - np.where(np.asarray(b) < 0, ua, np.uint64(0))
    return high.view(np.int64)


def mul_hi(t: PtxType) -> Any:
    if t.bits == 64:
        return mulhi_s64 if t.is_signed else mulhi_u64
    wide = _wider(t).value
    shift = t.bits
    return lambda a, b: ((a.astype(wide) * b.astype(wide)) >> shift).astype(t.value)


def mul_wide(t: PtxType) -> Any:
    wide = _wider(t).value
    return lambda a, b: a.astype(wide) * b.astype(wide)


def _mode(mods: Modifiers) -> str:
    return mods.take("lo", "hi", "wide") or "lo"


# --- the carry chain (add.cc / addc / sub.cc / subc / mad.cc / madc) ---------------------------


def _carry_slot(dc: DecodeContext) -> int:
    """The hidden CC.CF register: one u32 per thread, declared on first use."""
    if not dc.has_register("%%cc"):
        dc.scopes[0]["%%cc"] = len(dc.register_types)
        dc.register_types.append(np.dtype(np.uint32))
    return dc.slot("%%cc")


def _carry_io(dc: DecodeContext, use_in: bool, set_out: bool) -> tuple[Any, Any]:
    slot = _carry_slot(dc) if (use_in or set_out) else -1

    def carry_in(ctx: Any, idx: Idx) -> Any:
        if not use_in:
            return None
        r = ctx.regs[slot]
        return r if idx is None else r[idx]

    def carry_out(ctx: Any, idx: Idx, flag: Any) -> None:
        if not set_out:
            return
        bits = np.asarray(flag).astype(np.uint32)
        if idx is None:
            ctx.regs[slot] = np.broadcast_to(bits, (ctx.n,)).copy()
        else:
            ctx.regs[slot][idx] = bits

    return carry_in, carry_out


def _add_with_carry(a: Any, b: Any, cin: Any, subtract: bool) -> tuple[Any, Any]:
    """Unsigned a +/- b +/- cin and the carry (borrow) out."""
    if subtract:
        t = a - b
        out = a < b
        if cin is not None:
            c = cin.astype(a.dtype)
            out = out | (t < c)
            t = t - c
    else:
        t = a + b
        out = t < a
        if cin is not None:
            c = cin.astype(a.dtype)
            d = t + c
            out = out | (d < t)
            t = d
    return t, out


def _carry_arith(ins: Instruction, mods: Modifiers, dc: DecodeContext, subtract: bool, use_in: bool) -> RunFn:
    set_out = mods.flag("cc")
    t = mods.one_type({"u32", "s32", "u64", "s64"})
    u = unsigned_type(t.bits)
    d_op, a_op, b_op = operands(ins, 3)
    d, a, b = dc.writer(d_op, u), dc.reader(a_op, u), dc.reader(b_op, u)
    carry_in, carry_out = _carry_io(dc, use_in, set_out)

    def run(ctx: Any, idx: Idx) -> None:
        value, out = _add_with_carry(a(ctx, idx), b(ctx, idx), carry_in(ctx, idx), subtract)
        d(ctx, idx, value)
        carry_out(ctx, idx, out)

    return run


# --- factories -----------------------------------------------------------------------------------


def make_add_sub(subtract: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        if "cc" in mods.items:
            return _carry_arith(ins, mods, dc, subtract, use_in=False)
        sat = mods.flag("sat")
        t = mods.one_type(INT_TYPES)
        if sat:
            if t.name != "s32":
                raise DecodeError(f"{ins.opcode}: .sat is only defined for .s32")
            if subtract:
                return binary(ins, dc, t, lambda a, b: _sat_s32(a.astype(np.int64) - b))
            return binary(ins, dc, t, lambda a, b: _sat_s32(a.astype(np.int64) + b))
        return binary(ins, dc, t, (lambda a, b: a - b) if subtract else (lambda a, b: a + b))

    return factory


def make_carry_in(subtract: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        return _carry_arith(ins, mods, dc, subtract, use_in=True)

    return factory


def make_mul(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    mode = _mode(mods)
    t = mods.one_type(INT_TYPES)
    if mode == "wide":
        return binary(ins, dc, t, mul_wide(t), dst=_wider(t))
    if mode == "hi":
        return binary(ins, dc, t, mul_hi(t))
    return binary(ins, dc, t, lambda a, b: a * b)


def make_mad(ins: Instruction, mods: Modifiers, dc: DecodeContext, use_carry_in: bool = False) -> RunFn:
    mode = _mode(mods)
    set_out = mods.flag("cc")
    sat = mods.flag("sat")
    t = mods.one_type(INT_TYPES)
    if sat and not (mode == "hi" and t.name == "s32"):
        raise DecodeError(f"{ins.opcode}: .sat is only defined for mad.hi.s32")
    if mode == "wide":
        dst = _wider(t)
        product = mul_wide(t)
    else:
        dst = t
        product = mul_hi(t) if mode == "hi" else (lambda a, b: a * b)
    if use_carry_in or set_out:
        if t.bits < 32:
            raise DecodeError(f"{ins.opcode}: the carry chain needs 32- or 64-bit types")
        u = unsigned_type(dst.bits)
        d_op, a_op, b_op, c_op = operands(ins, 4)
        d, a, b, c = dc.writer(d_op, u), dc.reader(a_op, t), dc.reader(b_op, t), dc.reader(c_op, u)
        carry_in, carry_out = _carry_io(dc, use_carry_in, set_out)

        def run_carry(ctx: Any, idx: Idx) -> None:
            p = np.asarray(product(a(ctx, idx), b(ctx, idx))).view(u.value)
            value, out = _add_with_carry(p, c(ctx, idx), carry_in(ctx, idx), subtract=False)
            d(ctx, idx, value)
            carry_out(ctx, idx, out)

        return run_carry
    if sat:
        return ternary(ins, dc, t, lambda a, b, c: _sat_s32(mul_hi(t)(a, b).astype(np.int64) + c))
    return ternary(ins, dc, t, lambda a, b, c: product(a, b) + c, dst=dst)


def make_madc(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    return make_mad(ins, mods, dc, use_carry_in=True)


def _int24(t: PtxType) -> Any:
    if t.is_signed:
        return lambda x: (x.astype(np.int64) << 40) >> 40  # sign-extend the low 24 bits
    return lambda x: x.astype(np.int64) & 0xFFFFFF


def make_mul24(ins: Instruction, mods: Modifiers, dc: DecodeContext, accumulate: bool = False) -> RunFn:
    mode = mods.take("lo", "hi") or "lo"
    t = mods.one_type({"u32", "s32"})
    low24 = _int24(t)
    shift = 16 if mode == "hi" else 0

    def product(a: Any, b: Any) -> Any:
        return ((low24(a) * low24(b)) >> shift).astype(np.uint64).astype(np.uint32).view(t.value)

    if accumulate:
        return ternary(ins, dc, t, lambda a, b, c: product(a, b) + c)
    return binary(ins, dc, t, product)


def make_mad24(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    return make_mul24(ins, mods, dc, accumulate=True)


def _magnitudes(a: Any, b: Any, t: PtxType) -> tuple[Any, Any, Any, Any]:
    u = unsigned_type(t.bits).value
    a = np.asarray(a)
    b = np.asarray(b)
    ua = np.where(a < 0, -a, a).astype(t.value).view(u) if t.is_signed else a
    ub = np.where(b < 0, -b, b).astype(t.value).view(u) if t.is_signed else b
    return a, b, ua, ub


def divide(t: PtxType) -> Any:
    """Truncating division; x/0 gives all ones (PTX leaves it undefined)."""
    u = unsigned_type(t.bits).value

    def div(a: Any, b: Any) -> Any:
        a, b, ua, ub = _magnitudes(a, b, t)
        zero = ub == 0
        q = ua // np.where(zero, u.type(1), ub)
        if t.is_signed:
            q = np.where((a < 0) ^ (b < 0), -q.view(t.value), q.view(t.value)).astype(t.value)
        return np.where(zero, np.array(-1).astype(t.value) if t.is_signed else u.type(~u.type(0)), q).astype(t.value)

    return div


def remainder(t: PtxType) -> Any:
    """Remainder with the sign of the dividend; x%0 gives x (PTX leaves it undefined)."""
    u = unsigned_type(t.bits).value

    def rem(a: Any, b: Any) -> Any:
        a, b, ua, ub = _magnitudes(a, b, t)
        zero = ub == 0
        r = ua % np.where(zero, u.type(1), ub)
        if t.is_signed:
            r = np.where(a < 0, -r.view(t.value), r.view(t.value)).astype(t.value)
        return np.where(zero, a, r).astype(t.value)

    return rem


def make_div(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type(INT_TYPES)
    return binary(ins, dc, t, divide(t))


def make_rem(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type(INT_TYPES)
    return binary(ins, dc, t, remainder(t))


def make_abs(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    from .ops_common import unary

    t = mods.one_type({"s16", "s32", "s64"})
    return unary(ins, dc, t, lambda a: np.where(a < 0, -a, a).astype(t.value))


def make_neg(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    from .ops_common import unary

    t = mods.one_type({"s16", "s32", "s64"})
    return unary(ins, dc, t, lambda a: (-np.asarray(a)).astype(t.value))


def make_min_max(is_max: bool) -> Any:
    pick = np.maximum if is_max else np.minimum

    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        relu = mods.flag("relu")
        t = mods.one_type(INT_TYPES)
        if relu:
            if t.name != "s32":
                raise DecodeError(f"{ins.opcode}: .relu is only supported for .s32 here")
            return binary(ins, dc, t, lambda a, b: np.maximum(pick(a, b), np.int32(0)))
        return binary(ins, dc, t, lambda a, b: pick(a, b).astype(t.value))

    return factory


TABLE = {
    ("add", "int"): make_add_sub(subtract=False),
    ("sub", "int"): make_add_sub(subtract=True),
    ("addc", "int"): make_carry_in(subtract=False),
    ("subc", "int"): make_carry_in(subtract=True),
    ("mul", "int"): make_mul,
    ("mad", "int"): make_mad,
    ("madc", "int"): make_madc,
    ("mul24", "int"): make_mul24,
    ("mad24", "int"): make_mad24,
    ("div", "int"): make_div,
    ("rem", "int"): make_rem,
    ("abs", "int"): make_abs,
    ("neg", "int"): make_neg,
    ("min", "int"): make_min_max(is_max=False),
    ("max", "int"): make_min_max(is_max=True),
}
