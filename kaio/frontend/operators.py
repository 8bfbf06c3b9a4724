"""Typed operators: Python operator + kaio types -> the signless arith/math op.

Signedness lives in the kaio type and picks the op (``divsi``/``divui``, ``cmpi slt``/``ult``,
``shrsi``/``shrui``, ``extsi``/``extui``). Compile-time operands fold here with the same
semantics; a literal meeting a runtime value adapts to its type.
"""

from __future__ import annotations

import ast
import math as pymath
from collections.abc import Callable
from typing import Any

from xdsl.dialects import arith, scf
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Block, Operation, Region, SSAValue

from kaio.dtypes import ScalarType, bool_, f32
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.emitter import Emitter
from kaio.frontend.typerules import (
    adapt,
    check_kind,
    check_loop_value,
    default_type,
    fold_binary,
    fold_compare,
    int_range,
    literal_kind,
    normalize,
    require_not_fp8,
    round_float,
    trunc_div,
    unify,
)
from kaio.frontend.values import Const, Scalar, TileType, TileValue, Value, type_name

# the spelling of Python's operators (ast node types) that the functions below take
BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
    ast.BitXor: "^",
}  # fmt: skip
UNARYOPS: dict[type[ast.unaryop], str] = {
    ast.USub: "-",
    ast.UAdd: "+",
    ast.Invert: "~",
    ast.Not: "not",
}
CMPOPS: dict[type[ast.cmpop], str] = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
}  # fmt: skip

BinaryOp = Callable[[SSAValue, SSAValue], Operation]
ConversionOp = Callable[[SSAValue, Any], Operation]

_INT_OPS: dict[str, tuple[BinaryOp, BinaryOp]] = {
    # operator: (signed op, unsigned op)
    "+": (arith.AddiOp, arith.AddiOp),
    "-": (arith.SubiOp, arith.SubiOp),
    "*": (arith.MuliOp, arith.MuliOp),
    "//": (arith.DivSIOp, arith.DivUIOp),
    "%": (arith.RemSIOp, arith.RemUIOp),
    "&": (arith.AndIOp, arith.AndIOp),
    "|": (arith.OrIOp, arith.OrIOp),
    "^": (arith.XOrIOp, arith.XOrIOp),
    "<<": (arith.ShLIOp, arith.ShLIOp),
    ">>": (arith.ShRSIOp, arith.ShRUIOp),
}
_FLOAT_OPS: dict[str, BinaryOp] = {
    "+": arith.AddfOp,
    "-": arith.SubfOp,
    "*": arith.MulfOp,
    "/": arith.DivfOp,
}
_CMPI = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_CMPF = {"==": "oeq", "!=": "une", "<": "olt", "<=": "ole", ">": "ogt", ">=": "oge"}


def require_scalar(v: Value, what: str) -> Scalar | Const:
    if isinstance(v, Scalar | Const):
        return v
    raise SemanticError(f"{what} needs a scalar value, got {type_name(v)}")


def materialize(em: Emitter, v: Value, t: ScalarType | TileType) -> SSAValue:
    """``v`` as an SSA value of type ``t`` (a literal adapts; a typed value must already be ``t``)."""
    if isinstance(t, TileType):
        if not isinstance(v, TileValue) or v.type != t:
            raise SemanticError(f"expected {t.name}, got {type_name(v)}")
        return v.ssa
    if isinstance(v, Scalar):
        if v.type is not t:
            if v.bounds is None:
                raise SemanticError(f"expected {t.name}, got {v.type.name}")
            check_loop_value(v, t, f"a {t.name} value")
            return _cast_runtime(em, v.ssa, v.type, t).ssa  # exact: every value fits
        return v.ssa
    if isinstance(v, Const):
        c = adapt(v, t)
        return em.constant(c.value, t)
    raise SemanticError(f"expected a {t.name} value, got {type_name(v)}")


def compile_time(v: Value) -> Const | None:
    """The compile-time value of ``v``: a constant, or the stand-in of an unknown constexpr."""
    if isinstance(v, Const):
        return v
    if isinstance(v, Scalar) and v.stand_in is not None:
        return Const(v.stand_in, v.type)
    return None


def _with_stand_in(result: Value, fold: Const | None) -> Value:
    if isinstance(result, Scalar) and fold is not None:
        return Scalar(result.ssa, result.type, fold.value)
    return result


