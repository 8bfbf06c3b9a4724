"""A shortcut through xDSL's generic IRDL verification for ops of a simple shape.

``OpDef.verify`` interprets an op's definition for every op it checks (variadic segment
sizes, a constraint context shared by type variables, each operand's constraint); for PTX
instructions that is three times the cost of their own checks, and a matmul's PTX has 2000 of
them. Most ops have a simple shape: operands (and results) that are single values with at most
one variadic list among them, constraints that are base classes, type variables (``T``: the
first value binds it, the others must equal it) or anything else without a variable inside,
no regions or successors, no attribute definitions, no options but ``ParsePropInAttrDict``.
For such a definition :func:`install_shortcut` replaces its ``verify`` with a direct check of
the same facts, in the same order (counts, operand and result types, properties, traits). A
failing op is re-checked by the generic ``OpDef.verify``, so the error text is xDSL's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.ir import Attribute, Operation
from xdsl.irdl import (
    IRDLOperation,
    OpDef,
    OptionalDef,
    OptPropertyDef,
    ParsePropInAttrDict,
    VarOperandDef,
    VarResultDef,
)
from xdsl.irdl.constraints import (
    AnyAttr,
    AttrConstraint,
    BaseAttr,
    EqIntConstraint,
    RangeLengthConstraint,
    RangeOf,
    VarConstraint,
    VerificationContext,
)
from xdsl.traits import OpTrait

Variables = dict[str, Attribute]  # the values type variables took in one op
# whether one value (a type, a property) meets a constraint
Check = Callable[[Attribute, Variables], bool]


def _any(a: Attribute, env: Variables) -> bool:
    """The check of ``AnyAttr``: values checked only by it need no look at all."""
    return True


def _check(constr: object) -> Check | None:
    """A check of one attribute against a constraint (None when it is too involved: a
    variable inside another constraint)."""
    if type(constr) is AnyAttr:
        return _any
    if type(constr) is BaseAttr:
        base = constr.attr
        return lambda a, env: isinstance(a, base)
    if type(constr) is VarConstraint:  # the first value binds the name; the others must equal it
        inner = _check(constr.constraint)
        name = constr.name
        if inner is None or constr.constraint.variables():
            return None

        def bound(a: Attribute, env: Variables) -> bool:
            if name in env:
                return env[name] == a
            env[name] = a
            return inner(a, env)

        return bound
    if not isinstance(constr, AttrConstraint) or constr.variables():
        return None

    def check(a: Attribute, env: Variables) -> bool:
        try:
            constr.verify(a, VerificationContext())
        except Exception:  # noqa: BLE001  (a failing constraint: the generic verifier says why)
            return False
        return True

    return check


def _check_in_context(constr: AttrConstraint) -> Check:
    """A check of a constraint with type variables inside (``arith.constant``'s value: its
    type is the result's ``T``), run by xDSL in a context holding the variables bound so far,
    whose new bindings are kept. Only for variables the op's values bind (so ``env`` holds all
    that xDSL's own context would)."""

    def check(a: Attribute, env: Variables) -> bool:
        context = VerificationContext(_variables=dict(env))
        try:
            constr.verify(a, context)
        except Exception:  # noqa: BLE001  (a failing constraint: the generic verifier says why)
            return False
        for name in context.attr_variables:
            env[name] = context.get_variable(name)  # type: ignore[assignment]
        return True

    return check


def _value_variables(defs: Sequence[tuple[str, object]]) -> set[str]:
    """The type variables that operand (result) definitions bind directly (``operand_def(T)``)."""
    names = set()
    for _, d in defs:
        constr = getattr(d, "constr", None)
        if type(constr) is RangeLengthConstraint:
            constr = constr.constraint
        if type(constr) is RangeOf and type(constr.constr) is VarConstraint:
            names.add(constr.constr.name)
    return names


def _element(d: object, variadic: type) -> tuple[bool, Check] | None:
    """(is variadic, the check of each value) for one operand or result definition."""
    constr = getattr(d, "constr", None)
    if isinstance(d, variadic):
        if isinstance(d, OptionalDef) or type(constr) is not RangeOf:
            return None
        check = _check(constr.constr)
        return None if check is None else (True, check)
    if not (
        type(constr) is RangeLengthConstraint
        and type(constr.constraint) is RangeOf
        and type(constr.length) is EqIntConstraint
        and constr.length.value == 1
    ):
        return None
    check = _check(constr.constraint.constr)
    return None if check is None else (False, check)


ValuesCheck = Callable[[Sequence[object], Variables], bool]  # over op.operands or op.results


def _values_check(defs: Sequence[tuple[str, object]], variadic: type) -> ValuesCheck | None:
    """The check of an op's operands (results): their count and each one's type."""
    elements = [_element(d, variadic) for _, d in defs]
    if any(e is None for e in elements):
        return None
    flags = [e[0] for e in elements if e is not None]
    checks = [e[1] for e in elements if e is not None]
    if flags.count(True) > 1:
        return None  # several variadics: segment sizes, left to xDSL
    if True not in flags:
        count = len(checks)
        if all(c is _any for c in checks):  # only the count to check (most PTX instructions)
            return lambda values, env: len(values) == count

        def fixed(values: Sequence[object], env: Variables) -> bool:
            return len(values) == count and all(c(v.type, env) for c, v in zip(checks, values))  # type: ignore[attr-defined]

        return fixed
    at = flags.index(True)
    before, each, after = checks[:at], checks[at], checks[at + 1 :]
    if all(c is _any for c in checks):  # only the count to check (a PTX instruction's operands)
        least = len(before) + len(after)
        return lambda values, env: len(values) >= least

    def with_variadic(values: Sequence[object], env: Variables) -> bool:
        n = len(values)
        if n < len(before) + len(after):
            return False
        rest = n - len(after)
        return (
            all(c(v.type, env) for c, v in zip(before, values))  # type: ignore[attr-defined]
            and all(each(values[i].type, env) for i in range(len(before), rest))  # type: ignore[attr-defined]
            and all(c(v.type, env) for c, v in zip(after, values[rest:]))  # type: ignore[attr-defined]
        )

    return with_variadic


def _shortcut(op_def: OpDef) -> Callable[[Operation], None] | None:
    """The direct check of ``op_def`` when it has the simple shape, else None."""
    operands = _values_check(op_def.operands, VarOperandDef)
    results = _values_check(op_def.results, VarResultDef)
    props = {name: _check(p.constr) for name, p in op_def.properties.items()}
    bound = _value_variables(op_def.operands) | _value_variables(op_def.results)
    for name, p in op_def.properties.items():
        if props[name] is None and isinstance(p.constr, AttrConstraint) and p.constr.variables() <= bound:
            props[name] = _check_in_context(p.constr)
    if (
        operands is None
        or results is None
        or None in props.values()
        or op_def.regions
        or op_def.successors
        or op_def.attributes
        # options shape the variadic segments, except this one, which only lets the text
        # format read properties from the attribute dictionary
        or any(type(o) is not ParsePropInAttrDict for o in op_def.options)
    ):
        return None
    required = tuple(
        (n, c) for n, c in props.items() if not isinstance(op_def.properties[n], OptPropertyDef)
    )
    optional = tuple(
        (n, c) for n, c in props.items() if isinstance(op_def.properties[n], OptPropertyDef)
    )
    known = frozenset(props)
    # traits that check something: OpTrait's own verify (most traits: Pure, ...) does nothing
    traits = tuple(t for t in op_def.traits if type(t).verify is not OpTrait.verify)
    generic = OpDef.verify.__get__(op_def)

    def verify(op: Operation) -> None:
        values = op.properties
        env: Variables = {}  # shared by operands, results and properties, as xDSL's context
        ok = (  # the tuples themselves, not xDSL's views of them (one object fewer each)
            not op.regions
            and not op._successors  # pyright: ignore[reportPrivateUsage]
            and operands(op._operands, env)  # pyright: ignore[reportPrivateUsage]
            and results(op.results, env)
            and values.keys() <= known
        )
        for name, check in required:
            ok = ok and name in values and check(values[name], env)  # type: ignore[misc]
        for name, check in optional:
            ok = ok and (name not in values or check(values[name], env))  # type: ignore[misc]
        if not ok:
            generic(op)  # raises xDSL's own message
            return
        for trait in traits:  # as the generic verifier ends
            trait.verify(op)

    return verify


_considered: set[type[Operation]] = set()


def install_shortcut(cls: type[Operation]) -> None:
    """Give ``cls``'s definition the direct check if it has the simple shape (once per class)."""
    if cls in _considered:
        return
    _considered.add(cls)
    if not issubclass(cls, IRDLOperation):
        return
    op_def = cls.get_irdl_definition()
    if op_def is None or "verify" in vars(op_def):
        return
    shortcut = _shortcut(op_def)
    if shortcut is not None:
        op_def.verify = shortcut  # type: ignore[method-assign]  # read by the generated verify_
