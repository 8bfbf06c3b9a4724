"""Hypothesis strategies for the differential fuzzer: typed programs (``programs.Program``) and the
input rows they run on.

A ``Builder`` draws statements and expressions top-down with a depth budget, keeping a scope of
typed variables, so every drawn program type-checks under kaio's rules: operands of one type,
untyped literals only where they meet a typed operand (and fit it), loop variables only where a
typed operand meets them, variables first assigned in a nested block never used after it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from kaio import dtypes
from kaio.dtypes import ScalarType

from .programs import (
    BOOL,
    FLOATS,
    INTS,
    NUMERIC,
    ROWS,
    Assign,
    Bin,
    Call,
    Cast,
    Cmp,
    Exit,
    Expr,
    For,
    If,
    Lit,
    Load,
    Logic,
    LoopVar,
    Program,
    Select,
    Unary,
    Var,
)
from .semantics import FLOAT_NP, int_bounds

_INT_OPS = ["+", "-", "*", "//", "%", "&", "|", "^", "<<", ">>", "**"]
_FLOAT_OPS = ["+", "-", "*", "/", "%"]
_LOOP_OPS = {"+", "-", "*", "&", "|", "^"}  # where a loop variable may be the right operand
_CMP = ["<", "<=", ">", ">=", "==", "!="]
_FLOAT_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, -2.5, 3.0, 0.1, 1e-3, 7.25, 100.0, 1000.5, 65504.0]
_FLOAT_MAX = {"f16": 65504.0, "bf16": 3.0e38, "f32": 3.0e38, "f64": 1.0e300}


class Builder:
    def __init__(self, draw: Any, max_depth: int = 3):
        self.draw = draw
        self.max_depth = max_depth
        self.counter = 0
        self.loops: list[str] = []  # loop variables in scope, innermost last

    # --- helpers -------------------------------------------------------------------------------

    def choice(self, options: list[Any]) -> Any:
        return self.draw(st.sampled_from(options))

    def chance(self, p: float) -> bool:
        return bool(self.draw(st.floats(0, 1)) < p)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # --- literals ------------------------------------------------------------------------------

    def literal(self, t: ScalarType, typed: bool) -> Lit:
        if t.is_bool:
            return Lit(t, self.choice([True, False]), True)
        if t.is_float:
            limit = _FLOAT_MAX[t.name]
            values = [v for v in _FLOAT_VALUES if abs(v) <= limit]
            return Lit(t, self.choice(values), typed)
        lo, hi = int_bounds(t)
        special = [0, 1, 2, 3, 7, -1, -2, 100, lo, hi, hi - 1, lo + 1]
        value = self.choice([v for v in special if lo <= v <= hi] + [self.draw(st.integers(lo, hi))])
        return Lit(t, value, typed)

    # --- expressions ---------------------------------------------------------------------------

    def expr(self, t: ScalarType, scope: dict[str, ScalarType], depth: int) -> Expr:
        if t.is_bool:
            return self.condition(scope, depth)
        same = [n for n, vt in scope.items() if vt is t]
        if depth <= 0 or self.chance(0.25):
            if same and self.chance(0.75):
                return Var(t, self.choice(same))
            return self.literal(t, True)
        kinds = ["bin", "bin", "bin", "cast", "call", "select", "unary"]
        if f"v_{t.name}" in scope:
            kinds.append("load")
        kind = self.choice(kinds)
        d = depth - 1
        if kind == "bin":
            op = self.choice(_FLOAT_OPS if t.is_float else _INT_OPS)
            a = self.expr(t, scope, d)
            if op == "**":  # a runtime exponent: the square-and-multiply loop
                return Bin(t, op, a, self.expr(t, scope, d))
            if self.loops and op in _LOOP_OPS and (t.is_int or op in "+-*") and self.chance(0.3):
                return Bin(t, op, a, LoopVar(t, self.choice(self.loops)))
            b = self.literal(t, typed=False) if self.chance(0.3) else self.expr(t, scope, d)
            return Bin(t, op, a, b)
        if kind == "cast":
            source = self.choice(NUMERIC + [BOOL])
            return Cast(t, self.expr(source, scope, d))
        if kind == "call":
            fns = ["abs", "min", "max"] + (["sqrt", "floor", "ceil"] if t.is_float else [])
            fn = self.choice(fns)
            if fn in ("min", "max"):
                return Call(t, fn, (self.expr(t, scope, d), self.expr(t, scope, d)))
            if fn == "abs" and t.kind == "uint":
                fn = "min"  # abs of an unsigned is the value: test min instead
                return Call(t, fn, (self.expr(t, scope, d), self.expr(t, scope, d)))
            return Call(t, fn, (self.expr(t, scope, d),))
        if kind == "select":
            return Select(t, self.condition(scope, d), self.expr(t, scope, d), self.expr(t, scope, d))
        if kind == "unary":
            if t.kind == "uint":
                return Unary(t, "~", self.expr(t, scope, d))
            return Unary(t, self.choice(["-"] if t.is_float else ["-", "~"]), self.expr(t, scope, d))
        index_type = self.choice(INTS)
        return Load(t, self.expr(index_type, scope, d), self.expr(t, scope, d))

    def condition(self, scope: dict[str, ScalarType], depth: int) -> Expr:
        bools = [n for n, vt in scope.items() if vt is BOOL]
        if depth <= 0:
            if bools and self.chance(0.5):
                return Var(BOOL, self.choice(bools))
            t = self.choice(NUMERIC)
            return Cmp(BOOL, self.choice(_CMP), self.expr(t, scope, 0), self.expr(t, scope, 0))
        kind = self.choice(["cmp", "cmp", "cmp", "logic", "not", "cast"] + (["var"] if bools else []))
        d = depth - 1
        if kind == "cmp":
            t = self.choice(NUMERIC)
            a = self.expr(t, scope, d)
            if self.loops and self.chance(0.2):
                return Cmp(BOOL, self.choice(_CMP), a, LoopVar(t, self.choice(self.loops)))
            return Cmp(BOOL, self.choice(_CMP), a, self.expr(t, scope, d))
        if kind == "logic":
            return Logic(BOOL, self.choice(["and", "or"]), self.condition(scope, d), self.condition(scope, d))
        if kind == "not":
            return Logic(BOOL, "not", self.condition(scope, d))
        if kind == "cast":
            return Cast(BOOL, self.expr(self.choice(NUMERIC), scope, d))
        return Var(BOOL, self.choice(bools))

    # --- statements ----------------------------------------------------------------------------

    def block(self, scope: dict[str, ScalarType], depth: int, size: int, in_loop: bool) -> list[Any]:
        """Statements; ``scope`` gains the variables they define (the caller decides whether
        they outlive the block)."""
        out: list[Any] = []
        for _ in range(self.draw(st.integers(1, size))):
            kinds = ["new", "new", "set", "set"]
            if depth > 0:
                kinds += ["if", "for"]
            kinds.append("return")
            if in_loop:
                kinds += ["break", "continue"]
            kind = self.choice(kinds)
            if kind == "new":
                t = self.choice(NUMERIC + [BOOL])
                name = self.fresh("v")
                out.append(Assign(name, self.expr(t, scope, self.max_depth), True))
                scope[name] = t
            elif kind == "set":
                name = self.choice(sorted(scope))
                out.append(Assign(name, self.expr(scope[name], scope, self.max_depth), False))
            elif kind == "if":
                cond = self.condition(scope, 2)
                then = self.block(dict(scope), depth - 1, 3, in_loop)
                orelse = self.block(dict(scope), depth - 1, 2, in_loop) if self.chance(0.5) else []
                out.append(If(cond, tuple(then), tuple(orelse)))
            elif kind == "for":
                var = self.fresh("j")
                self.loops.append(var)
                body = self.block(dict(scope), depth - 1, 3, True)
                self.loops.pop()
                out.append(For(var, self.draw(st.integers(0, 4)), tuple(body)))
            else:  # return / break / continue: only ever conditional, so code after it lives
                cond = self.condition(scope, 1)
                out.append(If(cond, (Exit(kind),), ()))
        return out


@st.composite
def programs(draw: Any) -> Program:
    b = Builder(draw)
    inputs = draw(st.lists(st.sampled_from(NUMERIC), min_size=1, max_size=3, unique=True))
    scope: dict[str, ScalarType] = {f"v_{t.name}": t for t in inputs}
    results = [("r0", draw(st.sampled_from(NUMERIC))), ("r1", draw(st.sampled_from(NUMERIC)))]
    body: list[Any] = []
    for name, t in results:
        body.append(Assign(name, b.expr(t, scope, 2), True))
        scope[name] = t
    body += b.block(scope, depth=2, size=5, in_loop=False)
    return Program(inputs, results, body)


def _float_row(t: ScalarType, rng: np.random.Generator) -> np.ndarray:
    np_t = FLOAT_NP[t.name]
    info_max = float(np.finfo(np.float32).max) if t.name == "bf16" else float(np.finfo(np_t).max)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, info_max, -info_max, 1e-45, 3.0, 100.0]
    special = [np_t(v) for v in special]
    values = rng.standard_normal(ROWS) * rng.choice([1.0, 100.0, 1e4], ROWS)
    out = np.array(values, dtype=np.float64).astype(np_t)
    bits = rng.integers(0, 1 << (8 * out.itemsize), ROWS, dtype=np.uint64)
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[out.itemsize]
    random_bits = bits.astype(width).view(out.dtype)
    pick = rng.random(ROWS)
    out = np.where(pick < 0.2, random_bits, out)
    specials = np.array(special, dtype=out.dtype)
    return np.where(pick > 0.75, specials[rng.integers(0, len(specials), ROWS)], out).astype(out.dtype)


def _int_row(t: ScalarType, rng: np.random.Generator) -> np.ndarray:
    lo, hi = int_bounds(t)
    special = np.array([0, 1, -1 if lo < 0 else 2, lo, hi, 3, 100], dtype=object)
    raw = rng.integers(0, 1 << 63, ROWS, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, ROWS, dtype=np.uint64)
    values = raw.view(np.uint64).astype(np.dtype(f"u{t.bits // 8}")).view(t.np_dtype)
    small = rng.integers(-20, 21, ROWS)
    pick = rng.random(ROWS)
    out = np.where(pick < 0.3, small.astype(t.np_dtype) if lo < 0 else np.abs(small).astype(t.np_dtype), values)
    chosen = np.array([special[k] for k in rng.integers(0, len(special), ROWS)], dtype=object).astype(t.np_dtype)
    return np.where(pick > 0.8, chosen, out).astype(t.np_dtype)


def input_rows(p: Program, seed: int) -> dict[str, np.ndarray]:
    """One array of ``ROWS`` values per input type: special values, small ones, random bits."""
    rng = np.random.default_rng(seed)
    return {t.name: (_float_row(t, rng) if t.is_float else _int_row(t, rng)) for t in p.inputs}


__all__ = ["Builder", "input_rows", "programs", "FLOATS", "dtypes"]