def _try_fold(op: str, a: Value, b: Value, t: ScalarType) -> Const | None:
    ca, cb = compile_time(a), compile_time(b)
    if ca is None or cb is None:
        return None
    try:
        return fold_binary(op, adapt(ca, t), adapt(cb, t), t)
    except SemanticError:
        return None


# ---------------------------------------------------------------------------- binary operators


def binary(em: Emitter, op: str, a: Value, b: Value) -> Value:
    what = f"operator `{op}`"
    a, b = require_scalar(a, what), require_scalar(b, what)
    if op == "**":
        return power(em, a, b)
    if isinstance(a, Const) and isinstance(b, Const):
        if a.type is None and b.type is None:
            return fold_binary(op, a, b, None)
        t = unify(a, b, what)
        return fold_binary(op, adapt(a, t), adapt(b, t), t)
    t = unify(a, b, what)
    _check_operator(op, t)
    if op in ("<<", ">>") and isinstance(b, Const) and not 0 <= int(b.value) < t.bits:
        raise SemanticError(
            f"shift amount {b.value} is out of range for {t.name} (0 .. {t.bits - 1})"
        )
    if op in ("//", "%") and t.is_int and isinstance(b, Const) and b.value == 0:
        raise SemanticError("integer division by zero")
    x, y = materialize(em, a, t), materialize(em, b, t)
    result = Scalar(emit_binary(em, op, x, y, t), t, bounds=_loop_bounds(op, a, b, t))
    return _with_stand_in(result, _try_fold(op, a, b, t))


def _loop_bounds(op: str, a: Scalar | Const, b: Scalar | Const, t: ScalarType) -> tuple[int, int] | None:
    """The bounds of ``a op b`` when it is a loop value again: + - * of loop values and int
    literals whose result range still fits ``t`` (then no value wrapped)."""
    if op not in ("+", "-", "*"):
        return None
    ranges = []
    for v in (a, b):
        if isinstance(v, Scalar) and v.bounds is not None and v.type is t:
            ranges.append(v.bounds)
        elif isinstance(v, Const) and v.type is None and literal_kind(v) == "int":
            ranges.append((int(v.value), int(v.value)))
        else:
            return None
    (alo, ahi), (blo, bhi) = ranges
    if op == "+":
        lo, hi = alo + blo, ahi + bhi
    elif op == "-":
        lo, hi = alo - bhi, ahi - blo
    else:
        corners = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        lo, hi = min(corners), max(corners)
    tlo, thi = int_range(t)
    return (lo, hi) if tlo <= lo and hi <= thi else None


def _check_operator(op: str, t: ScalarType) -> None:
    if op in ("+", "-", "*"):
        check_kind(t, op, ints=True, floats=True, bools=False)
    elif op == "/":
        check_kind(t, op, ints=False, floats=True, bools=False)
    elif op == "//":
        check_kind(t, op, ints=True, floats=False, bools=False)
    elif op == "%":
        check_kind(t, op, ints=True, floats=True, bools=False)
    elif op in ("&", "|", "^"):
        check_kind(t, op, ints=True, floats=False, bools=True)
    elif op in ("<<", ">>"):
        check_kind(t, op, ints=True, floats=False, bools=False)


def emit_binary(em: Emitter, op: str, x: SSAValue, y: SSAValue, t: ScalarType) -> SSAValue:
    if t.is_float:
        if op == "%":
            return _fmod(em, x, y)
        return em.value(_FLOAT_OPS[op](x, y))
    signed_op, unsigned_op = _INT_OPS[op]
    cls = signed_op if t.kind == "int" else unsigned_op
    return em.value(cls(x, y))


