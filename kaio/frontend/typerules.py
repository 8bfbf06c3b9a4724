"""The typing rules of the kernel language, independent of the IR.

Types are strict: both sides of an operator have one kaio type. An untyped Python literal adapts
to the type it meets (an int literal to any int or float type, a float literal to float types
only) provided its value fits. Alone, an int literal is ``i32`` and a float literal ``f32``. A
*loop value* (the variable of a ``range`` with literal bounds, see ``Scalar.bounds``) is an
``i32`` that adapts like an int literal: meeting another type, it is converted to it when every
value it can take fits that type exactly.
Compile-time arithmetic folds with the same semantics as the runtime ops (C-like ``//`` and
``%``, wrap-around for typed integers), so a constant expression means the same thing whether it
is folded or not.
"""

from __future__ import annotations

import math

import numpy as np

from kaio.dtypes import ScalarType, bool_, f32, i32
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.values import Const, Scalar, Value, scalar_type_of, type_name

CAST_HINT = "kaio never converts implicitly; cast one side, e.g. `f32(x)` or `u32(i)`"


def int_range(t: ScalarType) -> tuple[int, int]:
    """Inclusive bounds of an integer type."""
    if t.kind == "uint":
        return 0, (1 << t.bits) - 1
    return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1


def wrap_int(value: int, t: ScalarType) -> int:
    """Two's-complement wrap-around into ``t``'s range, like the runtime op would."""
    v = value & ((1 << t.bits) - 1)
    if t.kind == "int" and v >= 1 << (t.bits - 1):
        v -= 1 << t.bits
    return v


def round_float(value: float, t: ScalarType) -> float:
    """``value`` rounded to the precision of float type ``t``, once, to nearest even."""
    if t.bits == 64:
        return float(value)
    if t.is_fp8:
        return _round_fp8(value, t)
    with np.errstate(over="ignore"):
        if t.name == "bf16":  # ml_dtypes rounds an f64 twice (through f32): go by an odd f32
            return float(np.array([_f32_rounded_to_odd(value)]).astype(t.np_dtype)[0])
        return float(t.np_dtype.type(value))


def _round_fp8(value: float, t: ScalarType) -> float:
    """``value`` in fp8 as the runtime conversion (``cvt.rn.satfinite``) gives it: to nearest
    even, beyond the largest finite value (infinities included) that value with the sign."""
    if math.isnan(value):
        return math.nan
    import ml_dtypes

    largest = float(ml_dtypes.finfo(t.np_dtype).max)
    with np.errstate(over="ignore", invalid="ignore"):
        r = float(np.array([value], np.float64).astype(t.np_dtype)[0])
    return r if math.isfinite(r) else math.copysign(largest, value)


