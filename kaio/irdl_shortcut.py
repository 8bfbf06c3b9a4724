"""A shortcut through xDSL's generic IRDL verification for ops of the simplest shape.

``OpDef.verify`` interprets an op's definition for every op it checks (variadic segment
sizes, a constraint context, each operand's constraint); for PTX instructions that is three
times the cost of their own checks, and a matmul's PTX has 2000 of them. Most instruction ops
have a simple shape: operands and results unconstrained (one variadic list, or a fixed number
of single ones), properties whose constraints are base classes, no attributes, regions,
successors or traits.
For such a definition :func:`install_shortcut` replaces its ``verify`` with a direct check of
the same facts. A failing op is re-checked by the generic ``OpDef.verify``, so the error text
is xDSL's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.ir import Attribute, Operation
from xdsl.irdl import IRDLOperation, OpDef, OptPropertyDef, VarOperandDef, VarResultDef
from xdsl.irdl.constraints import AnyAttr, BaseAttr, EqIntConstraint, RangeLengthConstraint, RangeOf


def _any_range(constr: object) -> bool:
    """``RangeOf(AnyAttr())``: any number of values of any type."""
    return type(constr) is RangeOf and isinstance(constr.constr, AnyAttr)


def _count_check(defs: Sequence[tuple[str, object]], variadic: type) -> Callable[[int], bool] | None:
    """How many operands (results) the unconstrained ``defs`` accept: any number for one
    variadic, exactly ``len(defs)`` for single ones; None for any other definition."""
    if len(defs) == 1 and isinstance(defs[0][1], variadic):
        return (lambda n: True) if _any_range(defs[0][1].constr) else None  # type: ignore[attr-defined]
    for _, d in defs:
        constr = getattr(d, "constr", None)
        single = (
            not isinstance(d, variadic)
            and type(constr) is RangeLengthConstraint
            and _any_range(constr.constraint)
            and type(constr.length) is EqIntConstraint
            and constr.length.value == 1
        )
        if not single:
            return None
    count = len(defs)
    return lambda n: n == count


def _property_class(constr: object) -> type | None:
    if type(constr) is BaseAttr:
        return constr.attr
    return Attribute if type(constr) is AnyAttr else None


def _shortcut(op_def: OpDef) -> Callable[[Operation], None] | None:
    """The direct check of ``op_def`` when it has the simple shape, else None."""
    operands = _count_check(op_def.operands, VarOperandDef)
    results = _count_check(op_def.results, VarResultDef)
    classes = {name: _property_class(p.constr) for name, p in op_def.properties.items()}
    simple = (
        operands is not None
        and results is not None
        and not (op_def.regions or op_def.successors or op_def.attributes or tuple(op_def.traits))
        and not op_def.options
        and None not in classes.values()
    )
    if not simple or operands is None or results is None:
        return None
    props = op_def.properties.items()
    required = tuple((name, classes[name]) for name, p in props if not isinstance(p, OptPropertyDef))
    optional = tuple((name, classes[name]) for name, p in props if isinstance(p, OptPropertyDef))
    known = frozenset(op_def.properties)
    generic = OpDef.verify.__get__(op_def)

    def verify(op: Operation) -> None:
        values = op.properties
        ok = (
            not op.regions
            and not op.successors
            and operands(len(op.operands))
            and results(len(op.results))
            and values.keys() <= known
        )
        for name, base in required:
            ok = ok and isinstance(values.get(name), base)
        for name, base in optional:
            value = values.get(name)
            ok = ok and (value is None or isinstance(value, base))
        if not ok:
            generic(op)  # raises xDSL's own message

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
