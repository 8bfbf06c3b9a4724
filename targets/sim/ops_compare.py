"""Comparisons and selects: setp (every comparison, the .and/.or/.xor combining forms, two
destinations, packed halves), set, selp, slct.

Float comparisons follow IEEE: the plain ones (eq lt ...) are false on NaN, the u-suffixed
ones (equ ltu ...) are true on NaN; ne is ordered, so ne(NaN, x) is false.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import floatmath as fm
from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .program import Idx, RunFn
from .ptx_types import PTX_TYPES, PtxType, unsigned_type
from .syntax import Instruction, PairOperand, RegOperand, SinkOperand

_PRED = PTX_TYPES["pred"]
_ORDERED: dict[str, Callable[[Any, Any], Any]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}
_UNSIGNED_ALIASES = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_FLOAT_OPS = set(_ORDERED) | {op + "u" for op in _ORDERED} | {"num", "nan"}
_INT_OPS = set(_ORDERED) | set(_UNSIGNED_ALIASES)
_BOOL_OPS: dict[str, Callable[[Any, Any], Any]] = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


def comparison(op: str, t: PtxType) -> Callable[[Any, Any], Any]:
    """The elementwise comparison ``op`` on values of type ``t``."""
    if t.is_float:
        if op not in _FLOAT_OPS:
            raise DecodeError(f"comparison .{op} is not defined for .{t.name}")
        half = t.bits // t.lanes == 16

        def widen(x: Any) -> Any:
            return np.asarray(x).astype(np.float32) if half else np.asarray(x)

        if op == "num":
            return lambda a, b: ~(np.isnan(widen(a)) | np.isnan(widen(b)))
        if op == "nan":
            return lambda a, b: np.isnan(widen(a)) | np.isnan(widen(b))
        base = _ORDERED[op.rstrip("u")]
        if op.endswith("u"):

            def unordered(a: Any, b: Any) -> Any:
                wa, wb = widen(a), widen(b)
                return base(wa, wb) | np.isnan(wa) | np.isnan(wb)

            return unordered
        if op == "ne":
            return lambda a, b: _ordered_ne(widen(a), widen(b))
        return lambda a, b: base(widen(a), widen(b))
    if op not in _INT_OPS:
        raise DecodeError(f"comparison .{op} is not defined for .{t.name}")
    if op in _UNSIGNED_ALIASES:
        u = unsigned_type(t.bits).value
        base = _ORDERED[_UNSIGNED_ALIASES[op]]
        return lambda a, b: base(np.asarray(a).view(u), np.asarray(b).view(u))
    return _ORDERED[op]


def _ordered_ne(a: Any, b: Any) -> Any:
    return (a != b) & ~np.isnan(a) & ~np.isnan(b)


def _parse_compare(mods: Modifiers, ins: Instruction) -> tuple[str, str | None, bool]:
    op = mods.require(*(_FLOAT_OPS | _INT_OPS))
    bool_op = mods.take(*_BOOL_OPS)
    ftz = mods.flag("ftz")
    return op, bool_op, ftz


def make_setp(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    op, bool_op, ftz = _parse_compare(mods, ins)
    t = mods.one_type()
    compare = comparison(op, t)
    if ftz and t.is_float:
        fmt = fm.FORMAT_BY_DTYPE[t.value]
        plain = compare
        compare = lambda a, b: plain(fm.flush_subnormal(np.asarray(a), fmt), fm.flush_subnormal(np.asarray(b), fmt))  # noqa: E731
    ops = operands(ins, 4 if bool_op else 3)
    dest = ops[0]
    if isinstance(dest, PairOperand):
        p = dc.writer(RegOperand(dest.first) if dest.first != "_" else SinkOperand(), _PRED)
        q = dc.writer(RegOperand(dest.second), _PRED)
    else:
        p, q = dc.writer(dest, _PRED), None
    a, b = dc.reader(ops[1], t), dc.reader(ops[2], t)
    c = dc.reader(ops[3], _PRED) if bool_op else None
    combine = _BOOL_OPS[bool_op] if bool_op else None
    packed = t.lanes == 2

    def run(ctx: Any, idx: Idx) -> None:
        result = np.asarray(compare(a(ctx, idx), b(ctx, idx)))
        if packed:  # p gets the low half's comparison, q the high half's
            low, high = result[0::2], result[1::2]
            if combine is not None:
                cv = c(ctx, idx)  # type: ignore[misc]
                low, high = combine(low, cv), combine(high, cv)
            p(ctx, idx, low)
            if q is not None:
                q(ctx, idx, high)
            return
        if combine is None:
            p(ctx, idx, result)
            if q is not None:
                q(ctx, idx, ~result)
            return
        cv = c(ctx, idx)  # type: ignore[misc]
        p(ctx, idx, combine(result, cv))
        if q is not None:
            q(ctx, idx, combine(~result, cv))

    return run


def make_set(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    op, bool_op, ftz = _parse_compare(mods, ins)
    types = mods.types()
    if len(types) != 2:
        raise DecodeError(f"{ins.opcode} needs a destination and a source type")
    dtype, stype = types
    if dtype.name not in ("u32", "s32", "f32"):
        raise DecodeError(f"{ins.opcode}: destination type must be .u32, .s32 or .f32")
    compare = comparison(op, stype)
    ops = operands(ins, 4 if bool_op else 3)
    d = dc.writer(ops[0], dtype)
    a, b = dc.reader(ops[1], stype), dc.reader(ops[2], stype)
    c = dc.reader(ops[3], _PRED) if bool_op else None
    combine = _BOOL_OPS[bool_op] if bool_op else None
    true = np.float32(1.0) if dtype.name == "f32" else dtype.value.type(-1 if dtype.is_signed else 0xFFFFFFFF)
    false = dtype.value.type(0)

    def run(ctx: Any, idx: Idx) -> None:
        r = compare(a(ctx, idx), b(ctx, idx))
        if combine is not None:
            r = combine(r, c(ctx, idx))  # type: ignore[misc]
        d(ctx, idx, np.where(r, true, false).astype(dtype.value))

    return run


def make_selp(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type()
    if t.kind == "pred" or t.lanes > 1 and not t.is_float:
        raise DecodeError(f"{ins.opcode}: unsupported type")
    d_op, a_op, b_op, c_op = operands(ins, 4)
    d, a, b, c = dc.writer(d_op, t), dc.reader(a_op, t), dc.reader(b_op, t), dc.reader(c_op, _PRED)
    packed = t.lanes > 1

    def run(ctx: Any, idx: Idx) -> None:
        cond = c(ctx, idx)
        if packed:
            cond = np.repeat(np.asarray(cond), 2) if np.ndim(cond) else cond
        d(ctx, idx, np.asarray(np.where(cond, a(ctx, idx), b(ctx, idx)), dtype=t.value))

    return run


def make_slct(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    ftz = mods.flag("ftz")
    types = mods.types()
    if len(types) != 2 or types[1].name not in ("s32", "f32"):
        raise DecodeError(f"{ins.opcode} needs .dtype.s32 or .dtype.f32")
    dtype, ctype = types
    d_op, a_op, b_op, c_op = operands(ins, 4)
    d, a, b, c = dc.writer(d_op, dtype), dc.reader(a_op, dtype), dc.reader(b_op, dtype), dc.reader(c_op, ctype)

    def run(ctx: Any, idx: Idx) -> None:
        cv = np.asarray(c(ctx, idx))
        if ftz and ctype.is_float:
            cv = fm.flush_subnormal(cv, fm.F32)
        d(ctx, idx, np.asarray(np.where(cv >= 0, a(ctx, idx), b(ctx, idx)), dtype=dtype.value))

    return run


TABLE = {
    ("setp", "*"): make_setp,
    ("set", "*"): make_set,
    ("selp", "*"): make_selp,
    ("slct", "*"): make_slct,
}
