"""Expressions: AST node -> value.

``and``/``or``, chained comparisons and ``a if c else b`` evaluate their later operands only on
the paths that need them (``scf.if``), so ``i < n and x[i] > 0`` never loads ``x[i]`` out of
bounds. When the guarded operand turns out to be side-effect-free arithmetic, the ops are moved
out and combined with ``andi``/``ori``/``select`` instead, which is what a C compiler would
emit; loads, shuffles, atomics and divisions are never evaluated speculatively.
"""

from __future__ import annotations

import ast
import builtins as py_builtins
from collections.abc import Callable
from typing import Any

from xdsl.dialects import arith, scf
from xdsl.ir import Block, Region, SSAValue
from xdsl.traits import get_effects, is_speculatable

from kaio import prelude as kp
from kaio.dialects.kernel import LoadOp, SourceLocOp, StoreOp
from kaio.dtypes import ScalarType, bool_, i32, i64, u32, u64
from kaio.frontend.analysis import local_names
from kaio.frontend.call_handlers import CallHandler, resolve_call
from kaio.frontend.context import CompilerBase, Env, python_value
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.operators import (
    BINOPS,
    CMPOPS,
    UNARYOPS,
    binary,
    cast,
    compare,
    materialize,
    unary,
)
from kaio.frontend.typerules import adapt, unify
from kaio.frontend.values import (
    ArrayRef,
    Const,
    PyObject,
    Scalar,
    SharedRef,
    TupleValue,
    Undefined,
    Value,
    type_name,
)

_PYTHON_BUILTIN_HINTS: dict[str, tuple[str, str | None]] = {
    "print": (
        "`print` is not supported in kernels",
        "write values to a MutArray and print on the host",
    ),
    "len": (
        "`len` is not supported in kernels",
        "arrays carry no length: pass it as a parameter (`n: u32`)",
    ),
    "int": ("`int(...)` is not a kaio type", "cast with a kaio type: `i32(x)`, `u32(x)`"),
    "float": ("`float(...)` is not a kaio type", "cast with a kaio type: `f32(x)`"),
    "bool": ("`bool(...)` is not a kaio type", "compare explicitly (`x != 0`) or cast: `bool_(x)`"),
    "range": ("`range` can only be the iterable of a `for` loop", None),
}


