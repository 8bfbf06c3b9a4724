"""All the ops inside an op as one list, in ``Operation.walk()``'s order, at a third of its cost.

xDSL's ``walk`` is a generator per op, nested as deep as the op (every op yields through the
generators of each region, block and op above it), and steps through a block with an iterator
object whose every step is a property call. The checks after a pipeline and the printer walk
the whole 2000-op PTX module several times a compile; :func:`ops_within` follows the ops'
``_next_op`` links instead.
"""

from __future__ import annotations

from xdsl.ir import Block, Operation


def ops_within(root: Operation) -> list[Operation]:
    """``list(root.walk())``: ``root`` first, then each region's ops in order, each op
    followed by the ops inside it (pre-order)."""
    found = [root]
    _append_inside(root, found)
    return found


def _append_inside(op: Operation, found: list[Operation]) -> None:
    for region in op.regions:
        for block in region.blocks:
            child = block._first_op  # pyright: ignore[reportPrivateUsage]
            while child is not None:
                found.append(child)
                if child.regions:
                    _append_inside(child, found)
                child = child._next_op  # pyright: ignore[reportPrivateUsage]


def ops_of(block: Block) -> list[Operation]:
    """``list(block.ops)`` in one pass along the links (``list`` of xDSL's view walks the block
    twice: once to count it)."""
    found: list[Operation] = []
    op = block._first_op  # pyright: ignore[reportPrivateUsage]
    while op is not None:
        found.append(op)
        op = op._next_op  # pyright: ignore[reportPrivateUsage]
    return found
