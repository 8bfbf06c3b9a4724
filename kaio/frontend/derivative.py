"""The derivative of a device function with respect to one parameter, derived symbolically.

``derivative(fn, "score")`` turns ``fn`` (a plain ``def`` of elementwise math, as an attention
``score_mod`` is) into a :class:`~kaio.frontend.inline.DeviceFunction` of the same parameters
that returns ``d fn(...) / d score``: forward-mode differentiation on the function's syntax
tree. Each assignment ``x = e`` is preceded by ``d_x = D(e)`` (so ``D(e)`` reads the values
``e`` reads) and each ``return e`` becomes ``return D(e)``; ``if`` statements keep their shape and
each branch its own derivatives. ``D`` knows the arithmetic operators, ``**`` by a constant,
``kt.where`` / ``kt.maximum`` / ``kt.minimum`` (and ``max``/``min``), ``exp``, ``exp2``, ``log``,
``log2``, ``tanh``, ``sqrt``, ``rsqrt``, ``sin``, ``cos``, ``abs``, ``fma`` and float casts;
anything that does not depend on the parameter (an index, a captured load ``bias[h, kv_idx]``, a
comparison) has derivative 0. A construct it cannot differentiate that depends on the
parameter (a loop, another function, an integer cast, a load indexed by it) is a
:class:`~kaio.errors.KaioCompileError` naming it, at its line. The primal subexpressions the
derivative repeats (``tanh(x)`` in ``1 - tanh(x)**2``) are one value after ``cse``; on tiles the
function is applied element by element as one ``tile.map`` and its derivative as another, so
a caller that needs both computes such a subexpression twice.
"""

from __future__ import annotations

import ast
import builtins
import copy
import types
from collections.abc import Callable
from typing import Any

import kaio.prelude as prelude
import kaio.tile as kt
from kaio import dtypes
from kaio.frontend.context import MISSING, Env
from kaio.frontend.diagnostics import FunctionSource
from kaio.frontend.inline import DeviceFunction

KT = "_kaio_kt"  # the name the derived function reads kaio.tile by
LN2 = 0.6931471805599453
ZERO = 0.0

# elementwise functions by what their derivative is, each under every name a user may call it by
_UNARY = ("exp", "exp2", "log", "log2", "tanh", "sqrt", "rsqrt", "sin", "cos", "abs")
_RULES: dict[int, str] = {}
for _name in _UNARY + ("fma",):
    for _module in (kt, prelude):
        if hasattr(_module, _name):
            _RULES[id(getattr(_module, _name))] = _name
_RULES[id(builtins.abs)] = "abs"
for _obj, _rule in ((kt.where, "where"), (kt.maximum, "maximum"), (kt.minimum, "minimum"),
                    (prelude.max, "maximum"), (prelude.min, "minimum"),
                    (builtins.max, "maximum"), (builtins.min, "minimum")):  # fmt: skip
    _RULES[id(_obj)] = _rule


def derivative(fn: Callable[..., Any], wrt: str, source: FunctionSource | None = None) -> DeviceFunction:
    """A device function of ``fn``'s parameters returning ``d fn / d wrt`` (``source``: fn's
    source as rewritten before, e.g. by :func:`kaio.frontend.flat_index.with_shapes`)."""
    src = source or FunctionSource.of(fn, "device function")
    if wrt not in {a.arg for a in src.tree.args.args}:
        raise src.error(src.tree, f"`{fn.__name__}` has no parameter `{wrt}` to differentiate by")
    env = Env(fn)
    derive = _Deriver(src, env)
    tree = copy.deepcopy(src.tree)
    seed = ast.copy_location(ast.Assign([ast.Name(_d_name(wrt), ast.Store())], ast.Constant(1.0)), src.tree)
    tree.body = [seed, *derive.body(tree.body, {wrt})]
    tree.returns = None
    tree.decorator_list = []
    ast.fix_missing_locations(tree)
    derived_globals = dict(fn.__globals__)
    derived_globals[KT] = kt
    derived = types.FunctionType(fn.__code__, derived_globals, fn.__name__, fn.__defaults__, fn.__closure__)
    derived.__qualname__ = f"{fn.__qualname__}.<derivative by {wrt}>"
    text = f"# the derivative by {wrt} of {fn.__qualname__}\n{ast.unparse(tree)}\n"
    return DeviceFunction.of_source(derived, FunctionSource(derived, src.filename, text, src.lines, src.first_line, tree))


