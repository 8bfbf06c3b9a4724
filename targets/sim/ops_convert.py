"""cvt: every conversion between the integer and float types PTX has, and mov (copies,
special registers, symbol addresses, vector pack/unpack).

Rules implemented (PTX ISA, "cvt"): int->int wraps, or clamps with .sat; float->int rounds per
.rni/.rzi/.rmi/.rpi and always saturates, NaN -> 0; int->float and narrowing float->float round
per .rn/.rz/.rm/.rp (64-bit integers split into exact halves and rounded to odd first); a float
with an integer rounding mode and its own type rounds to an integral value; .ftz flushes f32
subnormals; .sat clamps float results to [0, 1]; .relu clamps negatives to 0 (NaN -> canonical
NaN); .satfinite turns infinities into the largest finite value.
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
from .ptx_types import PtxType, bits_type
from .syntax import Instruction, VecOperand

_INT_ROUND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def _fmt(t: PtxType) -> fm.FloatFormat:
    return {"f16": fm.F16, "bf16": fm.BF16_FORMAT, "f32": fm.F32, "f64": fm.F64}[t.name.removesuffix("x2")]


def _int_bounds(t: PtxType) -> tuple[int, int]:
    if t.is_signed:
        return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    return 0, (1 << t.bits) - 1


def int_to_int(src: PtxType, dst: PtxType, sat: bool) -> Callable[[Any], Any]:
    if not sat:
        return lambda a: np.asarray(a).astype(dst.value)  # C casts: wrap, sign/zero extend
    s_lo, s_hi = _int_bounds(src)
    d_lo, d_hi = _int_bounds(dst)

    def clamp(a: Any) -> Any:
        a = np.asarray(a)
        if d_lo > s_lo:
            a = np.where(a < src.value.type(d_lo), src.value.type(d_lo), a)
        if d_hi < s_hi:
            a = np.where(a > src.value.type(d_hi), src.value.type(d_hi), a)
        return a.astype(dst.value)

    return clamp


def float_to_int(src: PtxType, dst: PtxType, rounding: str, ftz: bool) -> Callable[[Any], Any]:
    rnd = _INT_ROUND[rounding]
    lo, hi = _int_bounds(dst)
    limit = float(1 << (dst.bits - 1 if dst.is_signed else dst.bits))  # first value too large
    largest_below = np.nextafter(limit, 0.0)
    fmt = _fmt(src)

    def convert(a: Any) -> Any:
        x = np.asarray(a)
        if ftz:
            x = fm.flush_subnormal(x, fmt)
        r = rnd(x.astype(np.float64))
        nan = np.isnan(r)
        too_big = r >= limit
        r = np.clip(np.where(nan, 0.0, r), float(lo), largest_below)
        out = r.astype(dst.value)
        return np.where(too_big, dst.value.type(hi), out).astype(dst.value)

    return convert


def int_to_float(src: PtxType, dst: PtxType, mode: str) -> Callable[[Any], Any]:
    fmt = _fmt(dst)
    if src.bits <= 32:
        if mode == "rn" and dst.name in ("f32", "f64"):
            return lambda a: np.asarray(a).astype(dst.value)
        return lambda a: fm.round_f64(np.asarray(a).astype(np.float64), fmt, mode)

    def convert(a: Any) -> Any:
        a = np.asarray(a)
        if src.is_signed:
            high = (a >> np.int64(32)).astype(np.float64)
        else:
            high = (a >> np.uint64(32)).astype(np.float64)
        low = (a.view(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.float64)
        s, e = fm.two_sum(high * 4294967296.0, low)  # both halves exact in f64
        if fmt is fm.F64:
            return fm.nudge(s, np.sign(e), mode)
        return fm.round_f64(fm.to_odd(s, e), fmt, mode)

    return convert


def float_to_float(src: PtxType, dst: PtxType, mode: str | None, irnd: str | None) -> Callable[[Any], Any]:
    dfmt = _fmt(dst)
    if irnd is not None:
        if src.name != dst.name.removesuffix("x2"):
            raise DecodeError("an integer rounding mode needs the same source and destination float type")
        rnd = _INT_ROUND[irnd]
        return lambda a: rnd(np.asarray(a).astype(np.float64)).astype(dst.value)
    if dfmt.precision >= _fmt(src).precision and dfmt.emax >= _fmt(src).emax:
        return lambda a: np.asarray(a).astype(dst.value)  # widening: exact
    mode = mode or "rn"
    if mode == "rn" and dfmt is not fm.BF16_FORMAT:
        return lambda a: np.asarray(a).astype(dst.value)  # numpy's narrowing casts round to nearest even
    return lambda a: fm.round_f64(np.asarray(a).astype(np.float64), dfmt, mode)


def _post(dst: PtxType, ftz: bool, sat: bool, relu: bool, satfinite: bool) -> Callable[[Any], Any] | None:
    if not dst.is_float or not (ftz or sat or relu or satfinite):
        return None
    fmt = _fmt(dst)
    nan: Any = {16: np.uint16(0x7FFF), 32: np.uint32(0x7FFFFFFF), 64: np.uint64(0x7FFFFFFFFFFFFFFF)}[dst.bits // dst.lanes]

    def post(r: Any) -> Any:
        r = np.asarray(r)
        if ftz:
            r = fm.flush_subnormal(r, fmt)
        if satfinite:
            r = np.where(np.isinf(r), np.copysign(dst.value.type(fmt.max_finite), r), r).astype(dst.value)
        if relu:
            r = np.where(np.isnan(r), nan.view(dst.value), np.where(r < 0, dst.value.type(0), r))
        if sat:
            r = fm.saturate(r)
        return r

    return post


def conversion(src: PtxType, dst: PtxType, mods: Modifiers, ins: Instruction) -> Callable[[Any], Any]:
    irnd = mods.take(*_INT_ROUND)
    frnd = mods.take(*fm.ROUNDING_MODES)
    ftz, sat = mods.flag("ftz"), mods.flag("sat")
    relu, satfinite = mods.flag("relu"), mods.flag("satfinite")
    if irnd and frnd:
        raise DecodeError(f"{ins.opcode}: two rounding modes")
    lane = PtxType(dst.name.removesuffix("x2"), dst.kind, dst.bits // dst.lanes, dst.value)
    if src.is_integer and lane.is_integer:
        core = int_to_int(src, lane, sat)
    elif src.is_float and lane.is_integer:
        core = float_to_int(src, lane, irnd or "rzi", ftz)
        ftz = False
    elif src.is_integer and lane.is_float:
        core = int_to_float(src, lane, frnd or "rn")
    elif src.is_float and lane.is_float:
        inner = float_to_float(src, lane, frnd, irnd)
        if ftz and src.name == "f32":
            src_fmt = fm.F32
            core = lambda a: inner(fm.flush_subnormal(np.asarray(a), src_fmt))  # noqa: E731
        else:
            core = inner
    else:
        raise DecodeError(f"{ins.opcode}: cannot convert .{src.name} to .{dst.name}")
    post = _post(lane, ftz, sat and lane.is_float, relu, satfinite)
    if post is None:
        return core
    return lambda a: post(core(a))


def make_cvt(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    types = mods.types()
    if len(types) != 2:
        raise DecodeError(f"{ins.opcode} needs a destination and a source type")
    dst, src = types
    if "e4m3x2" in (dst.name, src.name) or "e5m2x2" in (dst.name, src.name):
        return make_fp8_cvt(ins, dst, src, mods, dc)
    convert = conversion(src, dst, mods, ins)
    if dst.lanes == 2:  # cvt.rn.f16x2.f32 d, a, b: a -> high half, b -> low half
        d_op, a_op, b_op = operands(ins, 3)
        d, a, b = dc.writer(d_op, dst), dc.reader(a_op, src), dc.reader(b_op, src)

        def run_packed(ctx: Any, idx: Idx) -> None:
            n = ctx.n if idx is None else idx.size
            out = np.empty(2 * n, dtype=dst.value)
            out[0::2] = convert(b(ctx, idx))
            out[1::2] = convert(a(ctx, idx))
            d(ctx, idx, out)

        return run_packed
    d_op, a_op = operands(ins, 2)
    d, a = dc.writer(d_op, dst), dc.reader(a_op, src)

    def run(ctx: Any, idx: Idx) -> None:
        d(ctx, idx, np.array(convert(a(ctx, idx)), dtype=dst.value))  # np.array: always a copy

    return run


def make_mov(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    t = mods.one_type()
    d_op, a_op = operands(ins, 2)
    if isinstance(a_op, VecOperand):
        return _pack(d_op, a_op, t, dc)
    if isinstance(d_op, VecOperand):
        return _unpack(d_op, a_op, t, dc)
    d, a = dc.writer(d_op, t), dc.reader(a_op, t)

    def run(ctx: Any, idx: Idx) -> None:
        v = a(ctx, idx)
        d(ctx, idx, v.copy() if isinstance(v, np.ndarray) else v)

    return run


def _pieces(vec: VecOperand, t: PtxType) -> tuple[PtxType, int]:
    count = len(vec.items)
    if count not in (2, 4) or t.bits % count or t.bits // count < 8:
        raise DecodeError(f"cannot split .{t.name} into {count} parts")
    return bits_type(t.bits // count), t.bits // count


def _pack(d_op: Any, vec: VecOperand, t: PtxType, dc: DecodeContext) -> RunFn:
    part, width = _pieces(vec, t)
    d = dc.writer(d_op, bits_type(t.bits))
    parts = [dc.reader(item, part) for item in vec.items]
    container = bits_type(t.bits).value

    def run(ctx: Any, idx: Idx) -> None:
        out = None
        for i, read in enumerate(parts):  # element 0 is the least significant
            piece = np.asarray(read(ctx, idx)).astype(np.uint64) << np.uint64(i * width)
            out = piece if out is None else out | piece
        d(ctx, idx, np.asarray(out).astype(container))

    return run


def _unpack(vec: VecOperand, a_op: Any, t: PtxType, dc: DecodeContext) -> RunFn:
    part, width = _pieces(vec, t)
    a = dc.reader(a_op, bits_type(t.bits))
    outs = [dc.writer(item, part) for item in vec.items]
    mask = np.uint64((1 << width) - 1)

    def run(ctx: Any, idx: Idx) -> None:
        whole = np.asarray(a(ctx, idx)).astype(np.uint64)
        for i, write in enumerate(outs):
            write(ctx, idx, ((whole >> np.uint64(i * width)) & mask).astype(part.value))

    return run


TABLE = {
    ("cvt", "*"): make_cvt,
    ("mov", "*"): make_mov,
}


# ------------------------------------------------------------------------------ FP8 pairs
# cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d16, a, b   (a -> high byte, b -> low byte)
# cvt.rn.satfinite.{e4m3x2,e5m2x2}.f16x2 d16, a32  (each half -> its byte)
# cvt.rn.f16x2.{e4m3x2,e5m2x2} d32, a16            (each byte -> its half, exact)
# Rounding is to nearest even. satfinite: a result beyond the largest finite value (an infinite
# input included) is that value with the input's sign; a NaN input gives the canonical 0x7F
# whatever its sign or payload (the ISA's NaN; CUDA's cuda_fp8.hpp models the same). Unpacking
# gives the exact f16; any NaN becomes f16's canonical 0x7FFF.

_FP8_MAX_BITS = {"e4m3": np.uint8(0x7E), "e5m2": np.uint8(0x7B)}


def to_fp8_bits(x: Any, name: str) -> Any:
    """Floats (f16/f32/f64 arrays) -> bytes of their fp8 ``name`` conversion (rn.satfinite)."""
    from .ptx_types import PTX_TYPES

    wide = np.asarray(x).astype(np.float64)  # exact: the rounding below is the only one
    with np.errstate(over="ignore", invalid="ignore"):
        bits = wide.astype(PTX_TYPES[name].value).view(np.uint8)
    nan_in = np.isnan(wide)
    overflow = ~nan_in & ((bits & np.uint8(0x7F)) > _FP8_MAX_BITS[name])  # inf, or e4m3's NaN
    sign = np.where(np.signbit(wide), np.uint8(0x80), np.uint8(0))
    bits = np.where(overflow, sign | _FP8_MAX_BITS[name], bits)
    return np.where(nan_in, np.uint8(0x7F), bits).astype(np.uint8)


def from_fp8_bits(b: Any, name: str) -> Any:
    """Bytes of fp8 ``name`` values -> the f16 bit patterns of their exact values."""
    from .ptx_types import PTX_TYPES

    values = np.asarray(b).astype(np.uint8).view(PTX_TYPES[name].value).astype(np.float16)
    return np.where(np.isnan(values), np.uint16(0x7FFF), values.view(np.uint16)).astype(np.uint16)


def make_fp8_cvt(ins: Instruction, dst: PtxType, src: PtxType, mods: Modifiers, dc: DecodeContext) -> RunFn:
    from .ptx_types import PTX_TYPES

    if mods.take("rn") is None:
        raise DecodeError(f"{ins.opcode}: fp8 conversions round to nearest (.rn)")
    b16, b32 = PTX_TYPES["b16"], PTX_TYPES["b32"]
    if dst.name in ("e4m3x2", "e5m2x2"):
        if not mods.flag("satfinite"):
            raise DecodeError(f"{ins.opcode}: a conversion to .{dst.name} needs .satfinite")
        name = dst.name.removesuffix("x2")
        if src.name == "f32":
            d_op, a_op, b_op = operands(ins, 3)
            d, a, b = dc.writer(d_op, b16), dc.reader(a_op, src), dc.reader(b_op, src)

            def run_f32(ctx: Any, idx: Idx) -> None:
                hi, lo = to_fp8_bits(a(ctx, idx), name), to_fp8_bits(b(ctx, idx), name)
                d(ctx, idx, (hi.astype(np.uint16) << np.uint16(8)) | lo.astype(np.uint16))

            return run_f32
        if src.name != "f16x2":
            raise DecodeError(f"{ins.opcode}: converts to .{dst.name} from .f32 or .f16x2")
        d_op, a_op = operands(ins, 2)
        d, w = dc.writer(d_op, b16), dc.reader(a_op, b32)

        def run_half(ctx: Any, idx: Idx) -> None:
            word = np.asarray(w(ctx, idx)).astype(np.uint32)
            halves = [((word >> np.uint32(s)) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16) for s in (0, 16)]
            lo, hi = (to_fp8_bits(h, name).astype(np.uint16) for h in halves)
            d(ctx, idx, (hi << np.uint16(8)) | lo)

        return run_half
    if dst.name != "f16x2" or src.name not in ("e4m3x2", "e5m2x2"):
        raise DecodeError(f"{ins.opcode}: fp8 pairs unpack to .f16x2 only")
    name = src.name.removesuffix("x2")
    d_op, a_op = operands(ins, 2)
    d, h = dc.writer(d_op, b32), dc.reader(a_op, b16)

    def run_unpack(ctx: Any, idx: Idx) -> None:
        pair = np.asarray(h(ctx, idx)).astype(np.uint16)
        lo = from_fp8_bits(pair & np.uint16(0xFF), name).astype(np.uint32)
        hi = from_fp8_bits(pair >> np.uint16(8), name).astype(np.uint32)
        d(ctx, idx, (hi << np.uint32(16)) | lo)

    return run_unpack