def _fp8_overflows(value: float, t: ScalarType) -> bool:
    """A finite ``value`` that rounds beyond fp8 type ``t``'s largest finite value."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = float(np.array([value], np.float64).astype(t.np_dtype)[0])
    return math.isfinite(value) and not math.isfinite(r)


def _f32_rounded_to_odd(value: float) -> np.float32:
    """``value`` in f32, truncated, its last bit set when that lost anything: rounding this to a
    narrower format is the one correct rounding of ``value`` (f32 keeps 2+ more bits)."""
    f = np.float32(value)
    if not math.isfinite(value) or float(f) == value:
        return f
    if math.isinf(f) or abs(float(f)) > abs(value):
        f = np.nextafter(f, np.float32(0))
    return np.uint32(f.view(np.uint32) | 1).view(np.float32)


def literal_kind(c: Const) -> str:
    if isinstance(c.value, bool):
        return "bool"
    return "float" if isinstance(c.value, float) else "int"


def literal_text(c: Const) -> str:
    return (
        f"{literal_kind(c)} literal {c.value!r}" if c.type is None else f"{c.type.name} {c.value!r}"
    )


def adapt(c: Const, t: ScalarType) -> Const:
    """The constant ``c`` as a value of type ``t``; error when it cannot be one."""
    if c.type is not None:
        if c.type is not t:
            raise SemanticError(f"expected {t.name}, got {c.type.name}", CAST_HINT)
        return c
    kind = literal_kind(c)
    value = c.value
    if t.is_bool:
        if kind != "bool":
            raise SemanticError(
                f"{literal_text(c)} is not a bool", "write `True`/`False` or a comparison"
            )
        return Const(value, t)
    if kind == "bool":
        raise SemanticError(f"bool literal {value!r} cannot be used as {t.name}", "use 0 or 1")
    if t.is_float:
        rounded = round_float(float(value), t)
        beyond = t.is_fp8 and _fp8_overflows(float(value), t)  # a literal never saturates silently
        if beyond or math.isinf(rounded) and not math.isinf(float(value)):
            raise SemanticError(
                f"{literal_text(c)} is out of range for {t.name}",
                f"`{t.name}({value!r})` converts with saturation" if beyond else None,
            )
        return Const(rounded, t)
    if kind == "float":
        raise SemanticError(
            f"{literal_text(c)} cannot be used as {t.name}",
            f"write an integer literal, or cast: `{t.name}({value!r})` truncates toward zero",
        )
    lo, hi = int_range(t)
    if not lo <= int(value) <= hi:
        raise SemanticError(
            f"int literal {value} is out of range for {t.name} ({lo} .. {hi})",
            f"cast explicitly to wrap around: `{t.name}(...)`, or use a wider type",
        )
    return Const(int(value), t)


def default_type(c: Const) -> ScalarType:
    """The type an untyped literal takes when nothing else decides (stored in a loop variable,
    returned, merged with another literal)."""
    if c.type is not None:
        return c.type
    kind = literal_kind(c)
    if kind == "bool":
        return bool_
    if kind == "float":
        return f32
    lo, hi = int_range(i32)
    if not lo <= int(c.value) <= hi:
        raise SemanticError(
            f"int literal {c.value} does not fit i32, the type of a lone int literal",
            f"give it a type: `i64({c.value})` or `u32({c.value})`",
        )
    return i32


def unify(a: Value, b: Value, what: str) -> ScalarType:
    """The common type of two scalar values in ``what`` (an operator, a merge), or an error."""
    ta, tb = scalar_type_of(a), scalar_type_of(b)
    if ta is None and tb is None:
        assert isinstance(a, Const) and isinstance(b, Const)
        if literal_kind(a) == literal_kind(b):
            return default_type(a)
        if {literal_kind(a), literal_kind(b)} == {"int", "float"}:
            return f32
        raise SemanticError(f"{what}: {type_name(a)} and {type_name(b)} do not mix")
    if ta is None:
        assert isinstance(a, Const) and tb is not None
        _adapt_in(a, tb, what)
        return tb
    if tb is None:
        assert isinstance(b, Const)
        _adapt_in(b, ta, what)
        return ta
    if ta is not tb:
        if is_loop_value(a) and not is_loop_value(b):
            check_loop_value(a, tb, what)
            return tb
        if is_loop_value(b) and not is_loop_value(a):
            check_loop_value(b, ta, what)
            return ta
        raise SemanticError(f"{what}: {ta.name} and {tb.name} are different types", CAST_HINT)
    return ta


# Significand bits of each float type: every integer up to 2**bits in magnitude is exact in it.
_EXACT_INT_BITS = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53, "f8e4m3": 4, "f8e5m2": 3}


def is_loop_value(v: Value) -> bool:
    return isinstance(v, Scalar) and v.bounds is not None


def check_loop_value(v: Scalar, t: ScalarType, what: str) -> None:
    """Error unless every value of the loop value ``v`` is exactly a ``t``."""
    assert v.bounds is not None
    lo, hi = v.bounds
    if t.is_int:
        fits = int_range(t)[0] <= lo and hi <= int_range(t)[1]
    else:
        fits = t.is_float and max(abs(lo), abs(hi)) <= 1 << _EXACT_INT_BITS[t.name]
    if not fits:
        raise SemanticError(
            f"{what}: the loop value ranges over {lo} .. {hi}, which {t.name} cannot hold exactly",
            CAST_HINT,
        )


def _adapt_in(c: Const, t: ScalarType, what: str) -> None:
    try:
        adapt(c, t)
    except SemanticError as e:
        raise SemanticError(f"{what}: {e.message}", e.hint) from None


def check_kind(t: ScalarType, op: str, *, ints: bool, floats: bool, bools: bool) -> None:
    """Error unless operator ``op`` applies to values of type ``t``."""
    require_not_fp8(t, f"operator `{op}`")
    if (t.is_int and ints) or (t.is_float and floats) or (t.is_bool and bools):
        return
    hint = None
    if op == "/" and t.is_int:
        hint = "`//` is integer division (truncates toward zero); or cast to a float type first"
    elif op == "//" and t.is_float:
        hint = "use `floor(a / b)`"
    elif t.is_bool:
        hint = "use `and`/`or`/`not` on bools, or cast: `i32(flag)`"
    elif op in ("~", "&", "|", "^", "<<", ">>") and t.is_float:
        hint = "bitwise operators apply to integers"
    raise SemanticError(f"operator `{op}` does not apply to {t.name}", hint)


def require_not_fp8(t: ScalarType, what: str) -> None:
    """FP8 values are stored and converted, not computed with (PTX has no fp8 arithmetic)."""
    if t.is_fp8:
        raise SemanticError(
            f"{what} does not apply to {t.name}: fp8 is a storage type",
            "convert first, e.g. `f32(x)` or `f16(x)`, and back with `" + t.name + "(y)`",
        )


def trunc_div(a: int, b: int) -> int:
    """Integer division truncating toward zero (C, CUDA, PTX), not Python's floor division."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def fold_binary(op: str, a: Const, b: Const, t: ScalarType | None) -> Const:
    """Fold ``a op b`` at compile time; ``t`` is the operands' common type (None: untyped)."""
    x, y = a.value, b.value
    is_float = isinstance(x, float) or isinstance(y, float) or (t is not None and t.is_float)
    is_bool = isinstance(x, bool) and isinstance(y, bool)
    if is_bool and op not in ("&", "|", "^"):
        check_kind(bool_, op, ints=False, floats=False, bools=False)
    if op in ("/", "//", "%") and y == 0 and not is_float:
        raise SemanticError("division by zero in a compile-time expression")
    result: int | float | bool
    if op == "+":
        result = x + y
    elif op == "-":
        result = x - y
    elif op == "*":
        result = x * y
    elif op == "/":
        if not is_float:
            check_kind(t or i32, "/", ints=False, floats=True, bools=False)
        result = _ieee_divide(float(x), float(y))
    elif op == "//":
        if is_float:
            check_kind(t or f32, "//", ints=True, floats=False, bools=False)
        result = trunc_div(int(x), int(y))
    elif op == "%":
        if is_float:
            result = _float_remainder(float(x), float(y), t)
        else:
            result = int(x) - int(y) * trunc_div(int(x), int(y))
    elif op in ("&", "|", "^", "<<", ">>"):
        if is_float:
            check_kind(t or f32, op, ints=True, floats=False, bools=False)
        if op in ("<<", ">>") and (y < 0 or (t is not None and y >= t.bits)):
            limit = f" and below {t.bits}" if t is not None else ""
            raise SemanticError(f"shift amount {y} must be at least 0{limit}")
        ix, iy = int(x), int(y)
        if op == "&":
            result = ix & iy
        elif op == "|":
            result = ix | iy
        elif op == "^":
            result = ix ^ iy
        elif op == "<<":
            result = ix << iy
        else:
            result = ix >> iy
        if is_bool:
            result = bool(result)
    else:  # pragma: no cover - the caller only passes the operators above
        raise AssertionError(op)
    return normalize(Const(result, t))