class ExpressionsMixin(CompilerBase):
    def eval(self, node: ast.expr) -> Value:
        try:
            method = getattr(self, "expr_" + type(node).__name__, None)
            if method is None:
                raise SemanticError(
                    f"{type(node).__name__} expressions are not supported in kernels"
                )
            result: Value = method(node)
            return result
        except SemanticError as e:
            raise e.locate(node, self.src) from None

    def eval_bool(self, node: ast.expr, what: str) -> Scalar | Const:
        v = self.eval(node)
        if (isinstance(v, Scalar | Const)) and v.type is bool_:
            return v
        raise SemanticError(
            f"{what} must be a bool, got {type_name(v)}",
            "compare explicitly, e.g. `x != 0`",
            node,
        )

    # ------------------------------------------------------------------ leaves

    def expr_Constant(self, node: ast.Constant) -> Value:
        value = node.value
        if isinstance(value, bool):
            return Const(value, bool_)
        if isinstance(value, int | float):
            return Const(value)
        if value is None:
            raise SemanticError("`None` is not a kernel value")
        if isinstance(value, str | bytes):
            raise SemanticError("strings are not supported in kernels")
        raise SemanticError(f"{type(value).__name__} constants are not supported in kernels")

    def expr_Name(self, node: ast.Name) -> Value:
        return self.lookup(node.id)

    def lookup(self, name: str) -> Value:
        v = self.scope.get(name)
        if v is not None:
            if isinstance(v, Undefined):
                raise SemanticError(
                    f"`{name}` may be undefined here: {v.reason}",
                    "assign it on every path before this point",
                )
            return v
        if name in local_names(self.src):
            raise SemanticError(f"`{name}` is used before it is assigned")
        obj = self.env.lookup(name)
        if Env.missing(obj):
            raise SemanticError(
                f"name `{name}` is not defined",
                "kernels are compiled when decorated: globals and device functions they use "
                "must be defined above them",
            )
        return python_value(obj)

    def expr_Attribute(self, node: ast.Attribute) -> Value:
        base = self.eval(node.value)
        if isinstance(base, PyObject):
            try:
                return python_value(getattr(base.obj, node.attr))
            except AttributeError:
                raise SemanticError(f"{type_name(base)} has no attribute `{node.attr}`") from None
        hint = None
        if isinstance(base, ArrayRef | SharedRef):
            hint = "arrays have no attributes in kernels; pass sizes as parameters"
        raise SemanticError(f"`.{node.attr}` on a {type_name(base)} value is not supported", hint)

    def expr_Tuple(self, node: ast.Tuple) -> Value:
        return TupleValue(tuple(self.eval(e) for e in node.elts))

    # ------------------------------------------------------------------ operators

    def expr_BinOp(self, node: ast.BinOp) -> Value:
        op = BINOPS.get(type(node.op))
        if op is None:
            raise SemanticError("the `@` operator is not supported in kernels")
        return binary(self.em, op, self.eval(node.left), self.eval(node.right))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        return unary(self.em, UNARYOPS[type(node.op)], self.eval(node.operand))

    def expr_BoolOp(self, node: ast.BoolOp) -> Value:
        return self._short_circuit(node.values, isinstance(node.op, ast.And))

    def _short_circuit(self, operands: list[ast.expr], is_and: bool) -> Value:
        word = "and" if is_and else "or"
        first = self.eval_bool(operands[0], f"an operand of `{word}`")
        if len(operands) == 1:
            return first
        rest = operands[1:]
        if isinstance(first, Const):
            # `True and b` is b; `False and b` is False without evaluating b.
            return self._short_circuit(rest, is_and) if first.value == is_and else first

        def later() -> Value:
            return self._short_circuit(rest, is_and)

        def decided() -> Value:
            return Const(not is_and, bool_)

        if is_and:
            return self.conditional_value(first.ssa, later, decided, f"`{word}`")
        return self.conditional_value(first.ssa, decided, later, f"`{word}`")

    def expr_Compare(self, node: ast.Compare) -> Value:
        return self._compare_chain(self.eval(node.left), node.ops, node.comparators)

    def _compare_chain(self, left: Value, ops: list[ast.cmpop], rights: list[ast.expr]) -> Value:
        op = CMPOPS.get(type(ops[0]))
        if op is None:
            raise SemanticError(
                "`is`, `is not`, `in` and `not in` are not supported in kernels",
                "compare values with `==` / `!=`",
                rights[0],
            )
        right = self.eval(rights[0])
        result = compare(self.em, op, left, right)
        if len(ops) == 1:
            return result
        assert isinstance(result, Scalar | Const)
        if isinstance(result, Const):
            if not result.value:
                return result
            return self._compare_chain(right, ops[1:], rights[1:])
        return self.conditional_value(
            result.ssa,
            lambda: self._compare_chain(right, ops[1:], rights[1:]),
            lambda: Const(False, bool_),
            "a chained comparison",
        )

    def expr_IfExp(self, node: ast.IfExp) -> Value:
        cond = self.eval_bool(node.test, "the condition of `... if ... else ...`")
        if isinstance(cond, Const):
            return self.eval(node.body if cond.value else node.orelse)
        return self.conditional_value(
            cond.ssa,
            lambda: self.eval(node.body),
            lambda: self.eval(node.orelse),
            "`... if ... else ...`",
        )

    def conditional_value(
        self,
        cond: SSAValue,
        then_fn: Callable[[], Value],
        else_fn: Callable[[], Value],
        what: str,
    ) -> Value:
        """A value computed on one of two paths; ``scf.if`` unless speculation is harmless."""
        blocks: list[Block] = []
        values: list[Value] = []
        for fn in (then_fn, else_fn):
            block = Block()
            with self.em.in_block(block):
                values.append(fn())
            blocks.append(block)
        a, b = values
        for v in values:
            if not isinstance(v, Scalar | Const):
                raise SemanticError(f"both sides of {what} must be scalars, got {type_name(v)}")
        t = unify(a, b, f"the two sides of {what}")
        x, y = materialize(self.em, a, t), materialize(self.em, b, t)
        if all(_speculatable(block) for block in blocks):
            for block in blocks:
                for op in list(block.ops):
                    self.em.add(block.detach_op(op))
            return Scalar(self._select(cond, a, b, x, y, t), t)
        for block, yielded in zip(blocks, (x, y), strict=True):
            block.add_op(scf.YieldOp(yielded))
        op = scf.IfOp(cond, [t.ir_type], Region(blocks[0]), Region(blocks[1]))
        self.em.add(op)
        return Scalar(op.results[0], t)

    def _select(
        self, cond: SSAValue, a: Value, b: Value, x: SSAValue, y: SSAValue, t: ScalarType
    ) -> SSAValue:
        if t is bool_ and isinstance(b, Const) and b.value is False:
            return self.em.value(arith.AndIOp(cond, x))
        if t is bool_ and isinstance(a, Const) and a.value is True:
            return self.em.value(arith.OrIOp(cond, y))
        return self.em.value(arith.SelectOp(cond, x, y))

    # ------------------------------------------------------------------ memory

    def expr_Subscript(self, node: ast.Subscript) -> Value:
        base = self.eval(node.value)
        if isinstance(base, TupleValue):
            index = self.eval(node.slice)
            if isinstance(index, Const) and isinstance(index.value, int):
                if -len(base.items) <= index.value < len(base.items):
                    return base.items[index.value]
            raise SemanticError("a tuple can only be indexed with an in-range int literal")
        ref = self.memory_ref(base)
        indices = self.indices(ref, self.eval(node.slice), node.slice)
        return Scalar(self.em.value(LoadOp(ref.ssa, indices)), ref.elem)

    def memory_ref(self, base: Value) -> ArrayRef | SharedRef:
        if isinstance(base, ArrayRef | SharedRef):
            return base
        if isinstance(base, Scalar | Const):
            raise SemanticError(f"cannot index a scalar ({type_name(base)})")
        raise SemanticError(f"cannot index {type_name(base)}")

    def indices(self, ref: ArrayRef | SharedRef, index: Value, node: ast.AST) -> list[SSAValue]:
        """The index operands of a load/store/atomic on ``ref``."""
        if isinstance(ref, ArrayRef):
            if isinstance(index, TupleValue):
                raise SemanticError(
                    f"global array `{ref.name}` is 1-D and takes one index",
                    "compute the flat index with `index_2d(row, col, row_stride)`",
                    node,
                )
            return [self.global_index(index, node)]
        items = index.items if isinstance(index, TupleValue) else (index,)
        if len(items) != len(ref.shape):
            raise SemanticError(
                f"this {len(ref.shape)}-D shared buffer takes {len(ref.shape)} indices, "
                f"got {len(items)}",
                None,
                node,
            )
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return [self.shared_index(v, n, e) for v, n, e in zip(items, ref.shape, elts, strict=True)]

    def global_index(self, v: Value, node: ast.AST) -> SSAValue:
        """An index into a global array, sign- or zero-extended to the i64 the IR takes."""
        if isinstance(v, Const):
            if (v.type is not None and not v.type.is_int) or isinstance(v.value, float | bool):
                raise SemanticError(f"an index must be an integer, got {type_name(v)}", None, node)
            if v.value < 0:
                raise SemanticError(
                    f"negative index {v.value}",
                    "kernels do not count from the end of an array",
                    node,
                )
            return materialize(self.em, Const(int(v.value)), i64)
        if not isinstance(v, Scalar) or not v.type.is_int:
            raise SemanticError(
                f"an index must be an integer, got {type_name(v)}", "cast it, e.g. `u32(x)`", node
            )
        return cast(self.em, v, i64 if v.type.kind == "int" else u64).ssa  # type: ignore[union-attr]

    def shared_index(self, v: Value, size: int, node: ast.AST) -> SSAValue:
        """An index into a shared buffer: i32, checked against the size when known."""
        if isinstance(v, Const):
            if isinstance(v.value, float | bool) or (v.type is not None and not v.type.is_int):
                raise SemanticError(f"an index must be an integer, got {type_name(v)}", None, node)
            if not 0 <= v.value < size:
                raise SemanticError(
                    f"index {v.value} is out of bounds for a shared dimension of size {size}",
                    None,
                    node,
                )
            return self.em.constant(int(v.value), i32)
        if not isinstance(v, Scalar) or not v.type.is_int:
            raise SemanticError(
                f"an index must be an integer, got {type_name(v)}", "cast it, e.g. `u32(x)`", node
            )
        if v.type.bits == 32:
            return v.ssa  # i32 and u32 are the same signless bits
        target = i32 if v.type.kind == "int" or v.type.bits > 32 else u32
        return cast(self.em, v, target).ssa  # type: ignore[union-attr]

    def check_writable(self, ref: ArrayRef | SharedRef) -> None:
        if isinstance(ref, ArrayRef) and not ref.kaio_type.mutable:
            raise SemanticError(
                f"cannot write to `{ref.name}`: it is a read-only {ref.kaio_type!r}",
                f"declare the parameter as MutArray[{ref.elem.name}]",
            )

    def store(self, base: Value, index_node: ast.expr, value: Value) -> None:
        ref = self.memory_ref(base)
        self.check_writable(ref)
        indices = self.indices(ref, self.eval(index_node), index_node)
        self.em.add(StoreOp(self.element_value(ref, value), ref.ssa, indices))

    def element_value(self, ref: ArrayRef | SharedRef, value: Value) -> SSAValue:
        if isinstance(value, Const):
            try:
                return materialize(self.em, adapt(value, ref.elem), ref.elem)
            except SemanticError as e:
                raise SemanticError(
                    f"cannot store into an element of type {ref.elem.name}: {e.message}", e.hint
                ) from None
        if isinstance(value, Scalar) and value.bounds is not None:  # a loop value adapts
            try:
                return materialize(self.em, value, ref.elem)
            except SemanticError as e:
                raise SemanticError(
                    f"cannot store into an element of type {ref.elem.name}: {e.message}", e.hint
                ) from None
        if not isinstance(value, Scalar) or value.type is not ref.elem:
            raise SemanticError(
                f"cannot store {type_name(value)} into an element of type {ref.elem.name}",
                f"cast the value: `{ref.elem.name}(v)`",
            )
        return value.ssa

    # ------------------------------------------------------------------ calls

    def expr_Call(self, node: ast.Call) -> Value:
        callee = self.eval(node.func)
        if not isinstance(callee, PyObject):
            raise SemanticError(f"a {type_name(callee)} value is not callable", None, node.func)
        obj = callee.obj
        handler = self.call_handler(obj, node)
        for kw in node.keywords:
            if kw.arg is None:
                raise SemanticError("`**` arguments are not supported", None, kw)
        args = [self.eval(a) for a in node.args]
        kwargs = {kw.arg: self.eval(kw.value) for kw in node.keywords if kw.arg is not None}
        return handler(node, args, kwargs)

    def call_handler(self, obj: Any, node: ast.Call) -> CallHandler:
        """What calling ``obj`` means in a kernel; an error for anything the language lacks."""
        handler = resolve_call(self, obj)
        if handler is not None:
            return handler
        name = getattr(obj, "__name__", None)
        if name is not None and getattr(py_builtins, name, None) is obj:
            message, hint = _PYTHON_BUILTIN_HINTS.get(
                name, (f"Python builtin `{name}` is not supported in kernels", None)
            )
            raise SemanticError(message, hint, node)
        what = f"`{name}`" if name else type_name(PyObject(obj))
        hint = "kernels can call kaio builtins and functions decorated with @kaio.device"
        if name is not None and isinstance(getattr(kp, name, None), kp.Builtin):
            hint = f"use kaio's `{name}` (from kaio.prelude import {name})"
        raise SemanticError(f"cannot call Python function {what} from a kernel", hint, node)


def _speculatable(block: Block) -> bool:
    for op in block.ops:
        if isinstance(op, SourceLocOp):
            continue
        if not is_speculatable(op) or get_effects(op) != set():
            return False
    return True
