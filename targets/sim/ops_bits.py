"""Bitwise and bit-field instructions: and or xor not cnot shl shr lop3 prmt bfe bfi bfind
popc clz brev. Field arithmetic is done in uint64 so 32- and 64-bit forms share one code path."""

from __future__ import annotations

from typing import Any

import numpy as np

from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import binary, operands, ternary, unary
from .program import Idx, RunFn
from .ptx_types import PTX_TYPES, PtxType, unsigned_type
from .syntax import ImmOperand, Instruction

_U32 = PTX_TYPES["u32"]
_U64 = np.uint64
_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_LOGIC_TYPES = {"b16", "b32", "b64", "pred", "u16", "u32", "u64", "s16", "s32", "s64"}


def _u64(x: Any, t: PtxType) -> Any:
    """Any integer of type t -> its bits zero-extended to uint64."""
    x = np.asarray(x)
    if x.dtype != t.container:
        x = x.view(t.container)
    return x.astype(np.uint64)


def _back(x: Any, t: PtxType) -> Any:
    return np.asarray(x).astype(t.container).view(t.value)


def make_logic(fn: Any) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        t = mods.one_type(_LOGIC_TYPES)
        return binary(ins, dc, t, fn)

    return factory


def make_not(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type(_LOGIC_TYPES)
    return unary(ins, dc, t, lambda a: ~a)


def make_cnot(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type({"b16", "b32", "b64"})
    return unary(ins, dc, t, lambda a: (np.asarray(a) == 0).astype(t.value))


def make_shift(left: bool) -> Any:
    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        allowed = {"b16", "b32", "b64"} if left else {"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"}
        t = mods.one_type(allowed)
        width = t.bits
        limit = np.uint32(width - 1)

        def shift(a: Any, b: Any) -> Any:
            amount = np.minimum(b, limit).astype(t.container)
            big = b > limit  # PTX clamps: shifting by the width or more empties the value
            if left:
                return np.where(big, t.value.type(0), a << amount).astype(t.value)
            if t.is_signed:
                return (a >> amount.view(t.value)).astype(t.value)  # arithmetic: saturates at width-1
            return np.where(big, t.value.type(0), a >> amount).astype(t.value)

        return binary(ins, dc, t, shift, b_type=_U32)

    return factory


def make_lop3(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type({"b32"})
    d_op, a_op, b_op, c_op, lut_op = operands(ins, 5)
    if not isinstance(lut_op, ImmOperand) or lut_op.kind != "int":
        raise DecodeError("lop3's lookup table must be an integer literal")
    lut = int(lut_op.value) & 0xFF
    # The lookup table names the minterms of (a, b, c) that are true: OR them together.
    minterms = [((i >> 2) & 1, (i >> 1) & 1, i & 1) for i in range(8) if (lut >> i) & 1]
    d, a, b, c = dc.writer(d_op, t), dc.reader(a_op, t), dc.reader(b_op, t), dc.reader(c_op, t)

    def run(ctx: Any, idx: Idx) -> None:
        va, vb, vc = a(ctx, idx), b(ctx, idx), c(ctx, idx)
        na, nb, nc = ~va, ~vb, ~vc
        out = np.zeros_like(np.asarray(va)) if not minterms else None
        for ta, tb, tc in minterms:
            term = (va if ta else na) & (vb if tb else nb) & (vc if tc else nc)
            out = term if out is None else out | term
        d(ctx, idx, np.asarray(out, dtype=np.uint32))

    return run


def _prmt_select(mode: str | None, c: Any) -> list[Any]:
    """Per destination byte: (source byte index 0..7, sign-replicate flag or None)."""
    c = np.asarray(c).astype(np.uint32)
    if mode is None:
        return [((c >> np.uint32(4 * k)) & np.uint32(7), ((c >> np.uint32(4 * k + 3)) & np.uint32(1)).astype(bool)) for k in range(4)]
    s = c & np.uint32(3)
    tables = {
        "f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
        "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
        "rc8": [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
        "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
        "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
        "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]],
    }[mode]
    table = np.array(tables, dtype=np.uint32)  # [selector][destination byte]
    return [(table[s, k], None) for k in range(4)]


def make_prmt(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    mode = mods.take("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")
    mods.one_type({"b32"})
    u32 = _U32

    def permute(a: Any, b: Any, c: Any) -> Any:
        source = (np.asarray(b).astype(np.uint64) << np.uint64(32)) | np.asarray(a).astype(np.uint64)
        out = np.zeros(np.broadcast(source, np.asarray(c)).shape, dtype=np.uint64)
        for k, (sel, sign) in enumerate(_prmt_select(mode, c)):
            byte = (source >> (sel.astype(np.uint64) * np.uint64(8))) & np.uint64(0xFF)
            if sign is not None:
                byte = np.where(sign, np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
            out |= byte << np.uint64(8 * k)
        return out.astype(np.uint32)

    return ternary(ins, dc, u32, permute)


def make_bfe(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type({"u32", "u64", "s32", "s64", "b32", "b64"})
    msb = _U64(t.bits - 1)

    def extract(a: Any, b: Any, c: Any) -> Any:
        x = _u64(a, t)
        pos = (np.asarray(b) & np.uint32(0xFF)).astype(np.uint64)
        length = (np.asarray(c) & np.uint32(0xFF)).astype(np.uint64)
        beyond = pos > msb
        avail = np.where(beyond, _U64(0), msb + _ONE - np.minimum(pos, msb))
        taken = np.minimum(length, avail)
        mask = np.where(taken >= 64, _ALL, (_ONE << np.minimum(taken, _U64(63))) - _ONE)
        field = np.where(beyond, _U64(0), x >> np.minimum(pos, msb)) & mask
        if t.is_signed:
            top = np.minimum(pos + length - _ONE, msb)
            sbit = (length != 0) & (((x >> np.minimum(top, msb)) & _ONE) == _ONE)
            field = np.where(sbit, field | ~mask, field)
        return _back(field, t)

    return ternary(ins, dc, t, extract, b_type=_U32, c_type=_U32)


def make_bfi(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type({"b32", "b64"})
    f_op, a_op, b_op, c_op, d_op = operands(ins, 5)
    f, a, b = dc.writer(f_op, t), dc.reader(a_op, t), dc.reader(b_op, t)
    c, n = dc.reader(c_op, _U32), dc.reader(d_op, _U32)
    width = _U64(t.bits)

    def run(ctx: Any, idx: Idx) -> None:
        pos = (np.asarray(c(ctx, idx)) & np.uint32(0xFF)).astype(np.uint64)
        length = (np.asarray(n(ctx, idx)) & np.uint32(0xFF)).astype(np.uint64)
        taken = np.minimum(length, np.where(pos >= width, _U64(0), width - np.minimum(pos, width)))
        field = np.where(taken >= 64, _ALL, (_ONE << np.minimum(taken, _U64(63))) - _ONE)
        shift = np.minimum(pos, width - _ONE)
        mask = np.where(taken == 0, _U64(0), field << shift)
        base = _u64(b(ctx, idx), t)
        insert = _u64(a(ctx, idx), t) << shift
        f(ctx, idx, _back((base & ~mask) | (insert & mask), t))

    return run


def bit_length(x: Any, bits: int) -> Any:
    """Number of significant bits of unsigned values (0 for 0)."""
    x = np.asarray(x).astype(np.uint64)
    if bits > 32:
        hi = x >> _U64(32)
        lo = x & _U64(0xFFFFFFFF)
        return np.where(hi != 0, 32 + bit_length(hi, 32), bit_length(lo, 32))
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)  # exact below 2**53


def make_popc(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type({"b32", "b64"})
    return unary(ins, dc, t, lambda a: np.bitwise_count(np.asarray(a)).astype(np.uint32), dst=_U32)


def make_clz(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type({"b32", "b64"})
    return unary(ins, dc, t, lambda a: (t.bits - bit_length(a, t.bits)).astype(np.uint32), dst=_U32)


def make_bfind(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    shiftamt = mods.flag("shiftamt")
    t = mods.one_type({"u32", "u64", "s32", "s64"})

    def find(a: Any) -> Any:
        x = np.asarray(a)
        if t.is_signed:  # the most significant bit that differs from the sign
            x = np.where(x < 0, ~x, x)
        n = bit_length(_u64(x, unsigned_type(t.bits)), t.bits)
        pos = n - 1
        if shiftamt:
            pos = np.where(n == 0, pos, t.bits - 1 - pos)
        return np.where(n == 0, np.uint32(0xFFFFFFFF), pos.astype(np.uint32)).astype(np.uint32)

    return unary(ins, dc, t, find, dst=_U32)


_BYTE_REVERSED = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=np.uint8)


def make_brev(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type({"b32", "b64"})
    nbytes = t.nbytes

    def reverse(a: Any) -> Any:
        x = np.atleast_1d(np.asarray(a))
        flipped = _BYTE_REVERSED[x.view(np.uint8).reshape(-1, nbytes)][:, ::-1]
        out = np.ascontiguousarray(flipped).view(t.container).reshape(-1)
        return out if np.ndim(a) else out[0]

    return unary(ins, dc, t, reverse)


def make_shf(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    """Funnel shift of the 64-bit value b:a; shf.l keeps the high word, shf.r the low one."""
    direction = mods.require("l", "r")
    clamp = mods.require("clamp", "wrap") == "clamp"
    t = mods.one_type({"b32"})

    def funnel(a: Any, b: Any, c: Any) -> Any:
        c = np.asarray(c).astype(np.uint64)
        n = np.minimum(c, _U64(32)) if clamp else c & _U64(0x1F)
        source = (np.asarray(b).astype(np.uint64) << _U64(32)) | np.asarray(a).astype(np.uint64)
        if direction == "l":
            return ((source << n) >> _U64(32)).astype(np.uint32)
        return ((source >> n) & _U64(0xFFFFFFFF)).astype(np.uint32)

    return ternary(ins, dc, t, funnel, c_type=_U32)


def _lanes(x: Any, width: int, signed: bool) -> list[Any]:
    """The packed 8- or 16-bit lanes of 32-bit values, sign- or zero-extended to int64."""
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    out = []
    for k in range(32 // width):
        lane = (x >> (width * k)) & ((1 << width) - 1)
        if signed:
            lane = lane - ((lane >> (width - 1)) << width)
        out.append(lane)
    return out


def make_dot(pairs: int) -> Any:
    """dp4a (four byte products) and dp2a (two 16-bit by byte products), accumulated in 32 bits."""

    def factory(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
        half = mods.require("lo", "hi") if pairs == 2 else None
        types = mods.types()
        if len(types) != 2 or any(t.name not in ("u32", "s32") for t in types):
            raise DecodeError(f"{ins.opcode} needs .atype.btype from .u32/.s32")
        a_signed, b_signed = types[0].is_signed, types[1].is_signed
        out = PTX_TYPES["u32"] if not (a_signed or b_signed) else PTX_TYPES["s32"]
        first = 2 if half == "hi" else 0

        def dot(a: Any, b: Any, c: Any) -> Any:
            va = _lanes(a, 8 if pairs == 4 else 16, a_signed)
            vb = _lanes(b, 8, b_signed)[first : first + pairs]
            total = np.asarray(c).astype(np.int64)
            for x, y in zip(va, vb):
                total = total + x * y
            return (total & 0xFFFFFFFF).astype(np.uint32).view(out.value)

        return ternary(ins, dc, _U32, dot, dst=out, c_type=out)

    return factory


TABLE = {
    ("and", "int"): make_logic(lambda a, b: a & b),
    ("or", "int"): make_logic(lambda a, b: a | b),
    ("xor", "int"): make_logic(lambda a, b: a ^ b),
    ("not", "int"): make_not,
    ("cnot", "int"): make_cnot,
    ("shl", "int"): make_shift(left=True),
    ("shr", "int"): make_shift(left=False),
    ("lop3", "int"): make_lop3,
    ("prmt", "int"): make_prmt,
    ("bfe", "int"): make_bfe,
    ("bfi", "int"): make_bfi,
    ("bfind", "int"): make_bfind,
    ("popc", "int"): make_popc,
    ("clz", "int"): make_clz,
    ("brev", "int"): make_brev,
    ("shf", "int"): make_shf,
    ("dp4a", "int"): make_dot(4),
    ("dp2a", "int"): make_dot(2),
}
