"""``for ... in range``, ``for ... in static_range`` and ``while``.

- ``range`` with a signed loop variable, a positive compile-time step and no ``break``/``return``
  in the body becomes ``scf.for`` (which compares signed). Everything else becomes ``scf.while``
  with the comparison the loop variable's signedness needs (u32 loops compare unsigned), a
  runtime step's sign tested at runtime, and the exit flags in the condition.
- ``static_range`` unrolls at compile time; the loop variable is a compile-time int.
- Loop-carried values: the names the body assigns that exist before the loop (a literal enters
  the loop with its default type), plus the exit flags the body may set. Names first assigned
  in the body are not available after the loop.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from xdsl.dialects import arith, scf
from xdsl.ir import Block, Region, SSAValue

from kaio.dtypes import ScalarType, bool_, i32
from kaio.frontend.analysis import BRK, CONT, RET, assigned_names, body_exits, for_target
from kaio.frontend.context import CompilerBase
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.operators import compile_time, materialize
from kaio.frontend.scope import BRK as BRK_VAR
from kaio.frontend.scope import CONT as CONT_VAR
from kaio.frontend.scope import RET as RET_VAR
from kaio.frontend.scope import TYPE_CHANGE_HINT, Scope, carried_type, return_slots, same_value
from kaio.frontend.typerules import adapt, literal_kind
from kaio.frontend.values import (
    Const,
    PyObject,
    Scalar,
    TileValue,
    Undefined,
    Value,
    ValueType,
    runtime_value,
    scalar_type_of,
    type_name,
)

MAX_UNROLL = 4096

# A range loop's variable: name, type, initial value, condition builder, increment builder.
LoopVar = tuple[
    str, ScalarType, SSAValue, Callable[[SSAValue], SSAValue], Callable[[SSAValue], SSAValue]
]


class LoopsMixin(CompilerBase):
    def stmt_For(self, node: ast.For) -> None:
        name = for_target(node)
        kind = self._range_kind(node.iter)
        call = node.iter
        assert isinstance(call, ast.Call)
        if call.keywords:
            raise SemanticError(f"`{kind}` takes no keyword arguments", None, call.keywords[0])
        if not 1 <= len(call.args) <= 3:
            raise SemanticError(f"`{kind}` takes 1 to 3 arguments", None, call)
        args = [self.eval(a) for a in call.args]
        if len(args) == 1:
            args = [Const(0), args[0], Const(1)]
        elif len(args) == 2:
            args.append(Const(1))
        start, stop, step = args
        saved = self._enter_loop()
        if kind == "static_range":
            self._unroll(node, name, start, stop, step, call)
        else:
            self._range_loop(node, name, start, stop, step, call)
        self._leave_loop(saved)

    def _range_kind(self, it: ast.expr) -> str:
        from kaio.prelude import static_range

        if isinstance(it, ast.Call):
            callee = self.eval(it.func)
            if isinstance(callee, PyObject):
                if callee.obj is range:
                    return "range"
                if callee.obj is static_range:
                    return "static_range"
        raise SemanticError(
            "a kernel loop iterates over `range(...)` or `static_range(...)`",
            "index arrays inside the loop: `for i in range(n): ... x[i] ...`",
            it,
        )

    def _enter_loop(self) -> dict[str, Value]:
        # The enclosing loop's break/continue flags are False here (statements only run where
        # no flag is set) and the inner loop's own flags must not touch them.
        return {f: self.scope.vars.pop(f) for f in (BRK_VAR, CONT_VAR) if f in self.scope.vars}

    def _leave_loop(self, saved: dict[str, Value]) -> None:
        for f in (BRK_VAR, CONT_VAR):
            self.scope.vars.pop(f, None)
        self.scope.vars.update(saved)

    # ------------------------------------------------------------------ static_range

    def _unroll(
        self, node: ast.For, name: str, start: Value, stop: Value, step: Value, call: ast.Call
    ) -> None:
        bounds: list[int] = []
        for v in (start, stop, step):
            c = compile_time(v)
            if c is None or isinstance(c.value, bool) or not isinstance(c.value, int):
                raise SemanticError(
                    f"`static_range` needs compile-time integers, got {type_name(v)}",
                    "use `range` for runtime bounds",
                    call,
                )
            bounds.append(c.value)
        if bounds[2] == 0:
            raise SemanticError("the step of `static_range` must not be zero", None, call)
        values = list(range(*bounds))
        if len(values) > MAX_UNROLL:
            raise SemanticError(
                f"`static_range` would unroll {len(values)} iterations (at most {MAX_UNROLL})",
                "use `range` for long loops",
                call,
            )
        exits = body_exits(self.src, node.body)
        if BRK in exits:
            self.scope.bind(BRK_VAR, Const(False, bool_))
        self._unroll_from(node, name, values, CONT in exits)

    def _unroll_from(self, node: ast.For, name: str, values: list[int], has_cont: bool) -> None:
        for k, v in enumerate(values):
            self.scope.bind(name, Const(v))
            if has_cont:
                self.scope.bind(CONT_VAR, Const(False, bool_))
            self.visit_body(node.body)
            self.scope.vars.pop(CONT_VAR, None)
            live = self.live_flags()
            if live is None:
                return
            if live and k + 1 < len(values):
                rest = values[k + 1 :]

                def later_iterations(rest: list[int] = rest) -> None:
                    self._unroll_from(node, name, rest, has_cont)

                self.unless_exited(live, later_iterations)
                return

    # ------------------------------------------------------------------ range

    def _range_loop(
        self, node: ast.For, name: str, start: Value, stop: Value, step: Value, call: ast.Call
    ) -> None:
        try:
            t = _range_type(start, stop, step)
        except SemanticError as e:
            raise e.locate(call, self.src) from None
        cs = compile_time(step) if isinstance(step, Const) else None
        if cs is not None and cs.value == 0:
            raise SemanticError("the step of `range` must not be zero", None, call)
        consts = [v for v in (start, stop, step) if isinstance(v, Const)]
        if len(consts) == 3 and not range(int(start.value), int(stop.value), int(step.value)):  # type: ignore[union-attr]
            return  # no iteration at all
        exits = body_exits(self.src, node.body)
        em = self.em
        lb = materialize(em, start, t)
        ub = materialize(em, stop, t)
        negative_step = cs is not None and cs.value < 0
        if negative_step and t.kind == "uint":
            step_ssa = em.constant(-int(cs.value), t)  # type: ignore[union-attr]
        else:
            step_ssa = materialize(em, step, t)
        use_for = (
            t.kind == "int"
            and cs is not None
            and cs.value > 0
            and BRK not in exits
            and RET not in exits
        )
        if BRK in exits:
            self.scope.bind(BRK_VAR, Const(False, bool_))

        def condition(iv: SSAValue) -> SSAValue:
            pred = "lt" if not negative_step else "gt"
            sign = "s" if t.kind == "int" else "u"
            in_range = em.value(arith.CmpiOp(iv, ub, sign + pred))
            if cs is not None:
                return in_range
            zero = em.constant(0, t)
            if t.kind == "uint":  # a runtime step of 0 runs no iteration
                positive = em.value(arith.CmpiOp(step_ssa, zero, "ugt"))
                return em.value(arith.AndIOp(positive, in_range))
            up = em.value(arith.AndIOp(em.value(arith.CmpiOp(step_ssa, zero, "sgt")), in_range))
            below = em.value(arith.CmpiOp(iv, ub, "sgt"))
            down = em.value(arith.AndIOp(em.value(arith.CmpiOp(step_ssa, zero, "slt")), below))
            return em.value(arith.OrIOp(up, down))

        def advance(iv: SSAValue) -> SSAValue:
            op_cls = arith.SubiOp if negative_step and t.kind == "uint" else arith.AddiOp
            return em.value(op_cls(iv, step_ssa))

        bounds = None
        if all(isinstance(v, Const) and v.type is None for v in (start, stop, step)):
            values = range(int(start.value), int(stop.value), int(step.value))  # type: ignore[union-attr]
            bounds = (min(values[0], values[-1]), max(values[0], values[-1]))  # a loop value
        if use_for:
            self._scf_for(node, name, t, lb, ub, step_ssa, CONT in exits, bounds)
        else:
            self._scf_while(node, (name, t, lb, condition, advance), None, exits, bounds)

    def _carried(
        self, body: list[ast.stmt], exits: frozenset[str], skip: str | None
    ) -> list[tuple[str, ValueType, Value]]:
        """(name, type, value before the loop) of each loop-carried variable."""
        carried: list[tuple[str, ValueType, Value]] = []
        for n in assigned_names(self.src, body):
            v = self.scope.get(n)
            if n == skip or v is None or not isinstance(v, Scalar | Const | TileValue):
                continue
            carried.append((n, carried_type(n, v), v))
        flags = [(RET_VAR, RET), (BRK_VAR, BRK)]
        for var, exit_kind in flags:
            if exit_kind in exits:
                v = self.scope.get(var)
                assert v is not None
                carried.append((var, bool_, v))
        if RET in exits and self.value_returning:
            for slot in return_slots(self.return_arity):
                rv = self.scope.get(slot)
                if not isinstance(rv, Scalar | Const | TileValue):
                    raise SemanticError(
                        "a device function that returns from inside a loop needs a declared "
                        "return type",
                        "annotate it, e.g. `-> f32` or `-> tuple[f32, i32]`",
                    )
                carried.append((slot, carried_type(slot, rv), rv))
        return carried

    def _scf_for(
        self, node: ast.For, name: str, t: ScalarType, lb: SSAValue, ub: SSAValue, step: SSAValue,
        has_cont: bool, bounds: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        carried = self._carried(node.body, frozenset(), name)
        pre = self.scope
        block = Block(arg_types=[t.ir_type, *(ct.ir_type for _, ct, _ in carried)])
        self.scope = self._body_scope(pre, carried, block.args[1:])
        self.scope.bind(name, Scalar(block.args[0], t, bounds=bounds))
        if has_cont:
            self.scope.bind(CONT_VAR, Const(False, bool_))
        with self.em.in_block(block):
            self.visit_body(node.body)
            yields = self._loop_end(node, carried, block.args[1:])
            block.add_op(scf.YieldOp(*yields))
        inits = [materialize(self.em, v, ct) for _, ct, v in carried]
        op = scf.ForOp(lb, ub, step, inits, block)
        self.em.add(op)
        self._after_loop(node, pre, carried, list(op.results), name)

    def _scf_while(
        self, node: ast.For | ast.While, loop_var: LoopVar | None, test: ast.expr | None,
        exits: frozenset[str], bounds: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        """``scf.while`` for a range loop (``loop_var``, a loop value within ``bounds`` when they
        are known) or a ``while`` loop (``test``)."""
        skip = loop_var[0] if loop_var else None
        carried = self._carried(node.body, exits, skip)
        pre = self.scope
        types = [ct for _, ct, _ in carried]
        if loop_var is not None:
            types.insert(0, loop_var[1])
        ir_types = [ct.ir_type for ct in types]
        before, after = Block(arg_types=ir_types), Block(arg_types=ir_types)
        offset = 1 if loop_var is not None else 0

        self.scope = self._body_scope(pre, carried, before.args[offset:])
        with self.em.in_block(before):
            cond = self._while_condition(loop_var, test, before.args)
            before.add_op(scf.ConditionOp(cond, *before.args))

        self.scope = self._body_scope(pre, carried, after.args[offset:])
        for flag in (BRK_VAR, RET_VAR):  # the condition let this iteration run: no flag is set
            if isinstance(self.scope.get(flag), Scalar):
                self.scope.bind(flag, Const(False, bool_))
        if loop_var is not None:
            self.scope.bind(loop_var[0], Scalar(after.args[0], loop_var[1], bounds=bounds))
        if CONT in exits:
            self.scope.bind(CONT_VAR, Const(False, bool_))
        with self.em.in_block(after):
            self.visit_body(node.body)
            yields = self._loop_end(node, carried, after.args[offset:])
            if loop_var is not None:
                yields.insert(0, loop_var[4](after.args[0]))
            after.add_op(scf.YieldOp(*yields))

        inits = [materialize(self.em, v, ct) for _, ct, v in carried]
        if loop_var is not None:
            inits.insert(0, loop_var[2])
        op = scf.WhileOp(inits, ir_types, Region(before), Region(after))
        self.em.add(op)
        self._after_loop(node, pre, carried, list(op.results[offset:]), skip)

    def _while_condition(
        self, loop_var: LoopVar | None, test: ast.expr | None, args: tuple[SSAValue, ...]
    ) -> SSAValue:
        flags = [v.ssa for f in (BRK_VAR, RET_VAR) if isinstance(v := self.scope.get(f), Scalar)]

        def user_condition() -> Value:
            if loop_var is not None:
                return Scalar(loop_var[3](args[0]), bool_)
            assert test is not None
            return self.eval_bool(test, "the condition of `while`")

        if not flags:
            c = user_condition()
        elif loop_var is not None:
            # The range test is pure: no need to skip it once a flag is set.
            running = self.em.value(arith.XOrIOp(_any(self, flags), self.em.constant(True, bool_)))
            c = Scalar(self.em.value(arith.AndIOp(running, user_condition().ssa)), bool_)  # type: ignore[union-attr]
        else:
            c = self.conditional_value(
                _any(self, flags), lambda: Const(False, bool_), user_condition, "a loop condition"
            )
        assert isinstance(c, Scalar | Const)
        return c.ssa if isinstance(c, Scalar) else self.em.constant(bool(c.value), bool_)

    def _body_scope(
        self, pre: Scope, carried: list[tuple[str, ValueType, Value]], args: tuple[SSAValue, ...]
    ) -> Scope:
        scope = pre.copy()
        for (n, ct, _), arg in zip(carried, args, strict=True):
            scope.bind(n, runtime_value(arg, ct))
        return scope

    def _loop_end(
        self,
        node: ast.stmt,
        carried: list[tuple[str, ValueType, Value]],
        args: tuple[SSAValue, ...],
    ) -> list[SSAValue]:
        """The values the body yields for the next iteration."""
        yields: list[SSAValue] = []
        for (n, ct, _), arg in zip(carried, args, strict=True):
            v = self.scope.get(n)
            if v is None or isinstance(v, Undefined):
                yields.append(arg)
                continue
            if isinstance(v, Scalar | TileValue) and v.type != ct:
                raise SemanticError(
                    f"`{n}` changes type in the loop: {ct.name} before, {v.type.name} after",
                    TYPE_CHANGE_HINT,
                    node,
                )
            if not isinstance(v, Scalar | Const | TileValue):
                raise SemanticError(f"`{n}` changes to a {type_name(v)} in the loop", None, node)
            try:
                yields.append(materialize(self.em, v, ct))
            except SemanticError as e:
                raise SemanticError(
                    f"`{n}` in the loop: {e.message}", TYPE_CHANGE_HINT, node
                ) from None
        return yields

    def _after_loop(
        self,
        node: ast.For | ast.While,
        pre: Scope,
        carried: list[tuple[str, ValueType, Value]],
        results: list[SSAValue],
        loop_var: str | None,
    ) -> None:
        end = self.scope
        self.scope = pre.copy()
        carried_names = {n for n, _, _ in carried}
        for (n, ct, _), r in zip(carried, results, strict=True):
            v = end.get(n)
            if v is None or isinstance(v, Undefined):
                self.scope.bind(
                    n, v or Undefined(f"`{n}` is not assigned on every path of the loop")
                )
            else:
                self.scope.bind(n, runtime_value(r, ct))
        where = f"the loop at line {node.lineno}"
        for n in assigned_names(self.src, node.body):
            if n in carried_names:
                continue
            before, after = pre.get(n), end.get(n)
            if before is not None and after is not None and not same_value(before, after):
                if not isinstance(before, Undefined):
                    raise SemanticError(
                        f"`{n}` ({type_name(before)}) cannot be reassigned inside a loop",
                        None,
                        node,
                    )
            if before is None:
                self.scope.bind(n, Undefined(f"`{n}` is assigned inside {where}, not before it"))
        if loop_var is not None:
            self.scope.bind(
                loop_var,
                Undefined(f"the loop variable `{loop_var}` is not available after {where}"),
            )

    # ------------------------------------------------------------------ while

    def stmt_While(self, node: ast.While) -> None:
        saved = self._enter_loop()
        exits = body_exits(self.src, node.body)
        if BRK in exits:
            self.scope.bind(BRK_VAR, Const(False, bool_))
        if isinstance(node.test, ast.Constant) and node.test.value is False:
            self._leave_loop(saved)
            return
        self._scf_while(node, None, node.test, exits)
        self._leave_loop(saved)


def _any(fc: CompilerBase, flags: list[SSAValue]) -> SSAValue:
    result = flags[0]
    for f in flags[1:]:
        result = fc.em.value(arith.OrIOp(result, f))
    return result


def _range_type(start: Value, stop: Value, step: Value) -> ScalarType:
    """The loop variable's type: the one type of the typed bounds, else i32."""
    typed = {t for v in (start, stop, step) if (t := scalar_type_of(v)) is not None}
    for v in (start, stop, step):
        if not isinstance(v, Scalar | Const):
            raise SemanticError(f"`range` needs integers, got {type_name(v)}")
    if len(typed) > 1:
        names = " and ".join(sorted(t.name for t in typed))
        raise SemanticError(
            f"the bounds of `range` have different types: {names}",
            "cast them to one type, e.g. `range(u32(a), n)`",
        )
    t = typed.pop() if typed else i32
    if not t.is_int:
        raise SemanticError(f"`range` needs integers, got {t.name}", "cast: `i32(x)`")
    for v in (start, stop, step):
        if isinstance(v, Const) and v.type is None:
            if literal_kind(v) != "int":
                raise SemanticError(f"`range` needs integers, got {type_name(v)}")
            magnitude = Const(abs(int(v.value))) if v is step and t.kind == "uint" else v
            adapt(magnitude, t)
    return t