def _fmod(em: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
    """C ``fmod``: ``x - trunc(x / y) * y`` (the result has the sign of ``x``).

    xDSL 0.74's arith has no ``remf``; this expansion is exact while ``x / y`` is exactly
    representable, which covers the usual uses (wrapping an angle, a phase, an index)."""
    quotient = em.value(xmath.TruncOp(em.value(arith.DivfOp(x, y))))
    return em.value(arith.SubfOp(x, em.value(arith.MulfOp(quotient, y))))


# ---------------------------------------------------------------------------- power


def power(em: Emitter, base: Scalar | Const, exp: Scalar | Const) -> Value:
    if isinstance(base, Const) and isinstance(exp, Const):
        return _fold_power(base, exp)
    if isinstance(exp, Const):
        t = base.type if isinstance(base, Scalar) else default_type(base)
        e = exp.value
        if isinstance(e, bool):
            raise SemanticError("a bool exponent is not allowed")
        integral = isinstance(e, int) or float(e).is_integer()
        if t.is_int:
            if not isinstance(e, int) or e < 0:
                raise SemanticError(
                    f"an integer base needs a non-negative int literal exponent, got {e!r}",
                    "cast the base to a float type for other exponents",
                )
            return Scalar(_repeated_multiply(em, materialize(em, base, t), int(e), t), t)
        check_kind(t, "**", ints=True, floats=True, bools=False)
        x = materialize(em, base, t)
        if integral:
            n = int(e)
            result = _repeated_multiply(em, x, abs(n), t)
            if n < 0:
                result = em.value(arith.DivfOp(em.constant(1.0, t), result))
            return Scalar(result, t)
        if e == 0.5:
            return Scalar(em.value(xmath.SqrtOp(x)), t)
        if e == -0.5:
            return Scalar(em.value(xmath.RsqrtOp(x)), t)
        # x ** y == exp2(y * log2(x)) for x > 0 (documented).
        log = em.value(xmath.Log2Op(x))
        scaled = em.value(arith.MulfOp(em.constant(adapt(Const(float(e)), t).value, t), log))
        return Scalar(em.value(xmath.Exp2Op(scaled)), t)
    t = unify(base, exp, "operator `**`")
    if t.is_int:
        return Scalar(_runtime_int_power(em, materialize(em, base, t), materialize(em, exp, t), t), t)
    if not t.is_float:
        raise SemanticError(f"`**` needs numbers, got {t.name}")
    y = materialize(em, exp, t)
    if isinstance(base, Const):
        if float(base.value) <= 0:
            raise SemanticError("`c ** y` with a runtime exponent needs a positive base")
        log_c = em.constant(round_float(pymath.log2(float(base.value)), t), t)
        return Scalar(em.value(xmath.Exp2Op(em.value(arith.MulfOp(y, log_c)))), t)
    log = em.value(xmath.Log2Op(base.ssa))
    return Scalar(em.value(xmath.Exp2Op(em.value(arith.MulfOp(y, log)))), t)


def _runtime_int_power(em: Emitter, x: SSAValue, e: SSAValue, t: ScalarType) -> SSAValue:
    """x ** e for a runtime integer exponent: square-and-multiply over the bits of |e|, in a loop
    that ends when no bit is left (wrapping like ``*``). A negative exponent truncates 1 / x**|e|
    toward zero, as ``//`` would: 1 and -1 raise to a power as usual, every other base gives 0."""
    ir = t.ir_type
    zero, one = em.constant(0, t), em.constant(1, t)
    magnitude, negative = e, None
    if t.kind == "int":
        negative = em.value(arith.CmpiOp(e, zero, "slt"))
        magnitude = em.value(arith.SelectOp(negative, em.value(arith.SubiOp(zero, e)), e))
    before, after = Block(arg_types=[ir, ir, ir]), Block(arg_types=[ir, ir, ir])
    with em.in_block(before):
        more = em.value(arith.CmpiOp(before.args[2], zero, "ne"))
        before.add_op(scf.ConditionOp(more, *before.args))
    with em.in_block(after):
        result, square, n = after.args
        odd = em.value(arith.CmpiOp(em.value(arith.AndIOp(n, one)), zero, "ne"))
        taken = em.value(arith.SelectOp(odd, em.value(arith.MuliOp(result, square)), result))
        after.add_op(scf.YieldOp(taken, em.value(arith.MuliOp(square, square)), em.value(arith.ShRUIOp(n, one))))
    loop = scf.WhileOp([one, x, magnitude], [ir, ir, ir], Region(before), Region(after))
    em.add(loop)
    power = loop.results[0]
    if negative is None:
        return power
    unit = em.value(arith.OrIOp(em.value(arith.CmpiOp(x, one, "eq")), em.value(arith.CmpiOp(x, em.constant(-1, t), "eq"))))
    reciprocal = em.value(arith.SelectOp(unit, power, zero))
    return em.value(arith.SelectOp(negative, reciprocal, power))


def _repeated_multiply(em: Emitter, x: SSAValue, n: int, t: ScalarType) -> SSAValue:
    """x ** n by square-and-multiply: about 2*log2(n) multiplications."""
    if n == 0:
        return em.constant(1.0 if t.is_float else 1, t)
    mul = arith.MulfOp if t.is_float else arith.MuliOp
    result: SSAValue | None = None
    square = x
    while True:
        if n & 1:
            result = square if result is None else em.value(mul(result, square))
        n >>= 1
        if not n:
            break
        square = em.value(mul(square, square))
    assert result is not None
    return result


def _fold_power(base: Const, exp: Const) -> Const:
    t = base.type or exp.type
    x, e = base.value, exp.value
    if isinstance(x, bool) or isinstance(e, bool):
        raise SemanticError("`**` does not apply to bools")
    if isinstance(x, int) and isinstance(e, int) and (t is None or t.is_int):
        if e < 0:
            raise SemanticError("an integer base needs a non-negative exponent")
        if t is not None:  # wraps like the runtime loop; never builds a huge Python int
            return normalize(Const(pow(x, e, 1 << t.bits), t))
        return normalize(Const(x**e, t))
    try:
        return normalize(Const(float(x) ** float(e), t if t is not None and t.is_float else None))
    except (OverflowError, ZeroDivisionError) as exc:
        raise SemanticError(f"`{x!r} ** {e!r}` cannot be computed: {exc}") from None


# ---------------------------------------------------------------------------- comparisons


def compare(em: Emitter, op: str, a: Value, b: Value) -> Value:
    what = f"comparison `{op}`"
    a, b = require_scalar(a, what), require_scalar(b, what)
    t = unify(a, b, what)
    require_not_fp8(t, what)
    if t.is_bool and op not in ("==", "!="):
        raise SemanticError(f"`{op}` does not order bools", "compare bools with `==` / `!=`")
    if isinstance(a, Const) and isinstance(b, Const):
        return fold_compare(op, adapt(a, t), adapt(b, t))
    x, y = materialize(em, a, t), materialize(em, b, t)
    if t.is_float:
        result = em.value(arith.CmpfOp(x, y, _CMPF[op]))
    else:
        pred = _CMPI[op]
        if op not in ("==", "!="):
            pred = ("s" if t.kind == "int" else "u") + pred
        result = em.value(arith.CmpiOp(x, y, pred))
    ca, cb = compile_time(a), compile_time(b)
    fold = None
    if ca is not None and cb is not None:
        fold = fold_compare(op, adapt(ca, t), adapt(cb, t))
    return _with_stand_in(Scalar(result, bool_), fold)


# ---------------------------------------------------------------------------- unary operators


def unary(em: Emitter, op: str, v: Value) -> Value:
    v = require_scalar(v, f"operator `{op}`")
    t = v.type if isinstance(v, Scalar) or v.type is not None else None
    if op == "not":
        if t is not bool_:
            raise SemanticError(
                f"`not` needs a bool, got {type_name(v)}", "compare explicitly, e.g. `x == 0`"
            )
        if isinstance(v, Const):
            return Const(not v.value, bool_)
        return Scalar(negate(em, v.ssa), bool_)
    if isinstance(v, Const) and t is None:
        if isinstance(v.value, bool):
            check_kind(bool_, op, ints=False, floats=False, bools=False)
        if op == "-":
            return Const(-v.value)
        if op == "+":
            return v
        if isinstance(v.value, float):
            check_kind(f32, op, ints=True, floats=False, bools=False)
        return Const(~int(v.value))
    assert t is not None
    if op == "~":
        check_kind(t, op, ints=True, floats=False, bools=False)
    else:
        check_kind(t, op, ints=True, floats=True, bools=False)
        if op == "-" and t.kind == "uint":
            raise SemanticError(
                f"unary `-` does not apply to unsigned {t.name}",
                "write `0 - x` for wrap-around negation, or cast to a signed type",
            )
    if isinstance(v, Const):
        if op == "+":
            return v
        return normalize(Const(-v.value if op == "-" else ~int(v.value), t))
    if op == "+":
        return v
    if op == "~":
        ones = em.constant(-1 if t.kind == "int" else int_range(t)[1], t)
        return Scalar(em.value(arith.XOrIOp(v.ssa, ones)), t)
    if t.is_float:
        return Scalar(em.value(arith.NegfOp(v.ssa)), t)
    return Scalar(em.value(arith.SubiOp(em.constant(0, t), v.ssa)), t)


def negate(em: Emitter, flag: SSAValue) -> SSAValue:
    """``not flag`` for an i1, reusing ``x`` when ``flag`` is itself ``not x``."""
    true = em.constant(True, bool_)  # constants are unique, so identity finds `xori x, true`
    owner = flag.owner
    if isinstance(owner, arith.XOrIOp) and owner.rhs is true:
        return owner.lhs
    return em.value(arith.XOrIOp(flag, true))


# ---------------------------------------------------------------------------- casts


def cast(em: Emitter, v: Value, t: ScalarType) -> Value:
    """``t(v)``: convert between any two scalar types (C semantics: float -> int truncates)."""
    v = require_scalar(v, f"the cast `{t.name}(...)`")
    if isinstance(v, Const):
        return cast_constant(v, t)
    s = v.type
    if s is t:
        return v
    result = _cast_runtime(em, v.ssa, s, t)
    if v.stand_in is not None:
        return Scalar(result.ssa, t, cast_constant(Const(v.stand_in, s), t).value)
    return result


def _cast_runtime(em: Emitter, x: SSAValue, s: ScalarType, t: ScalarType) -> Scalar:
    if s.is_fp8 and not t.is_float:  # fp8 converts to and from floats only: by f32
        return _cast_runtime(em, em.value(arith.ExtFOp(x, f32.ir_type)), f32, t)
    if t.is_fp8 and not s.is_float:
        return _cast_runtime(em, _cast_runtime(em, x, s, f32).ssa, f32, t)
    if t.is_bool:
        if s.is_float:
            return Scalar(em.value(arith.CmpfOp(x, em.constant(0.0, s), "une")), t)
        return Scalar(em.value(arith.CmpiOp(x, em.constant(0, s), "ne")), t)
    if s.is_bool:
        if t.is_float:
            # select keeps the lowering simple: no int<->float conversion from a predicate.
            one, zero = em.constant(1.0, t), em.constant(0.0, t)
            return Scalar(em.value(arith.SelectOp(x, one, zero)), t)
        return Scalar(em.value(arith.ExtUIOp(x, _int_ir(t))), t)
    if s.is_float and t.is_float:
        if s.bits == t.bits:  # f16 <-> bf16, e4m3 <-> e5m2: through f32
            x = em.value(arith.ExtFOp(x, f32.ir_type))
            return Scalar(em.value(arith.TruncFOp(x, t.ir_type)), t)
        op_cls: ConversionOp = arith.ExtFOp if t.bits > s.bits else arith.TruncFOp
        return Scalar(em.value(op_cls(x, t.ir_type)), t)
    if s.is_int and t.is_float:
        op_cls = arith.SIToFPOp if s.kind == "int" else arith.UIToFPOp
        return Scalar(em.value(op_cls(x, t.ir_type)), t)
    if s.is_float and t.is_int:
        op_cls = arith.FPToSIOp if t.kind == "int" else arith.FPToUIOp
        return Scalar(em.value(op_cls(x, _int_ir(t))), t)
    # int -> int
    if s.bits == t.bits:
        return Scalar(x, t)  # signless: the same bits, read with another signedness
    if t.bits < s.bits:
        return Scalar(em.value(arith.TruncIOp(x, _int_ir(t))), t)
    op_cls = arith.ExtSIOp if s.kind == "int" else arith.ExtUIOp
    return Scalar(em.value(op_cls(x, _int_ir(t))), t)


def _int_ir(t: ScalarType) -> IntegerType:
    ir = t.ir_type
    assert isinstance(ir, IntegerType)
    return ir


def cast_constant(c: Const, t: ScalarType) -> Const:
    value = c.value
    if t.is_bool:
        return Const(bool(value), t)
    if t.is_float:
        return Const(round_float(float(value), t), t)
    if isinstance(value, float):
        if not pymath.isfinite(value):
            raise SemanticError(f"cannot convert {value!r} to {t.name}")
        value = int(value)  # truncates toward zero, like cvt.rzi
        lo, hi = int_range(t)
        if not lo <= value <= hi:
            raise SemanticError(f"{c.value!r} is out of range for {t.name} ({lo} .. {hi})")
        return Const(value, t)
    return normalize(Const(int(value), t))  # integers wrap around, as the runtime cast does


__all__ = ["binary", "compare", "unary", "cast", "materialize", "trunc_div", "compile_time"]