class _Deriver:
    """The statement and expression rules; ``active`` names depend on the parameter."""

    def __init__(self, src: FunctionSource, env: Env):
        self.src, self.env = src, env

    def refuse(self, node: ast.AST, what: str, hint: str | None = None) -> Exception:
        return self.src.error(node, f"cannot differentiate {what}", hint)

    # statements -----------------------------------------------------------------------------

    def body(self, stmts: list[ast.stmt], active: set[str]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in stmts:
            out += self.statement(stmt, active)
        return out

    def statement(self, stmt: ast.stmt, active: set[str]) -> list[ast.stmt]:
        if isinstance(stmt, ast.AugAssign):  # x op= e is x = x op e
            target = ast.Name(stmt.target.id, ast.Store()) if isinstance(stmt.target, ast.Name) else stmt.target
            load = ast.Name(target.id, ast.Load()) if isinstance(target, ast.Name) else stmt.target
            stmt = ast.copy_location(ast.Assign([target], ast.BinOp(load, stmt.op, stmt.value)), stmt)
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            stmt = ast.copy_location(ast.Assign([stmt.target], stmt.value), stmt)
        if isinstance(stmt, ast.Assign):
            return self.assign(stmt, active)
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise self.refuse(stmt, "a `return` without a value")
            slope = ast.copy_location(self.zero_if_none(self.d(stmt.value, active), stmt), stmt)
            return [ast.copy_location(ast.Return(slope), stmt)]
        if isinstance(stmt, ast.If):
            return [self.branch(stmt, active)]
        if isinstance(stmt, ast.Expr | ast.Pass):
            if self.depends(stmt, active):
                raise self.refuse(stmt, "an expression statement that reads the parameter")
            return [stmt]
        if isinstance(stmt, ast.For | ast.While):
            raise self.refuse(stmt, "a loop", "write the function as straight-line code, `if`s and `kt.where`")
        raise self.refuse(stmt, f"a `{type(stmt).__name__}` statement")

    def assign(self, stmt: ast.Assign, active: set[str]) -> list[ast.stmt]:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            if self.depends(stmt.value, active):
                raise self.refuse(stmt, "an assignment to several names or to an element", "assign one name at a time")
            for target in stmt.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        active.discard(name.id)
            return [stmt]
        name = stmt.targets[0].id
        d = self.d(stmt.value, active)
        if d is None:
            active.discard(name)
            return [stmt]
        active.add(name)
        return [ast.copy_location(ast.Assign([ast.Name(_d_name(name), ast.Store())], d), stmt), stmt]

    def branch(self, stmt: ast.If, active: set[str]) -> ast.If:
        """Each branch with its own derivatives; a name active after one branch only gets a zero
        derivative at the end of the other."""
        then_active, else_active = set(active), set(active)
        then = self.body(stmt.body, then_active)
        orelse = self.body(stmt.orelse, else_active)
        joined = then_active | else_active
        for side, side_active in ((then, then_active), (orelse, else_active)):
            for name in sorted(joined - side_active):
                side.append(ast.copy_location(ast.Assign([ast.Name(_d_name(name), ast.Store())], ast.Constant(ZERO)), stmt))
        active.clear()
        active.update(joined)
        return ast.copy_location(ast.If(stmt.test, then or [ast.Pass()], orelse), stmt)

    # expressions ----------------------------------------------------------------------------

    def depends(self, node: ast.AST, active: set[str]) -> bool:
        return any(isinstance(n, ast.Name) and n.id in active for n in ast.walk(node))

    def zero_if_none(self, d: ast.expr | None, at: ast.AST) -> ast.expr:
        return d if d is not None else ast.copy_location(ast.Constant(ZERO), at)

    def d(self, node: ast.expr, active: set[str]) -> ast.expr | None:
        """The derivative of ``node``; None where it is 0 (nothing in it depends on the parameter)."""
        if not self.depends(node, active):
            return None
        if isinstance(node, ast.Name):
            return ast.Name(_d_name(node.id), ast.Load())
        if isinstance(node, ast.BinOp):
            return self.binop(node, active)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub | ast.UAdd):
                inner = self.d(node.operand, active)
                return ast.UnaryOp(node.op, inner) if inner is not None else None
            return None  # `not x`: a bool
        if isinstance(node, ast.Compare | ast.BoolOp):
            return None  # a bool
        if isinstance(node, ast.IfExp):
            then, orelse = self.d(node.body, active), self.d(node.orelse, active)
            if then is None and orelse is None:
                return None
            return ast.IfExp(node.test, self.zero_if_none(then, node), self.zero_if_none(orelse, node))
        if isinstance(node, ast.Call):
            return self.call(node, active)
        if isinstance(node, ast.Subscript):
            raise self.refuse(node, "a load indexed by the parameter", "index the arrays by the indices only")
        raise self.refuse(node, f"a `{type(node).__name__}` expression")

    def binop(self, node: ast.BinOp, active: set[str]) -> ast.expr | None:
        a, b = node.left, node.right
        da, db = self.d(a, active), self.d(b, active)
        op = node.op
        if isinstance(op, ast.Add | ast.Sub):
            if db is None:
                return da
            if da is None:
                return db if isinstance(op, ast.Add) else ast.UnaryOp(ast.USub(), db)
            return ast.BinOp(da, op, db)
        if isinstance(op, ast.Mult):  # da b + a db
            return _sum(_mul(da, b), _mul(a, db))
        if isinstance(op, ast.Div):  # da / b - a db / b^2
            first = ast.BinOp(da, ast.Div(), b) if da is not None else None
            second = ast.BinOp(_mul(a, db), ast.Div(), ast.BinOp(b, ast.Mult(), b)) if db is not None else None
            if second is None:
                return first
            return ast.BinOp(first, ast.Sub(), second) if first is not None else ast.UnaryOp(ast.USub(), second)
        if isinstance(op, ast.Pow):
            if db is not None or not (isinstance(b, ast.Constant) and isinstance(b.value, int | float)):
                raise self.refuse(node, "`**` by anything but a number", "write exp(y * log(x))")
            n = b.value
            return _mul(da, ast.BinOp(ast.Constant(float(n)), ast.Mult(), ast.BinOp(a, ast.Pow(), ast.Constant(n - 1))))
        raise self.refuse(node, f"the operator `{ast.unparse(node)}` on the parameter")

    def call(self, node: ast.Call, active: set[str]) -> ast.expr | None:
        fn = self.function(node.func)
        if node.keywords:
            raise self.refuse(node, f"a call with keyword arguments, `{ast.unparse(node)}`")
        args = node.args
        if isinstance(fn, dtypes.ScalarType):
            if not fn.is_float:
                raise self.refuse(node, f"the integer cast `{ast.unparse(node)}`", "keep the parameter a float")
            return self.d(args[0], active) if len(args) == 1 else None
        rule = _RULES.get(id(fn)) if fn is not MISSING else None
        if rule is None:
            raise self.refuse(node, f"the call `{ast.unparse(node.func)}(...)`",
                              "kaio derives arithmetic, kt.where, kt.maximum/minimum and exp, exp2, log, log2, "
                              "tanh, sqrt, rsqrt, sin, cos, abs, fma")  # fmt: skip
        ds = [self.d(a, active) for a in args]
        if rule == "where":
            return self.select(args[0], ds[1], ds[2], node)
        if rule in ("maximum", "minimum"):
            if len(args) != 2:
                raise self.refuse(node, f"`{ast.unparse(node.func)}` of {len(args)} values")
            pick = ast.GtE() if rule == "maximum" else ast.LtE()
            return self.select(ast.Compare(args[0], [pick], [args[1]]), ds[0], ds[1], node)
        if rule == "fma":  # a b + c
            return _sum(_sum(_mul(ds[0], args[1]), _mul(args[0], ds[1])), ds[2])
        (x,), (dx,) = args, ds
        return _mul(dx, self.slope(rule, node, x))

    def slope(self, rule: str, node: ast.Call, x: ast.expr) -> ast.expr:
        """d f(x) / dx of a one-argument function, from the call ``node`` = f(x) itself."""
        if rule == "exp":
            return node
        if rule == "exp2":
            return ast.BinOp(node, ast.Mult(), ast.Constant(LN2))
        if rule == "log":
            return ast.BinOp(ast.Constant(1.0), ast.Div(), x)
        if rule == "log2":
            return ast.BinOp(ast.Constant(1.0), ast.Div(), ast.BinOp(x, ast.Mult(), ast.Constant(LN2)))
        if rule == "tanh":
            return ast.BinOp(ast.Constant(1.0), ast.Sub(), ast.BinOp(node, ast.Mult(), node))
        if rule == "sqrt":
            return ast.BinOp(ast.Constant(0.5), ast.Div(), node)
        if rule == "rsqrt":
            return ast.BinOp(ast.Constant(-0.5), ast.Mult(), ast.BinOp(node, ast.Mult(), ast.BinOp(node, ast.Mult(), node)))
        if rule == "sin":
            return _kt_call("cos", x)
        if rule == "cos":
            return ast.UnaryOp(ast.USub(), _kt_call("sin", x))
        assert rule == "abs"
        return _kt_call("where", ast.Compare(x, [ast.GtE()], [ast.Constant(0.0)]), ast.Constant(1.0), ast.Constant(-1.0))

    def select(self, cond: ast.expr, a: ast.expr | None, b: ast.expr | None, at: ast.AST) -> ast.expr | None:
        if a is None and b is None:
            return None
        return _kt_call("where", cond, self.zero_if_none(a, at), self.zero_if_none(b, at))

    def function(self, func: ast.expr) -> Any:
        """The object a call's ``Name`` or ``a.b.c`` names in the function's environment."""
        chain: list[str] = []
        while isinstance(func, ast.Attribute):
            chain.insert(0, func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            return MISSING
        obj = self.env.lookup(func.id)
        for attr in chain:
            obj = getattr(obj, attr, MISSING) if obj is not MISSING else MISSING
        return obj


def _d_name(name: str) -> str:
    return f"_kaio_d_{name}"


def _kt_call(name: str, *args: ast.expr) -> ast.expr:
    return ast.Call(ast.Attribute(ast.Name(KT, ast.Load()), name, ast.Load()), list(args), [])


def _mul(d: ast.expr | None, x: ast.expr | None) -> ast.expr | None:
    """``d * x`` where d is a derivative (None: 0), or x one."""
    if d is None or x is None:
        return None
    for one, other in ((d, x), (x, d)):
        if isinstance(one, ast.Constant) and one.value == 1.0:
            return other
    return ast.BinOp(d, ast.Mult(), x)


def _sum(a: ast.expr | None, b: ast.expr | None) -> ast.expr | None:
    if a is None:
        return b
    return a if b is None else ast.BinOp(a, ast.Add(), b)
