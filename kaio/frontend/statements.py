"""Statements: assignments, ``if``, early exits; loops live in ``loops.py``.

Early exits stay structured. ``return``, ``break`` and ``continue`` set a flag variable
(``%ret``, ``%brk``, ``%cont``); after a statement that may have set one, the rest of the
statement list runs under ``if not flag``. A flag that is a compile-time constant prunes instead:
code after an unconditional ``return`` is dead and not compiled, and code after an ``if`` whose
branches never exit is not guarded at all.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from kaio.dialects.kernel import LoadOp, StoreOp
from kaio.dtypes import ScalarType, bool_
from kaio.frontend.analysis import exits, has_value_return, is_comment
from kaio.frontend.context import CompilerBase
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.operators import BINOPS, binary, negate
from kaio.frontend.scope import FLAGS, RET, RV, TYPE_CHANGE_HINT, return_slots
from kaio.frontend.typerules import adapt
from kaio.frontend.values import (
    Const,
    NoneValue,
    PyObject,
    Scalar,
    TupleValue,
    Value,
    scalar_type_of,
    type_name,
)


class StatementsMixin(CompilerBase):
    def visit_body(self, body: Sequence[ast.stmt]) -> None:
        for i, stmt in enumerate(body):
            self.visit_stmt(stmt)
            if not exits(self.src, stmt):
                continue
            live = self.live_flags()
            if live is None:
                return  # every path has left: what follows is dead code
            if live and i + 1 < len(body):
                self.guard(live, body[i + 1 :])
                return

    def live_flags(self) -> list[tuple[str, SSAValue]] | None:
        """The exit flags that may be set at runtime; None if one is certainly set."""
        live: list[tuple[str, SSAValue]] = []
        for name in FLAGS:
            v = self.scope.get(name)
            if isinstance(v, Const):
                if v.value:
                    return None
            elif isinstance(v, Scalar):
                live.append((name, v.ssa))
        return live

    def guard(self, flags: list[tuple[str, SSAValue]], rest: Sequence[ast.stmt]) -> None:
        """Run ``rest`` only on the paths where no exit flag is set."""
        self.unless_exited(flags, lambda: self.visit_body(rest))

    def unless_exited(self, flags: list[tuple[str, SSAValue]], run: Callable[[], None]) -> None:
        any_set = flags[0][1]
        for _, flag in flags[1:]:
            any_set = self.em.value(arith.OrIOp(any_set, flag))

        def run_rest() -> None:
            for name, _ in flags:  # on this path no flag is set
                self.scope.bind(name, Const(False, bool_))
            run()

        def skip() -> None:
            if len(flags) == 1:  # the one flag that can be set is set on this path
                self.scope.bind(flags[0][0], Const(True, bool_))

        self.branch(negate(self.em, any_set), run_rest, skip, "an early exit")

    def visit_stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Pass) or is_comment(stmt):
            return
        self.state.current = (self.src, stmt)
        self.em.mark(self.src.filename, stmt.lineno, stmt.col_offset + 1, self.src.statement_text(stmt))
        method = getattr(self, "stmt_" + type(stmt).__name__, None)
        try:
            if method is None:
                raise SemanticError(
                    f"{type(stmt).__name__} statements are not supported in kernels"
                )
            method(stmt)
        except SemanticError as e:
            raise e.locate(stmt, self.src) from None

    # ------------------------------------------------------------------ assignments

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.eval(node.value)
        for target in node.targets:
            self.assign_target(target, value)

    def assign_target(self, target: ast.expr, value: Value) -> None:
        try:
            if isinstance(target, ast.Name):
                if isinstance(value, NoneValue):
                    raise SemanticError("this call returns nothing; there is no value to assign")
                self.scope.assign(target.id, value)
            elif isinstance(target, ast.Subscript):
                self.store(self.eval(target.value), target.slice, value)
            elif isinstance(target, ast.Tuple | ast.List):
                if not isinstance(value, TupleValue) or len(value.items) != len(target.elts):
                    n = len(value.items) if isinstance(value, TupleValue) else 1
                    raise SemanticError(f"cannot unpack {n} value(s) into {len(target.elts)} names")
                for t, v in zip(target.elts, value.items, strict=True):
                    self.assign_target(t, v)
            elif isinstance(target, ast.Attribute):
                raise SemanticError("cannot assign to an attribute in a kernel")
            else:
                raise SemanticError(f"cannot assign to a {type(target).__name__}")
        except SemanticError as e:
            raise e.locate(target, self.src) from None

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        op = BINOPS.get(type(node.op))
        if op is None:
            raise SemanticError("the `@=` operator is not supported in kernels")
        target = node.target
        if isinstance(target, ast.Name):
            current = self.lookup(target.id)
            self.assign_target(target, binary(self.em, op, current, self.eval(node.value)))
            return
        if isinstance(target, ast.Subscript):
            # Python order: container and index once, load, right-hand side, operate, store.
            try:
                ref = self.memory_ref(self.eval(target.value))
                self.check_writable(ref)
                indices = self.indices(ref, self.eval(target.slice), target.slice)
            except SemanticError as e:
                raise e.locate(target, self.src) from None
            old = Scalar(self.em.value(LoadOp(ref.ssa, indices)), ref.elem)
            new = binary(self.em, op, old, self.eval(node.value))
            self.em.add(StoreOp(self.element_value(ref, new), ref.ssa, indices))
            return
        raise SemanticError(f"cannot assign to a {type(target).__name__}", None, target)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise SemanticError("an annotated assignment needs a plain name", None, node.target)
        t = self.static_type(node.annotation)
        if node.value is None:
            raise SemanticError(
                f"`{node.target.id}: {t.name}` declares nothing without a value",
                f"write `{node.target.id}: {t.name} = ...`",
            )
        value = self.eval(node.value)
        if isinstance(value, Const) and value.type is None:
            value = adapt(value, t)
        if scalar_type_of(value) is not t:
            raise SemanticError(
                f"`{node.target.id}` is declared {t.name} but the value is {type_name(value)}",
                f"cast the value: `{t.name}(...)`",
                node.value,
            )
        self.assign_target(node.target, value)

    def static_type(self, node: ast.expr) -> ScalarType:
        v = self.eval(node)
        if isinstance(v, PyObject) and isinstance(v.obj, ScalarType):
            return v.obj
        raise SemanticError(f"expected a kaio scalar type, got {type_name(v)}", None, node)

    def stmt_Expr(self, node: ast.Expr) -> None:
        self.eval(node.value)

    # ------------------------------------------------------------------ control flow

    def stmt_If(self, node: ast.If) -> None:
        cond = self.eval_bool(node.test, "the condition of `if`")
        if isinstance(cond, Const):  # compile-time condition: only the live branch exists
            self.visit_body(node.body if cond.value else node.orelse)
            return
        orelse = node.orelse
        self.branch(
            cond.ssa,
            lambda: self.visit_body(node.body),
            (lambda: self.visit_body(orelse)) if orelse else None,
            f"the `if` at line {node.lineno}",
        )

    def stmt_Return(self, node: ast.Return) -> None:
        if self.is_kernel:
            if node.value is not None:
                raise SemanticError(
                    "a kernel cannot return a value", "write results into a MutArray parameter"
                )
        elif node.value is None:
            if self.value_returning:
                raise SemanticError(
                    "bare `return` in a device function that returns a value elsewhere"
                )
        else:
            self.set_return_value(self.eval(node.value), node.value)
        self.scope.bind(RET, Const(True, bool_))

    def set_return_value(self, value: Value, node: ast.expr) -> None:
        """``return value``: a scalar, or a tuple of scalars (``return a, b``), each kept in its
        own return slot so branches and loops merge them like any variable."""
        items = value.items if isinstance(value, TupleValue) else (value,)
        arity = len(items) if isinstance(value, TupleValue) else None
        if self.return_arity != arity and (self.return_arity is not None or self.scope.get(RV) is not None):
            counts = [f"{n} values" if n is not None else "one value" for n in (arity, self.return_arity)]
            raise SemanticError(f"returns {counts[0]} here but {counts[1]} elsewhere", None, node)
        self.return_arity = arity
        declared = self.return_type if isinstance(self.return_type, tuple) else (self.return_type,)
        if self.return_type is None:
            declared = (None,) * len(items)
        for slot, item, rt in zip(return_slots(arity), items, declared, strict=True):
            self._set_return_slot(slot, item, rt, node)

    def _set_return_slot(self, slot: str, value: Value, declared: ScalarType | None, node: ast.expr) -> None:
        if not isinstance(value, Scalar | Const):
            raise SemanticError(
                f"a device function returns scalars, not {type_name(value)}", None, node
            )
        if declared is not None and isinstance(value, Const) and value.type is None:
            value = adapt(value, declared)
        previous = self.scope.get(slot)
        if previous is not None:
            pt, vt = scalar_type_of(previous), scalar_type_of(value)
            if pt is not None and vt is not None and pt is not vt:
                said = "is declared to return" if declared else "returned"
                raise SemanticError(
                    f"returns {vt.name}, but the function {said} {pt.name}",
                    TYPE_CHANGE_HINT if declared is None else f"cast: `{pt.name}(...)`",
                    node,
                )
        self.scope.assign(slot, value)

    def stmt_Break(self, node: ast.Break) -> None:
        self.scope.bind("%brk", Const(True, bool_))

    def stmt_Continue(self, node: ast.Continue) -> None:
        self.scope.bind("%cont", Const(True, bool_))

    @property
    def value_returning(self) -> bool:
        return has_value_return(self.src)
