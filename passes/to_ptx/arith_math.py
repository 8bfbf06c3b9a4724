"""``arith`` and ``math`` -> PTX, as tables from op to instruction.

Integers are signless in the IR; the op says the signedness (``divsi`` -> ``div.s32``). 8-bit
integers compute in 16-bit registers and are sign- or zero-extended where the high bits matter.
f16/bf16 use native instructions where the target has them and otherwise compute in f32 and
round once (exact for + - * / sqrt: f32 has more than twice the precision). Transcendentals use
the SFU ``.approx`` forms, like CUDA's fast-math intrinsics (``__expf``).

Fast math is opt-in, per op, through MLIR's fast-math flags (the ``fast-math`` pass sets them on
a whole kernel): ``afn`` on a transcendental picks the ``.ftz`` SFU form (subnormal inputs and
results flushed to zero: ``ex2.approx.ftz.f32`` is one MUFU.EX2, where the IEEE form adds a
compare and two multiplies to scale subnormals), and ``afn`` with ``arcp`` on an f32 division
``a / b`` makes it ``a * rcp.approx.ftz(b)`` (``1 / b``: the ``rcp`` alone) instead of the
correctly rounded ``div.rn.f32`` and its slow path. Without the flags the math is exact as above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from kaio.dialects import ptx
from kaio.passes.to_ptx import fp8, lop3_fusion, lowering
from kaio.passes.to_ptx.emitter import (
    PtxEmitter,
    bits_spec,
    float_spec,
    int_spec,
    is_float,
    reg_type,
    width,
)
from kaio.passes.to_ptx.f32_convert import f32_rounded_to_odd, from_f32, to_f32
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FloatAttr, IntegerType, bf16, f16, f32, f64, i1, i16, i32
from xdsl.ir import Attribute, Operation, SSAValue

from kaio.errors import KaioCompileError

# --------------------------------------------------------------------------- constants


@lowering(arith.ConstantOp)
def lower_constant(em: PtxEmitter, op: arith.ConstantOp) -> None:
    value = op.value
    data = value.value.data  # type: ignore[union-attr]
    t = op.result.type
    if isinstance(t, IntegerType) and t.width.data == 8:
        data = int(data) & 0xFF
    elif fp8.is_fp8(t):
        data = fp8.fp8_bits(float(data), t)
    em.bind(op.result, em.const(data, reg_type(t)))


# --------------------------------------------------------------------------- helpers


def _is_byte(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 8


def _widen_byte(em: PtxEmitter, v: SSAValue, t: Attribute, signed: bool) -> SSAValue:
    """An i8 value in a 16-bit register, with its high bits made meaningful."""
    if not _is_byte(t):
        return v
    s = "s" if signed else "u"
    return em.instr(ptx.CvtOp, f"{s}16.{s}8", [v], i16)


# Native half-precision arithmetic: mnemonic -> oldest sm for (f16, bf16)
_HALF_NATIVE: dict[str, tuple[int, int]] = {
    "add": (53, 90),
    "sub": (53, 90),
    "mul": (53, 90),
    "fma": (53, 80),
    "min": (80, 80),
    "max": (80, 80),
}


def _native_half(em: PtxEmitter, mnemonic: str, t: Attribute) -> bool:
    sms = _HALF_NATIVE.get(mnemonic)
    if sms is None:
        return False
    return em.arch.sm >= (sms[0] if t == f16 else sms[1])


def float_op(
    em: PtxEmitter,
    cls: type[ptx.PtxInstr],
    mods: str,
    args: Sequence[SSAValue],
    t: Attribute,
) -> SSAValue:
    """Emit a float instruction on type ``t``, through f32 where the target lacks the half op."""
    mnemonic = cls.INFO.mnemonic or cls.name[4:]
    prefix = f"{mods}." if mods else ""
    if t in (f16, bf16) and not _native_half(em, mnemonic, t):
        wide = [to_f32(em, a) for a in args]
        return from_f32(em, em.instr(cls, f"{prefix}f32", wide, f32), t)
    return em.instr(cls, f"{prefix}{float_spec(t)}", list(args), t)


def _require_f32_math(op: Operation, t: Attribute) -> None:
    if t == f64:
        raise KaioCompileError(
            f"'{op.name}' on f64 has no GPU instruction in kaio; compute it in f32 (cast with f32(x))"
        )


# --------------------------------------------------------------------------- integer arithmetic

# op -> (instruction, modifier prefix, signed, needs meaningful high bits of i8 values)
_INT_BINARY: dict[type[Operation], tuple[type[ptx.PtxInstr], str, bool | None, bool]] = {
    arith.AddiOp: (ptx.AddOp, "", True, False),
    arith.SubiOp: (ptx.SubOp, "", True, False),
    arith.MuliOp: (ptx.MulOp, "lo.", True, False),
    arith.DivSIOp: (ptx.DivOp, "", True, True),
    arith.DivUIOp: (ptx.DivOp, "", False, True),
    arith.RemSIOp: (ptx.RemOp, "", True, True),
    arith.RemUIOp: (ptx.RemOp, "", False, True),
    arith.MaxSIOp: (ptx.MaxOp, "", True, True),
    arith.MinSIOp: (ptx.MinOp, "", True, True),
    arith.MaxUIOp: (ptx.MaxOp, "", False, True),
    arith.MinUIOp: (ptx.MinOp, "", False, True),
    arith.AndIOp: (ptx.AndOp, "", None, False),
    arith.OrIOp: (ptx.OrOp, "", None, False),
    arith.XOrIOp: (ptx.XorOp, "", None, False),
}


@lowering(*_INT_BINARY)
def lower_int_binary(em: PtxEmitter, op: Operation) -> None:
    if lop3_fusion.fuse_logic_pair(em, op):  # (x & m) | c and the like: one lop3
        return
    cls, prefix, signed, widen = _INT_BINARY[type(op)]
    t = op.results[0].type
    a, b = (em.value(v) for v in op.operands)
    if widen:
        a, b = _widen_byte(em, a, t, bool(signed)), _widen_byte(em, b, t, bool(signed))
    spec = bits_spec(t) if signed is None else prefix + int_spec(t, signed)
    em.bind(op.results[0], em.instr(cls, spec, [a, b], reg_type(t)))


_SHIFTS: dict[type[Operation], tuple[type[ptx.PtxInstr], str]] = {
    arith.ShLIOp: (ptx.ShlOp, "b"),
    arith.ShRSIOp: (ptx.ShrOp, "s"),
    arith.ShRUIOp: (ptx.ShrOp, "u"),
}


@lowering(*_SHIFTS)
def lower_shift(em: PtxEmitter, op: Operation) -> None:
    cls, kind = _SHIFTS[type(op)]
    t = op.results[0].type
    a, amount = em.value(op.operands[0]), em.value(op.operands[1])
    a = _widen_byte(em, a, t, kind == "s") if kind != "b" else a
    if amount.type != i32:  # PTX shift amounts are always 32-bit
        amount = em.instr(ptx.CvtOp, f"u32.u{max(width(amount.type), 16)}", [amount], i32)
    spec = f"{kind}{max(width(t), 16)}"
    em.bind(op.results[0], em.instr(cls, spec, [a, amount], reg_type(t)))


@lowering(xmath.AbsIOp)
def lower_absi(em: PtxEmitter, op: xmath.AbsIOp) -> None:
    t = op.result.type
    a = _widen_byte(em, em.value(op.operand), t, True)
    em.bind(op.result, em.instr(ptx.AbsOp, int_spec(t, True), [a], reg_type(t)))


# --------------------------------------------------------------------------- float arithmetic

# add/sub/mul carry .rn: without a rounding modifier ptxas may contract a mul and an add into
# one fma, which rounds once where kaio's semantics (and the simulator) round each op.
_FLOAT_BINARY: dict[type[Operation], tuple[type[ptx.PtxInstr], str]] = {
    arith.AddfOp: (ptx.AddOp, "rn"),
    arith.SubfOp: (ptx.SubOp, "rn"),
    arith.MulfOp: (ptx.MulOp, "rn"),
    arith.DivfOp: (ptx.DivOp, "rn"),
    arith.MaxnumfOp: (ptx.MaxOp, ""),
    arith.MinnumfOp: (ptx.MinOp, ""),
    arith.MaximumfOp: (ptx.MaxOp, "NaN"),
    arith.MinimumfOp: (ptx.MinOp, "NaN"),
}


@lowering(*_FLOAT_BINARY)
def lower_float_binary(em: PtxEmitter, op: Operation) -> None:
    cls, mods = _FLOAT_BINARY[type(op)]
    t = op.results[0].type
    if isinstance(op, arith.DivfOp) and t != f64 and _fast(op, _RECIPROCAL):
        em.bind(op.result, from_f32(em, _approximate_division(em, op), t))
        return
    if mods == "NaN" and t == f64:
        mods = ""  # max.NaN has no f64 form; kaio's frontend uses maxnum semantics anyway
    args = [em.value(v) for v in op.operands]
    em.bind(op.results[0], float_op(em, cls, mods, args, t))


def _half_bits(em: PtxEmitter, cls: type[ptx.PtxInstr], mask: int, v: SSAValue) -> SSAValue:
    """abs/neg of f16/bf16 by flipping or clearing the sign bit (any arch)."""
    raw = em.instr(ptx.MovOp, "b16", [v], i16)
    flipped = em.instr(cls, "b16", [raw, em.const(mask, i16)], i16)
    return em.instr(ptx.MovOp, "b16", [flipped], v.type)


# sign operations: (half-precision bit trick, mask, f32/f64 instruction)
_SIGN_OPS: dict[type[Operation], tuple[type[ptx.PtxInstr], int, type[ptx.PtxInstr]]] = {
    arith.NegfOp: (ptx.XorOp, 0x8000, ptx.NegOp),
    xmath.AbsFOp: (ptx.AndOp, 0x7FFF, ptx.AbsOp),
}


@lowering(*_SIGN_OPS)
def lower_sign_op(em: PtxEmitter, op: Operation) -> None:
    bit_op, mask, float_op = _SIGN_OPS[type(op)]
    v, t = em.value(op.operands[0]), op.results[0].type
    if t in (f16, bf16):
        em.bind(op.results[0], _half_bits(em, bit_op, mask, v))
    else:
        em.bind(op.results[0], em.instr(float_op, float_spec(t), [v], t))


@lowering(xmath.FmaOp)
def lower_fma(em: PtxEmitter, op: xmath.FmaOp) -> None:
    args = [em.value(v) for v in (op.a, op.b, op.c)]
    em.bind(op.result, float_op(em, ptx.FmaOp, "rn", args, op.result.type))


# --------------------------------------------------------------------------- fast math

_APPROXIMATE = frozenset({arith.FastMathFlag.APPROX_FUNC})
_RECIPROCAL = frozenset({arith.FastMathFlag.APPROX_FUNC, arith.FastMathFlag.ALLOW_RECIP})


def _fast(op: Operation, wanted: frozenset[arith.FastMathFlag]) -> bool:
    """Whether ``op`` carries every fast-math flag in ``wanted`` (``fast`` carries them all)."""
    flags = op.properties.get("fastmath")
    return isinstance(flags, arith.FastMathFlagsAttr) and wanted <= {arith.FastMathFlag(f) for f in flags.data}


def _approx(ftz: bool) -> str:
    return "approx.ftz.f32" if ftz else "approx.f32"


def _approximate_division(em: PtxEmitter, op: Operation) -> SSAValue:
    """``a / b`` as ``a * rcp.approx.ftz(b)`` in f32 (``1 / b``: the reciprocal alone), about
    1 ulp from the rounded quotient; a zero ``b`` gives inf, as the division does."""
    lhs, rhs = op.operands
    recip = em.instr(ptx.RcpOp, "approx.ftz.f32", [to_f32(em, em.value(rhs))], f32)
    if _float_constant(lhs) == 1.0:
        return recip
    return em.instr(ptx.MulOp, "rn.f32", [to_f32(em, em.value(lhs)), recip], f32)


def _float_constant(v: SSAValue) -> float | None:
    owner = v.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, FloatAttr):
        return float(owner.value.value.data)
    return None


# --------------------------------------------------------------------------- transcendentals

# math op -> function building the f32 (or f64) result from its argument (``ftz``: the op
# allows approximate functions, so the SFU forms that flush subnormals serve)
_LOG2E = 1.0 / math.log(2.0)
_LN2 = math.log(2.0)

Transcendental = Callable[[PtxEmitter, SSAValue, bool], SSAValue]


def _sfu(cls: type[ptx.PtxInstr]) -> Transcendental:
    return lambda em, x, ftz: em.instr(cls, _approx(ftz), [x], f32)


def _exp(em: PtxEmitter, x: SSAValue, ftz: bool) -> SSAValue:
    scaled = em.instr(ptx.MulOp, "f32", [x, em.const(_LOG2E, f32)], f32)
    return em.instr(ptx.Ex2Op, _approx(ftz), [scaled], f32)


def _log(em: PtxEmitter, x: SSAValue, ftz: bool) -> SSAValue:
    l2 = em.instr(ptx.Lg2Op, _approx(ftz), [x], f32)
    return em.instr(ptx.MulOp, "f32", [l2, em.const(_LN2, f32)], f32)


def _tanh(em: PtxEmitter, x: SSAValue, ftz: bool) -> SSAValue:
    if em.arch.sm >= 75:  # tanh.approx has no .ftz form
        return em.instr(ptx.TanhOp, "approx.f32", [x], f32)
    # tanh(x) = 1 - 2 / (exp(2x) + 1): saturates correctly to +-1 for large |x|
    e = _exp(em, em.instr(ptx.AddOp, "f32", [x, x], f32), ftz)
    d = em.instr(ptx.AddOp, "f32", [e, em.const(1.0, f32)], f32)
    q = em.instr(ptx.DivOp, "approx.f32", [em.const(2.0, f32), d], f32)
    return em.instr(ptx.SubOp, "f32", [em.const(1.0, f32), q], f32)


_TRANSCENDENTAL: dict[type[Operation], Transcendental] = {
    xmath.ExpOp: _exp,
    xmath.Exp2Op: _sfu(ptx.Ex2Op),
    xmath.LogOp: _log,
    xmath.Log2Op: _sfu(ptx.Lg2Op),
    xmath.SinOp: _sfu(ptx.SinOp),
    xmath.CosOp: _sfu(ptx.CosOp),
    xmath.TanhOp: _tanh,
}


@lowering(*_TRANSCENDENTAL)
def lower_transcendental(em: PtxEmitter, op: Operation) -> None:
    t = op.results[0].type
    _require_f32_math(op, t)
    x = to_f32(em, em.value(op.operands[0]))
    em.bind(op.results[0], from_f32(em, _TRANSCENDENTAL[type(op)](em, x, _fast(op, _APPROXIMATE)), t))


# math op -> (instruction, modifiers) usable on f32 and f64
_ROUNDED_UNARY: dict[type[Operation], tuple[type[ptx.PtxInstr], str, str]] = {
    xmath.SqrtOp: (ptx.SqrtOp, "rn.", ""),
    xmath.RsqrtOp: (ptx.RsqrtOp, "approx.", ""),
    xmath.FloorOp: (ptx.CvtOp, "rmi.", "same"),
    xmath.CeilOp: (ptx.CvtOp, "rpi.", "same"),
    xmath.TruncOp: (ptx.CvtOp, "rzi.", "same"),
    xmath.RoundEvenOp: (ptx.CvtOp, "rni.", "same"),
}


@lowering(*_ROUNDED_UNARY)
def lower_rounded_unary(em: PtxEmitter, op: Operation) -> None:
    cls, mods, same = _ROUNDED_UNARY[type(op)]
    t = op.results[0].type
    x = em.value(op.operands[0])
    ft = f64 if t == f64 else f32
    if ft == f32:
        x = to_f32(em, x)
    fs = float_spec(ft)
    spec = f"{mods}{fs}.{fs}" if same else f"{mods}{fs}"
    em.bind(op.results[0], from_f32(em, em.instr(cls, spec, [x], ft), t) if ft == f32 else em.instr(cls, spec, [x], ft))


@lowering(xmath.CtPopOp, xmath.CountLeadingZerosOp)
def lower_bit_count(em: PtxEmitter, op: Operation) -> None:
    cls = ptx.PopcOp if isinstance(op, xmath.CtPopOp) else ptx.ClzOp
    t = op.results[0].type
    v = em.value(op.operands[0])
    if width(t) < 32:
        v = em.instr(ptx.CvtOp, f"u32.u{width(t) if width(t) > 8 else 16}", [v], i32)
    count = em.instr(cls, "b64" if width(t) == 64 else "b32", [v], i32)
    if cls is ptx.ClzOp and width(t) < 32:  # leading zeros counted in 32 bits
        count = em.instr(ptx.SubOp, "s32", [count, em.const(32 - width(t), i32)], i32)
    if width(t) != 32:
        count = em.instr(ptx.CvtOp, f"u{max(width(t), 16)}.u32", [count], reg_type(t))
    em.bind(op.results[0], count)


# --------------------------------------------------------------------------- comparisons

_CMPI = {
    "eq": ("eq", None), "ne": ("ne", None),
    "slt": ("lt", True), "sle": ("le", True), "sgt": ("gt", True), "sge": ("ge", True),
    "ult": ("lt", False), "ule": ("le", False), "ugt": ("gt", False), "uge": ("ge", False),
}  # fmt: skip


@lowering(arith.CmpiOp)
def lower_cmpi(em: PtxEmitter, op: arith.CmpiOp) -> None:
    pred = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    cmp, signed = _CMPI[pred]
    t = op.lhs.type
    a, b = em.value(op.lhs), em.value(op.rhs)
    if t == i1:
        diff = em.instr(ptx.XorOp, "pred", [a, b], i1)
        em.bind(op.result, diff if cmp == "ne" else em.instr(ptx.NotOp, "pred", [diff], i1))
        return
    sign = bool(signed) if signed is not None else False
    a, b = _widen_byte(em, a, t, sign), _widen_byte(em, b, t, sign)
    spec = f"{cmp}.{int_spec(t, sign) if signed is not None else bits_spec(t)}"
    em.bind(op.result, em.instr(ptx.SetpOp, spec, [a, b], i1))


_CMPF = {
    "oeq": "eq", "one": "ne", "olt": "lt", "ole": "le", "ogt": "gt", "oge": "ge",
    "ueq": "equ", "une": "neu", "ult": "ltu", "ule": "leu", "ugt": "gtu", "uge": "geu",
    "ord": "num", "uno": "nan",
}  # fmt: skip


@lowering(arith.CmpfOp)
def lower_cmpf(em: PtxEmitter, op: arith.CmpfOp) -> None:
    pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    if pred in ("false", "true"):
        em.bind(op.result, em.const(int(pred == "true"), i1))
        return
    t = op.lhs.type
    a, b = em.value(op.lhs), em.value(op.rhs)
    if t == bf16 and em.arch.sm < 90 or t == f16 and em.arch.sm < 53:
        a, b, t = to_f32(em, a), to_f32(em, b), f32
    em.bind(op.result, em.instr(ptx.SetpOp, f"{_CMPF[pred]}.{float_spec(t)}", [a, b], i1))


@lowering(arith.SelectOp)
def lower_select(em: PtxEmitter, op: arith.SelectOp) -> None:
    c, a, b = em.value(op.cond), em.value(op.lhs), em.value(op.rhs)
    t = op.result.type
    if t == i1:
        take_a = em.instr(ptx.AndOp, "pred", [c, a], i1)
        not_c = em.instr(ptx.NotOp, "pred", [c], i1)
        take_b = em.instr(ptx.AndOp, "pred", [not_c, b], i1)
        em.bind(op.result, em.instr(ptx.OrOp, "pred", [take_a, take_b], i1))
        return
    spec = float_spec(t) if t in (f32, f64) else bits_spec(t)
    em.bind(op.result, em.instr(ptx.SelpOp, spec, [a, b, c], reg_type(t)))


# --------------------------------------------------------------------------- conversions


def _int_name(t: Attribute, signed: bool) -> str:
    return ("s" if signed else "u") + str(width(t))


@lowering(arith.ExtSIOp, arith.ExtUIOp)
def lower_int_extend(em: PtxEmitter, op: Operation) -> None:
    signed = isinstance(op, arith.ExtSIOp)
    src, dst = op.operands[0].type, op.results[0].type
    v = em.value(op.operands[0])
    if src == i1:
        one = -1 if signed else 1
        rt = reg_type(dst)
        em.bind(op.results[0], em.instr(ptx.SelpOp, bits_spec(dst), [em.const(one, rt), em.const(0, rt), v], rt))
        return
    if reg_type(src) == reg_type(dst) and not _is_byte(src):
        em.bind(op.results[0], v)
        return
    spec = f"{_int_name(dst, signed)}.{_int_name(src, signed)}"
    em.bind(op.results[0], em.instr(ptx.CvtOp, spec, [v], reg_type(dst)))


@lowering(arith.TruncIOp)
def lower_trunci(em: PtxEmitter, op: arith.TruncIOp) -> None:
    src, dst = op.input.type, op.result.type
    v = em.value(op.input)
    if dst == i1:
        low = em.instr(ptx.AndOp, bits_spec(src), [v, em.const(1, reg_type(src))], reg_type(src))
        em.bind(op.result, em.instr(ptx.SetpOp, f"ne.{bits_spec(src)}", [low, em.const(0, reg_type(src))], i1))
        return
    if reg_type(src) == reg_type(dst):  # i16 -> i8: the same 16-bit register
        em.bind(op.result, v)
        return
    spec = f"{_int_name(dst, False)}.{_int_name(src, False)}"
    em.bind(op.result, em.instr(ptx.CvtOp, spec, [v], reg_type(dst)))


@lowering(arith.SIToFPOp, arith.UIToFPOp)
def lower_int_to_float(em: PtxEmitter, op: Operation) -> None:
    signed = isinstance(op, arith.SIToFPOp)
    src, dst = op.operands[0].type, op.results[0].type
    v = em.value(op.operands[0])
    if src == i1:
        one = -1.0 if signed else 1.0
        wide = em.instr(ptx.SelpOp, "f32", [em.const(one, f32), em.const(0.0, f32), v], f32)
        em.bind(op.results[0], from_f32(em, wide, dst) if dst != f64 else em.instr(ptx.CvtOp, "f64.f32", [wide], f64))
        return
    v = _widen_byte(em, v, src, signed)
    spec = f"rn.{float_spec(dst)}.{int_spec(src, signed)}"
    if dst == bf16 and em.arch.sm < 90:  # no cvt.bf16 from integers before sm_90: go by f32
        if width(src) <= 16:  # exact in f32: one rounding anyway
            wide = em.instr(ptx.CvtOp, f"rn.f32.{int_spec(src, signed)}", [v], f32)
        else:
            wide = f32_rounded_to_odd(em, v, int_spec(src, signed), f"rzi.{int_spec(src, signed)}")
        em.bind(op.results[0], from_f32(em, wide, bf16))
        return
    em.bind(op.results[0], em.instr(ptx.CvtOp, spec, [v], dst))


@lowering(arith.FPToSIOp, arith.FPToUIOp)
def lower_float_to_int(em: PtxEmitter, op: Operation) -> None:
    signed = isinstance(op, arith.FPToSIOp)
    src, dst = op.operands[0].type, op.results[0].type
    v = em.value(op.operands[0])
    if src == bf16:
        v, src = to_f32(em, v), f32
    spec = f"rzi.{_int_name(dst, signed) if not _is_byte(dst) else ('s' if signed else 'u') + '16'}.{float_spec(src)}"
    em.bind(op.results[0], em.instr(ptx.CvtOp, spec, [v], reg_type(dst)))


@lowering(arith.ExtFOp, arith.TruncFOp)
def lower_float_resize(em: PtxEmitter, op: Operation) -> None:
    src, dst = op.operands[0].type, op.results[0].type
    v = em.value(op.operands[0])
    if fp8.is_fp8(dst):
        em.bind(op.results[0], fp8.to_fp8(em, v, src, dst))
        return
    if fp8.is_fp8(src):
        em.bind(op.results[0], fp8.from_fp8(em, v, src, dst))
        return
    if src == bf16:
        v, src = to_f32(em, v), f32
        if dst == f32:
            em.bind(op.results[0], v)
            return
    rounding = "rn." if width(dst) < width(src) else ""
    if dst == bf16 and src == f64 and em.arch.sm < 90:  # cvt.rn.bf16.f64 is sm_90's
        v, src = f32_rounded_to_odd(em, v, "f64", "f64"), f32
    em.bind(op.results[0], em.instr(ptx.CvtOp, f"{rounding}{float_spec(dst)}.{float_spec(src)}", [v], dst))


@lowering(arith.BitcastOp)
def lower_bitcast(em: PtxEmitter, op: arith.BitcastOp) -> None:
    dst = op.result.type
    v = em.value(op.input)
    em.bind(op.result, em.instr(ptx.MovOp, bits_spec(dst), [v], reg_type(dst)))


__all__ = ["is_float"]
