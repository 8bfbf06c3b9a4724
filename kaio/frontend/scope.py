"""Variables and SSA construction.

A scope maps each Python variable to its current value. Branches and loop bodies work on a copy;
where control flow joins, ``merge`` decides, per variable, whether the paths agree (same SSA
value, same constant, same array) or the variable becomes a result of the ``scf.if`` / loop.

Names starting with ``%`` are the frontend's own: the early-exit flags (``%ret``, ``%brk``,
``%cont``) and a device function's return value (``%rv``). They are ordinary variables to the
merge, which is what makes ``return``/``break``/``continue`` lower to structured control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue

from kaio.dtypes import ScalarType, bool_
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.emitter import Emitter
from kaio.frontend.operators import materialize, negate
from kaio.frontend.typerules import adapt, literal_kind, unify
from kaio.frontend.values import (
    ArrayRef,
    Const,
    PyObject,
    Scalar,
    SharedRef,
    TileValue,
    TupleValue,
    Undefined,
    Value,
    ValueType,
    runtime_value,
    scalar_type_of,
    type_name,
)

RET, BRK, CONT, RV = "%ret", "%brk", "%cont", "%rv"
FLAGS = (RET, BRK, CONT)


def return_slots(arity: int | None) -> list[str]:
    """The variables holding a device function's return value: ``%rv``, or ``%rv.0``, ``%rv.1``...
    for one that returns a tuple of ``arity`` scalars."""
    return [RV] if arity is None else [f"{RV}.{i}" for i in range(arity)]


def is_return_slot(name: str) -> bool:
    return name == RV or name.startswith(RV + ".")

TYPE_CHANGE_HINT = (
    "a variable keeps one type for its whole life; cast the new value (e.g. `f32(v)`), use "
    "another name, or give the first assignment the right type (`acc = f16(0.0)`: a literal "
    "stored before a loop takes its default type, i32 or f32)"
)


class Scope:
    def __init__(self, variables: dict[str, Value] | None = None):
        self.vars: dict[str, Value] = variables if variables is not None else {}

    def copy(self) -> Scope:
        return Scope(dict(self.vars))

    def get(self, name: str) -> Value | None:
        return self.vars.get(name)

    def bind(self, name: str, value: Value) -> None:
        """Set without type checks (parameters, loop variables, merge results, flags)."""
        self.vars[name] = value

    def assign(self, name: str, value: Value) -> None:
        """``name = value`` with the rule that a variable never changes type."""
        self.vars[name] = checked_assignment(name, self.vars.get(name), value)


def checked_assignment(name: str, old: Value | None, new: Value) -> Value:
    if isinstance(new, Undefined):
        raise SemanticError(f"cannot assign an undefined value to `{name}`")
    if isinstance(new, TupleValue):
        raise SemanticError(f"cannot store a tuple in `{name}`", "unpack it: `a, b = ...`")
    if old is None or isinstance(old, Undefined):
        return new
    if isinstance(old, TileValue) or isinstance(new, TileValue):
        if not (isinstance(old, TileValue) and isinstance(new, TileValue)) or old.type != new.type:
            raise SemanticError(
                f"`{name}` changes from {type_name(old)} to {type_name(new)}", TYPE_CHANGE_HINT
            )
        return new
    if isinstance(old, Scalar | Const) and isinstance(new, Scalar | Const):
        old_t, new_t = scalar_type_of(old), scalar_type_of(new)
        if old_t is not None:
            if isinstance(new, Const) and new_t is None:
                try:
                    return adapt(new, old_t)
                except SemanticError as e:
                    raise SemanticError(
                        f"`{name}` is {old_t.name}; {e.message}", e.hint or TYPE_CHANGE_HINT
                    ) from None
            if new_t is not old_t:
                assert new_t is not None
                raise SemanticError(
                    f"`{name}` changes type from {old_t.name} to {new_t.name}", TYPE_CHANGE_HINT
                )
            return new
        assert isinstance(old, Const)
        if new_t is None:
            return new  # one untyped compile-time number replaces another
        kind = literal_kind(old)
        compatible = (
            (kind == "bool" and new_t.is_bool)
            or (kind == "int" and (new_t.is_int or new_t.is_float))
            or (kind == "float" and new_t.is_float)
        )
        if not compatible:
            raise SemanticError(
                f"`{name}` changes type from {type_name(old)} to {new_t.name}", TYPE_CHANGE_HINT
            )
        return new
    if type(old) is not type(new) and not (isinstance(old, PyObject) and isinstance(new, PyObject)):
        raise SemanticError(
            f"`{name}` changes from {type_name(old)} to {type_name(new)}", TYPE_CHANGE_HINT
        )
    return new


def same_value(a: Value, b: Value) -> bool:
    """Whether two paths agree on a variable without needing an SSA merge."""
    if a is b:
        return True
    match a, b:
        case Scalar(), Scalar():
            return a.ssa is b.ssa and a.type is b.type
        case TileValue(), TileValue():
            return a.ssa is b.ssa
        case Const(), Const():
            return a.type is b.type and type(a.value) is type(b.value) and _same_bits(a.value, b.value)
        case ArrayRef(), ArrayRef():
            return a.ssa is b.ssa and a.kaio_type == b.kaio_type
        case SharedRef(), SharedRef():
            return a.ssa is b.ssa
        case PyObject(), PyObject():
            return a.obj is b.obj
    return a == b


def _same_bits(a: object, b: object) -> bool:
    # 0.0 == -0.0, yet a path that negated a zero must not be merged into one that did not
    if isinstance(a, float) and isinstance(b, float):
        return a.hex() == b.hex()
    return a == b


@dataclass
class Merge:
    """The outcome of joining paths: the joined scope, plus the variables that need SSA
    results: their names, types, and each path's value to yield."""

    scope: Scope
    names: list[str]
    types: list[ValueType]
    incoming: list[list[SSAValue]]

    def bind_results(self, results: tuple[SSAValue, ...] | list[SSAValue]) -> None:
        for name, t, r in zip(self.names, self.types, results, strict=True):
            self.scope.bind(name, runtime_value(r, t))


