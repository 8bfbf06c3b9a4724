"""Construct a region-less, branch-less op as ``Operation.__init__`` does, in a third of the time.

A matmul's lowering builds ~2500 PTX ops. ``Operation.__init__`` goes through the generic
operand, successor and region setters, copies the property and attribute dicts, and its IRDL
``__post_init__`` looks the op's definition up to fill property defaults: most of the cost of
an op that has one or two operands, one result and a few properties. :func:`init_plain` sets
the same fields directly (the operand uses linked in as the setter links them) and fills the
IRDL defaults from a per-class table, so the op it makes is field for field the one
``Operation.__init__`` makes (tests/dialects/test_op_construction.py compares them). Nothing
is checked here, as nothing is in ``Operation.__init__``: the verifier checks the op.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import repeat

from xdsl.dialects.builtin import UNKNOWN_LOC
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.core import OpResult, SSAValues, Use
from xdsl.irdl import IRDLOperation, OptionalDef


@cache
def _property_defaults(cls: type[Operation]) -> tuple[tuple[str, Attribute], ...]:
    """The (name, value) pairs ``IRDLOperation.__post_init__`` fills in when absent."""
    if not issubclass(cls, IRDLOperation):
        return ()
    op_def = cls.get_irdl_definition()
    assert not op_def.attributes, f"{cls.name}: attribute defaults are not filled here"
    return tuple(
        (name, d.default_value)
        for name, d in op_def.properties.items()
        if not isinstance(d, OptionalDef) and d.default_value is not None
    )


def init_plain(
    op: Operation,
    operands: Sequence[SSAValue],
    result_types: Sequence[Attribute],
    properties: dict[str, Attribute],
) -> None:
    """``Operation.__init__(op, operands=..., result_types=..., properties=...)`` for an op
    without regions, successors or attributes. ``properties`` becomes the op's own dict (the
    caller hands over a fresh one)."""
    values = SSAValues(operands)
    # ``map`` rather than generator expressions: no Python frame per op built
    uses = tuple(map(Use, repeat(op, len(values)), range(len(values))))
    for value, use in zip(values, uses):
        value.add_use(use)
    op._operands = values  # pyright: ignore[reportPrivateUsage]
    op._operand_uses = uses  # pyright: ignore[reportPrivateUsage]
    op.results = SSAValues(map(OpResult, result_types, repeat(op), range(len(result_types))))
    for name, value in _property_defaults(type(op)):
        if name not in properties:
            properties[name] = value
    op.properties = properties
    op.attributes = {}
    op.location = UNKNOWN_LOC
    op._successors = ()  # pyright: ignore[reportPrivateUsage]
    op._successor_uses = ()  # pyright: ignore[reportPrivateUsage]
    op.regions = ()


def add_ops_plain(block: Block, ops: Sequence[Operation]) -> None:
    """``block.add_ops(ops)``, linking the ops in directly. xDSL's ``add_op`` asks of each op
    whether it is an ancestor of the block (a walk up the block's parents) and goes through
    ``insert_op_after`` and the link properties: a few microseconds an op, for the ~2500 ops a
    matmul's lowering appends to its entry at once. An op without regions cannot contain the
    block, so only the attached-already check applies to it; an op with regions takes xDSL's
    own ``add_op``. The same errors as xDSL's for an op already in a block."""
    for op in ops:
        if op.regions:
            block.add_op(op)
            continue
        if op.parent:
            raise ValueError("Can't add to a block an operation already attached to a block.")
        op.parent = block
        last = block._last_op  # pyright: ignore[reportPrivateUsage]
        if last is None:
            block._first_op = op  # pyright: ignore[reportPrivateUsage]
        else:
            last._next_op = op  # pyright: ignore[reportPrivateUsage]
            op._prev_op = last  # pyright: ignore[reportPrivateUsage]
        block._last_op = op  # pyright: ignore[reportPrivateUsage]
