"""``IsolatedFromAbove`` with xDSL's answers and messages at a fraction of the cost.

xDSL's trait asks ``op.is_ancestor(operand.owner)`` for every operand of every op inside: a walk
up the parent chain per operand, ~14,000 of them for a matmul's ``ptx.entry``, and the verifier
asks again after each pass that changed the body. The blocks already visited are remembered: a
value whose defining op (or block) is in one of them is inside, no climbing needed. Anything
else (a block not reached yet, the blocks of a nested isolated op) takes xDSL's own check, and
the traversal order is xDSL's, so the first offending op and the message are the same.
"""

from __future__ import annotations

from functools import cache

from xdsl.ir import BlockArgument, Operation, OpResult, Region
from xdsl.traits import IsolatedFromAbove as XdslIsolatedFromAbove
from xdsl.utils.exceptions import VerifyException


@cache
def _is_isolated(cls: type[Operation]) -> bool:
    """Whether ops of this class have the trait, once per class."""
    return cls.has_trait(XdslIsolatedFromAbove)


class IsolatedFromAbove(XdslIsolatedFromAbove):
    """The ops inside use only values defined inside (MLIR's trait); ``has_trait`` of xDSL's
    class still finds it."""

    def verify(self, op: Operation) -> None:
        # the ids of the blocks (at any depth) whose ops and arguments are inside op: a block
        # hashes through a Python ``__hash__``, ~14,000 lookups a matmul entry; the blocks stay
        # alive (in op) while the set does, so no id is reused
        inside: set[int] = set()
        regions: list[Region] = list(op.regions)
        while regions:
            region = regions.pop()  # xDSL's order: the last region pushed first
            for block in region.blocks:
                inside.add(id(block))
                child = block._first_op  # pyright: ignore[reportPrivateUsage]  # no iterator object
                while child is not None:
                    for operand in child._operands:  # pyright: ignore[reportPrivateUsage]
                        kind = type(operand)  # exact types: isinstance on xDSL's ABCs is slow
                        if kind is OpResult:
                            where = operand.op.parent
                        elif kind is BlockArgument:
                            where = operand.block
                        else:
                            where = None  # (an erased value) xDSL's check below
                        if id(where) in inside:
                            continue  # defined in a visited block: inside op, and not op itself
                        owner = operand.owner
                        if not op.is_ancestor(owner) or owner is op:
                            raise VerifyException(
                                f"Operation using value defined out of its IsolatedFromAbove parent: {child}"
                            )
                    if child.regions and not _is_isolated(type(child)):
                        regions += child.regions
                    child = child._next_op  # pyright: ignore[reportPrivateUsage]