def merge(em: Emitter, paths: list[Scope], where: str, cond: SSAValue | None = None) -> Merge:
    """Join the scopes at the end of ``paths`` (e.g. the two branches of an ``if``).

    With the ``if``'s condition ``cond``: a bool that is True on the then-path and False on the
    else-path *is* the condition (and the reverse its negation), so it needs no result; early
    exits produce exactly this pattern."""
    joined = Scope()
    names: list[str] = []
    types: list[ValueType] = []
    incoming: list[list[SSAValue]] = [[] for _ in paths]
    all_names = dict.fromkeys(n for p in paths for n in p.vars)
    for name in all_names:
        values = [p.vars.get(name) for p in paths]
        present = [v for v in values if v is not None]
        if len(present) < len(values) and not is_return_slot(name):
            joined.bind(name, Undefined(f"`{name}` is only assigned on some paths through {where}"))
            continue
        first = present[0]
        if len(present) == len(values) and all(same_value(first, v) for v in present[1:]):
            joined.bind(name, first)
            continue
        if any(isinstance(v, Undefined) for v in present):
            undefined = next(v for v in present if isinstance(v, Undefined))
            joined.bind(name, undefined)
            continue
        if all(isinstance(v, TileValue) for v in present) and len(present) == len(values):
            tile_types = {v.type for v in present}  # type: ignore[union-attr]
            if len(tile_types) != 1:
                raise SemanticError(
                    f"`{name}` is {' or '.join(sorted(t.name for t in tile_types))} after {where}",
                    TYPE_CHANGE_HINT,
                )
            names.append(name)
            types.append(tile_types.pop())
            for i, v in enumerate(values):
                incoming[i].append(v.ssa)  # type: ignore[union-attr]
            continue
        if not all(isinstance(v, Scalar | Const) for v in present):
            joined.bind(
                name,
                Undefined(f"`{name}` refers to different {type_name(first)} values after {where}"),
            )
            continue
        if cond is not None and len(values) == 2 and _is_flag_pattern(values):
            then_true = values[0].value  # type: ignore[union-attr]
            joined.bind(name, Scalar(cond if then_true else negate(em, cond), bool_))
            continue
        t = _merged_type(name, present, where)
        for i, v in enumerate(values):
            if v is None:  # a device function's return value on a path that did not return
                incoming[i].append(em.constant(0.0 if t.is_float else 0, t))
            else:
                incoming[i].append(materialize(em, v, t))
        names.append(name)
        types.append(t)
    return Merge(joined, names, types, incoming)


def _is_flag_pattern(values: list[Value | None]) -> bool:
    a, b = values
    return (
        isinstance(a, Const) and isinstance(b, Const) and a.type is bool_ and b.type is bool_
        and a.value != b.value
    )  # fmt: skip


def _merged_type(name: str, values: list[Value], where: str) -> ScalarType:
    typed = next((v for v in values if scalar_type_of(v) is not None), None)
    what = f"`{name}` after {where}"
    try:
        if typed is not None:
            t = scalar_type_of(typed)
            for v in values:
                unify(typed, v, what)
            assert t is not None
            return t
        # Only untyped literals: an int and a float literal merge to f32, like `unify` does.
        t = unify(values[0], values[0], what)
        for v in values[1:]:
            u = unify(values[0], v, what)
            if u.is_float:
                t = u
        return t
    except SemanticError as e:
        raise SemanticError(e.message, TYPE_CHANGE_HINT) from None


def carried_type(name: str, v: Value) -> ValueType:
    """The type a loop-carried variable has inside the loop (a literal takes its default)."""
    if isinstance(v, Scalar | TileValue):
        return v.type
    if isinstance(v, Const):
        if v.type is not None:
            return v.type
        return unify(v, v, f"`{name}`")
    raise SemanticError(f"`{name}` ({type_name(v)}) cannot change inside a loop")