def _ieee_divide(x: float, y: float) -> float:
    """``x / y`` as IEEE defines it, division by zero included (the runtime op's result)."""
    if y != 0.0:
        return x / y
    if x == 0.0 or math.isnan(x):
        return math.nan
    return math.copysign(math.inf, x) * math.copysign(1.0, y)


def _float_remainder(x: float, y: float, t: ScalarType | None) -> float:
    """Float ``%`` exactly as the runtime computes it, ``x - trunc(x / y) * y``, each operation
    rounded to ``t`` (untyped: f64), so folding and running agree."""

    def rounded(v: float) -> float:
        return round_float(v, t) if t is not None else v

    q = rounded(_ieee_divide(x, y))
    whole = math.copysign(float(math.trunc(q)), q) if math.isfinite(q) else q  # trunc keeps -0.0
    return rounded(x - rounded(whole * y))


def normalize(c: Const) -> Const:
    """Bring a typed constant into its type's representation (wrap ints, round floats)."""
    t = c.type
    if t is None or t.is_bool:
        return c
    if t.is_float:
        return Const(round_float(float(c.value), t), t)
    return Const(wrap_int(int(c.value), t), t)


def fold_compare(op: str, a: Const, b: Const) -> Const:
    x, y = a.value, b.value
    table = {
        "==": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,
    }  # fmt: skip
    return Const(bool(table[op]), bool_)
