"""The loops of a flat ``ptx`` entry, as the scalar loop rewrites see them (``ptx-licm``,
``ptx-iv-reduce`` and its ring offsets): ``lower-to-ptx`` turns each loop into a label, its body
and a backward ``bra`` to the label. :func:`find_loops` gives the single-entry ones (no branch
from outside the range lands on the label or inside it), innermost first; :func:`for_each_loop`
visits each once, relisting the block after a visit that moved ops; :func:`loop_assignments`
and :func:`entry_constant` tell a loop's carried registers, their writes and their values on
entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kaio.dialects import ptx
from kaio.passes.ptx_scalar import block_ops, const_int
from xdsl.ir import Block, Operation, SSAValue


@dataclass
class Loop:
    """Positions in the entry's op list: ``head`` is the label, ``latch`` the backward branch."""

    head: int
    latch: int

    @property
    def size(self) -> int:
        return self.latch - self.head


def loop_assignments(
    ops: list[Operation], loop: Loop
) -> tuple[set[Operation], dict[SSAValue, list[ptx.AssignOp]]]:
    """The loop body's ops, and the loop-carried registers with the ``ptx.assign`` ops writing
    each (in body order): what the induction and ring rewrites start from."""
    body = ops[loop.head + 1 : loop.latch + 1]
    writes: dict[SSAValue, list[ptx.AssignOp]] = {}
    for op in body:
        if type(op) is ptx.AssignOp:
            writes.setdefault(op.operands[0], []).append(op)  # type: ignore[arg-type]
    return set(body), writes


def find_loops(ops: list[Operation]) -> list[Loop]:
    """The single-entry loops (label ... backward branch to it), innermost first."""
    labels = {op.sym_name.data: i for i, op in enumerate(ops) if type(op) is ptx.LabelOp}  # type: ignore[attr-defined]
    branches = [(i, labels.get(op.symbol.data)) for i, op in enumerate(ops) if type(op) is ptx.BraOp and op.symbol is not None]  # type: ignore[attr-defined]
    loops: dict[int, Loop] = {}
    for at, target in branches:
        if target is not None and target < at:
            loop = loops.setdefault(target, Loop(target, at))
            loop.latch = max(loop.latch, at)
    single = [
        lp for lp in loops.values()
        if not any(t is not None and lp.head <= t <= lp.latch and not lp.head <= at <= lp.latch for at, t in branches)
    ]  # fmt: skip
    return sorted(single, key=lambda lp: lp.size)


def entry_constant(ops: list[Operation], head: int, reg: SSAValue) -> int | None:
    """The constant ``reg`` is last assigned in the straight-line code right before ``head``
    (the value a single-entry loop starts with), else None."""
    for op in reversed(ops[:head]):
        if type(op) is ptx.LabelOp:
            return None
        if type(op) is ptx.AssignOp and op.operands[0] is reg:
            return const_int(op.operands[1])
    return None


def for_each_loop(block: Block, visit: Callable[[list[Operation], Loop], int]) -> int:
    """``visit(ops, loop)`` once per single-entry loop of ``block``, inner loops first; the block
    is listed again after each visit (a visit moves ops). Returns the sum of the visits."""
    total = 0
    done: set[Operation] = set()  # loop labels already handled
    while True:
        ops = block_ops(block)
        pending = [lp for lp in find_loops(ops) if ops[lp.head] not in done]
        if not pending:
            return total
        loop = pending[0]
        done.add(ops[loop.head])
        total += visit(ops, loop)
