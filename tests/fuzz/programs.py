"""Small typed kernel programs for the differential fuzzer: a tree of statements and expressions
that renders to the source of a ``@kaio.gpu_kernel`` and evaluates, row by row, under the
documented semantics (``semantics.py``).

The kernel reads one element of each input array per thread (``x_<type>``), runs the statements,
and writes two result variables to two output arrays. Early returns write the results first, so
every output element is written exactly once. Programs only use what the language defines:
divisors are made nonzero (and never -1 for signed types), shift amounts are masked to the
width, float -> int casts clamp into range first, loads are guarded by an index test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kaio import dtypes
from kaio.dtypes import ScalarType

from .semantics import FLOAT_NP, float_cast, round_to, trunc_div, trunc_rem, wrap

INTS = [dtypes.i8, dtypes.u8, dtypes.i16, dtypes.u16, dtypes.i32, dtypes.u32, dtypes.i64, dtypes.u64]
FLOATS = [dtypes.f16, dtypes.bf16, dtypes.f32, dtypes.f64]
NUMERIC = INTS + FLOATS
BOOL = dtypes.bool_
ROWS = 64  # threads of the one launch: one row of inputs each


class Return(Exception):
    """An early return while evaluating (the results are already stored)."""


class Break(Exception):
    pass


class Continue(Exception):
    pass


# --- expressions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expr:
    t: ScalarType


@dataclass(frozen=True)
class Var(Expr):
    name: str


@dataclass(frozen=True)
class Lit(Expr):
    value: Any
    typed: bool  # `u8(3)` (a typed constant) or `3` (an untyped literal that adapts)


@dataclass(frozen=True)
class LoopVar(Expr):
    """The variable of `for j in range(K)`: an i32 loop value that adapts to ``t`` (the type of
    the operator's other operand)."""

    name: str


@dataclass(frozen=True)
class Bin(Expr):
    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Logic(Expr):
    op: str  # "and", "or", "not"
    a: Expr
    b: Expr | None = None


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # "-" or "~"
    a: Expr


@dataclass(frozen=True)
class Cast(Expr):
    a: Expr


@dataclass(frozen=True)
class Call(Expr):
    fn: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Load(Expr):
    """``(x_T[u32(index)] if u32(index) < n else default)``: a load only where in bounds."""

    index: Expr
    default: Expr


# --- statements ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assign:
    name: str
    value: Expr
    new: bool  # first assignment (a new variable) or a reassignment


@dataclass(frozen=True)
class If:
    cond: Expr
    then: tuple[Any, ...]
    orelse: tuple[Any, ...]


@dataclass(frozen=True)
class For:
    var: str
    count: int
    body: tuple[Any, ...]


@dataclass(frozen=True)
class Exit:
    kind: str  # "break", "continue", "return"


@dataclass
class Program:
    inputs: list[ScalarType]  # the element type of each input array x_<type>
    results: list[tuple[str, ScalarType]]  # two result variables, stored at the end
    body: list[Any] = field(default_factory=list)


# --- rendering -----------------------------------------------------------------------------------


def literal_text(e: Lit) -> str:
    """Literals are finite (a float literal's ``repr`` reads back as the same double)."""
    if e.t.is_bool:
        return repr(bool(e.value))
    text = repr(float(e.value)) if isinstance(e.value, float) else str(int(e.value))
    if not e.typed:
        return text if not text.startswith("-") else f"({text})"
    return f"{e.t.name}({text})"


def expr(e: Expr) -> str:
    match e:
        case Var(name=name) | LoopVar(name=name):
            return name
        case Lit():
            return literal_text(e)
        case Bin(op=op, a=a, b=b):
            return f"({expr(a)} {op} {_operand_b(e)})"
        case Cmp(op=op, a=a, b=b):
            return f"({expr(a)} {op} {expr(b)})"
        case Logic(op="not", a=a):
            return f"(not {expr(a)})"
        case Logic(op=op, a=a, b=b):
            return f"({expr(a)} {op} {expr(b)})"  # type: ignore[arg-type]
        case Unary(op=op, a=a):
            return f"({op}{expr(a)})"
        case Cast(a=a):
            if a.t.is_float and e.t.is_int:  # clamp into range first: out-of-range is undefined
                lo, hi = _clamp_bounds(e.t)
                return f"{type_name(e.t)}(min(max({expr(a)}, {lo!r}), {hi!r}))"
            return f"{type_name(e.t)}({expr(a)})"
        case Call(fn=fn, args=args):
            return f"{fn}({', '.join(expr(x) for x in args)})"
        case Select(cond=c, a=a, b=b):
            return f"({expr(a)} if {expr(c)} else {expr(b)})"
        case Load(t=t, index=index, default=default):
            i = f"u32({expr(index)})"
            return f"(x_{t.name}[{i}] if {i} < n else {expr(default)})"
    raise AssertionError(e)


def type_name(t: ScalarType) -> str:
    return "bool_" if t.is_bool else t.name


def _operand_b(e: Bin) -> str:
    b, t = expr(e.b), e.t
    if e.op in ("//", "%") and t.is_int:  # never 0; for signed types never -1 either (overflow)
        return f"(({b} & (-2)) | 2)" if t.kind == "int" else f"({b} | 1)"
    if e.op in ("<<", ">>"):
        return f"({b} & {t.bits - 1})"
    if e.op == "**":  # non-negative: a negative compile-time exponent is an error by design
        return f"({b} & 127)"
    return b


def _clamp_bounds(t: ScalarType) -> tuple[float, float]:
    return (0.0, 100.0) if t.kind == "uint" else (-100.0, 100.0)


def statements(body: list[Any] | tuple[Any, ...], indent: str, results: list[tuple[str, ScalarType]]) -> list[str]:
    lines: list[str] = []
    for s in body:
        match s:
            case Assign(name=name, value=value):
                lines.append(f"{indent}{name} = {expr(value)}")
            case If(cond=c, then=then, orelse=orelse):
                lines.append(f"{indent}if {expr(c)}:")
                lines += statements(then, indent + "    ", results) or [indent + "    pass"]
                if orelse:
                    lines.append(f"{indent}else:")
                    lines += statements(orelse, indent + "    ", results)
            case For(var=var, count=count, body=inner):
                lines.append(f"{indent}for {var} in range({count}):")
                lines += statements(inner, indent + "    ", results) or [indent + "    pass"]
            case Exit(kind="return"):
                for k, (name, _) in enumerate(results):
                    lines.append(f"{indent}out{k}[i] = {name}")
                lines.append(f"{indent}return")
            case Exit(kind=kind):
                lines.append(f"{indent}{kind}")
    return lines


def source(p: Program, name: str = "fuzz") -> str:
    params = [f"x_{t.name}: Array[{t.name}]" for t in p.inputs]
    params += [f"out{k}: MutArray[{t.name}]" for k, (_, t) in enumerate(p.results)]
    lines = [
        "@kaio.gpu_kernel(block_size=64)",
        f"def {name}({', '.join(params)}, n: u32):",
        "    i = thread_idx_x()",
        "    if i >= n:",
        "        return",
    ]
    for t in p.inputs:
        lines.append(f"    v_{t.name} = x_{t.name}[i]")
    lines += statements(p.body, "    ", p.results)
    for k, (var, _) in enumerate(p.results):
        lines.append(f"    out{k}[i] = {var}")
    return "\n".join(lines) + "\n"


# --- evaluation ----------------------------------------------------------------------------------


def _np(t: ScalarType, v: Any) -> Any:
    return FLOAT_NP[t.name](v)


def convert(v: Any, s: ScalarType, t: ScalarType) -> Any:
    """``t(v)`` for a value of type ``s``: the documented casts."""
    if t.is_bool:
        return bool(v != 0) if not s.is_float else bool(float(v) != 0.0 or math.isnan(float(v)))
    if s.is_bool:
        return _np(t, 1.0 if v else 0.0) if t.is_float else int(v)
    if t.is_int:
        if s.is_float:
            return wrap(int(float(v)), t)  # clamped into range by the program: truncation
        return wrap(int(v), t)
    if s.is_float:
        return float_cast(v, s.name, t.name)
    return round_to(int(v), t.name)


def adapt_literal(value: Any, t: ScalarType) -> Any:
    """A literal (or a typed constant's argument) as a value of ``t``: rounded once."""
    return round_to(value, t.name) if t.is_float else int(value)


class Evaluator:
    def __init__(self, p: Program, arrays: dict[str, np.ndarray], n: int):
        self.p, self.arrays, self.n = p, arrays, n

    def row(self, i: int) -> list[Any]:
        env: dict[str, Any] = {f"v_{t.name}": self._element(t, i) for t in self.p.inputs}
        self.out: list[Any] = [None] * len(self.p.results)
        try:
            self.block(self.p.body, env)
        except Return:
            return self.out
        return [env[name] for name, _ in self.p.results]

    def _element(self, t: ScalarType, i: int) -> Any:
        v = self.arrays[t.name][i]
        return v if t.is_float else (bool(v) if t.is_bool else int(v))

    def block(self, body: Any, env: dict[str, Any]) -> None:
        for s in body:
            match s:
                case Assign(name=name, value=value):
                    env[name] = self.eval(value, env)
                case If(cond=c, then=then, orelse=orelse):
                    self.block(then if self.eval(c, env) else orelse, env)
                case For(var=var, count=count, body=inner):
                    for j in range(count):
                        env[var] = j
                        try:
                            self.block(inner, env)
                        except Continue:
                            continue
                        except Break:
                            break
                case Exit(kind="return"):
                    self.out = [env[name] for name, _ in self.p.results]
                    raise Return
                case Exit(kind="break"):
                    raise Break
                case Exit(kind="continue"):
                    raise Continue

    def eval(self, e: Expr, env: dict[str, Any]) -> Any:  # noqa: C901 - one case per node
        t = e.t
        match e:
            case Var(name=name):
                return env[name]
            case LoopVar(name=name):
                return convert(env[name], dtypes.i32, t)
            case Lit(value=value):
                return value if t.is_bool else adapt_literal(value, t)
            case Cmp(op=op, a=a, b=b):
                x, y = self.eval(a, env), self.eval(b, env)
                return bool({"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op])
            case Logic(op="not", a=a):
                return not self.eval(a, env)
            case Logic(op="and", a=a, b=b):
                return self.eval(a, env) and self.eval(b, env)  # type: ignore[arg-type]
            case Logic(op="or", a=a, b=b):
                return self.eval(a, env) or self.eval(b, env)  # type: ignore[arg-type]
            case Unary(op=op, a=a):
                x = self.eval(a, env)
                if t.is_float:
                    return -x
                return wrap(-x if op == "-" else ~x, t)
            case Cast(a=a):
                x = self.eval(a, env)
                if a.t.is_float and t.is_int:  # min(max(x, lo), hi), as rendered
                    lo, hi = _clamp_bounds(t)
                    x = _min(_max(x, _np(a.t, lo)), _np(a.t, hi))
                return convert(x, a.t, t)
            case Select(cond=c, a=a, b=b):
                return self.eval(a, env) if self.eval(c, env) else self.eval(b, env)
            case Load(index=index, default=default):
                k = convert(self.eval(index, env), index.t, dtypes.u32)
                return self._element(t, k) if k < self.n else self.eval(default, env)
            case Call(fn=fn, args=args):
                return self._call(fn, [self.eval(x, env) for x in args], t)
            case Bin(op=op, a=a, b=b):
                return self._binary(op, self.eval(a, env), self.eval(b, env), t)
        raise AssertionError(e)

    def _binary(self, op: str, x: Any, y: Any, t: ScalarType) -> Any:
        if t.is_float:
            with np.errstate(all="ignore"):
                if op == "%":  # documented: x - trunc(x / y) * y, each step rounded
                    q = float(x / y)
                    whole = math.copysign(float(math.trunc(q)), q) if math.isfinite(q) else q
                    return x - _np(t, whole) * y
                return {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op]
        if op in ("//", "%"):
            d = (y & -2) | 2 if t.kind == "int" else y | 1
            d = wrap(d, t)
            return wrap(trunc_div(x, d) if op == "//" else trunc_rem(x, d), t)
        if op == "**":  # wraps like *
            return wrap(pow(x, y & 127, 1 << t.bits), t)
        if op in ("<<", ">>"):
            s = y & (t.bits - 1)
            if op == "<<":
                return wrap(x << s, t)
            return x >> s  # arithmetic for signed (Python ints), logical for unsigned (x >= 0)
        r = {"+": x + y, "-": x - y, "*": x * y, "&": x & y, "|": x | y, "^": x ^ y}[op]
        return wrap(r, t)

    def _call(self, fn: str, xs: list[Any], t: ScalarType) -> Any:
        with np.errstate(all="ignore"):
            if fn == "abs":
                return abs(xs[0]) if t.is_float else wrap(abs(xs[0]), t)
            if fn == "min":
                return _min(xs[0], xs[1]) if t.is_float else min(xs)
            if fn == "max":
                return _max(xs[0], xs[1]) if t.is_float else max(xs)
            if fn == "sqrt":
                return round_to(math.sqrt(float(xs[0])), t.name) if float(xs[0]) > 0 and math.isfinite(float(xs[0])) else _np(t, np.sqrt(np.float64(xs[0])))
            if fn in ("floor", "ceil"):  # exact in the type; floor(-0.0) and ceil(-0.5) are -0.0
                return _np(t, getattr(np, fn)(np.float64(xs[0])))
        raise AssertionError(fn)


def _min(x: Any, y: Any) -> Any:
    """IEEE minNum as PTX's min: NaN only when both are; -0 below +0."""
    if math.isnan(float(x)):
        return y
    if math.isnan(float(y)):
        return x
    if float(x) == float(y) == 0.0:
        return x if math.copysign(1, float(x)) < 0 else y
    return x if x < y else y


def _max(x: Any, y: Any) -> Any:
    if math.isnan(float(x)):
        return y
    if math.isnan(float(y)):
        return x
    if float(x) == float(y) == 0.0:
        return x if math.copysign(1, float(x)) > 0 else y
    return x if x > y else y


def to_bits(values: list[Any], t: ScalarType) -> np.ndarray:
    """The results as the output array holds them (floats: ``canonical`` bits)."""
    if t.is_float:
        return canonical(np.array(values, dtype=t.np_dtype))
    if t.is_bool:
        return np.array([bool(v) for v in values], dtype=np.bool_)
    return np.array([int(v) for v in values], dtype=object).astype(t.np_dtype)


def canonical(a: np.ndarray) -> np.ndarray:
    """Float arrays as raw bits with every NaN one pattern (NaN payloads are not specified)."""
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    bits = a.view(width).copy()
    with np.errstate(invalid="ignore"):
        nan = np.isnan(a.astype(np.float64))
    bits[nan] = width((1 << (8 * a.dtype.itemsize - 1)) - 1)
    return bits
