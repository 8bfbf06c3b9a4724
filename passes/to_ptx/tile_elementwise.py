"""Making tiles and elementwise maps -> PTX: ``tile.splat``, ``tile.range``, ``tile.multiple_of``
and ``tile.map`` (with its ``tile.yield``).

A map is the scalar code of its region once per register of the thread (the rules of every other
scalar op lower the region), or once per pair of registers where 16-bit lanes pair up as packed
words (``half_pairs``). A map only one streaming user takes (a store, a layout conversion
through shared memory, a sum of products: :data:`STREAMING_USERS`) is not lowered where it
stands: that user computes it a group of registers at a time (:class:`MapElements`), so a whole
tile of results is never live at once; a load only a map uses is streamed into it the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Operation, SSAValue

from kaio.dialects import smem, tile
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.passes.to_ptx.half_pairs import Lanes, lower_pair, worth_pairing
from kaio.passes.to_ptx.tile_distribution import add32, distribution, thread_base

# --------------------------------------------------------------------------- making tiles


@lowering(tile.SplatOp)
def lower_splat(em: PtxEmitter, op: tile.SplatOp) -> None:
    em.bind(op.result, [em.value(op.value)] * distribution(em, op.result.type).registers)


@lowering(tile.RangeOp)
def lower_range(em: PtxEmitter, op: tile.RangeOp) -> None:
    dist = distribution(em, op.result.type)
    (base,) = thread_base(em, dist)
    em.bind(op.result, [add32(em, base, off[0]) for off in dist.offsets])


@lowering(tile.MultipleOfOp)
def lower_multiple_of(em: PtxEmitter, op: tile.MultipleOfOp) -> None:
    em.bind(op.result, em.value(op.input))


@lowering(tile.YieldOp)
def lower_yield(em: PtxEmitter, op: tile.YieldOp) -> None:
    """Nothing to emit: ``tile.map`` reads the yielded value."""


# --------------------------------------------------------------------------- maps


def pair_of(em: PtxEmitter, value: SSAValue, r: int) -> Lanes:
    """Registers r and r+1 of a lowered tile value (with their packed word if one exists)."""
    parts = em.parts(value)
    return Lanes(value.type.element_type, parts[r], parts[r + 1], em.packed.get((value, r)))  # type: ignore[attr-defined]


STREAMED_INPUTS: dict[type[Operation], Callable[[PtxEmitter, Operation], Any]] = {}
"""Ops whose result one map alone uses, and that map reads a group of registers at a time as it
needs them (op type -> the reader, with ``value(r)`` and ``pair(r)``; the op's rule defers the
value): a tile load, which ``tile_memory`` registers here (it imports this module, not the
other way round)."""

WORD_USERS: tuple[type[Operation], ...] = (tile.StoreOp, tile.MapOp, tile.ConvertLayoutOp, smem.StoreOp)
"""Users that take a 16-bit tile's registers two at a time, as packed words."""


class MapElements:
    """A map's region, one register at a time, or two (``pair``: packed 16-bit arithmetic, see
    ``half_pairs``). A load only this map uses is streamed: each group of its registers is
    loaded right before the elements that use it."""

    def __init__(self, em: PtxEmitter, op: tile.MapOp):
        self.em, self.op = em, op
        self.streamed = {i: STREAMED_INPUTS[type(x.owner)](em, x.owner) for i, x in enumerate(op.inputs) if x in em.deferred}
        self.inputs = [None if i in self.streamed else em.parts(x) for i, x in enumerate(op.inputs)]
        self.yielded = op.block.last_op.operands[0]  # type: ignore[union-attr]
        # pairs pay when their words flow on: into stores and maps (an mma operand, a reduction
        # takes registers one by one, and pairing its producer only reorders the code)
        takes_words = all(isinstance(use.operation, WORD_USERS) for use in op.result.uses)
        self.paired = takes_words and distribution(em, op.result.type).registers % 2 == 0 and worth_pairing(em, op.block)

    def value(self, r: int) -> SSAValue:
        for i, (arg, parts) in enumerate(zip(self.op.block.args, self.inputs, strict=True)):
            self.em.bind(arg, self.streamed[i].value(r) if parts is None else parts[r])
        self.em.lower_block(self.op.block)
        return self.em.value(self.yielded)

    def pair(self, r: int) -> Lanes:
        """Registers r and r+1 (r even)."""
        if not self.paired:
            return Lanes(self.yielded.type, self.value(r), self.value(r + 1))
        args = [self.streamed[i].pair(r) if i in self.streamed else pair_of(self.em, x, r) for i, x in enumerate(self.op.inputs)]
        return lower_pair(self.em, self.op.block, args)


def tile_elements(em: PtxEmitter, value: SSAValue) -> tuple[Callable[[int], SSAValue], Callable[[int], Lanes]]:
    """(register r, registers r and r+1) of a tile value for a streaming user: a deferred map's
    are computed as they are asked for (the elementwise code that makes the value, streamed),
    another value's are read off its lowered registers."""
    if value in em.deferred:
        elements = MapElements(em, value.owner)  # type: ignore[arg-type]
        return elements.value, elements.pair
    parts = em.parts(value)
    return parts.__getitem__, lambda r: pair_of(em, value, r)


STREAMING_USERS: dict[type[Operation], Callable[[PtxEmitter, Operation], bool]] = {tile.StoreOp: lambda em, op: True}
"""Ops that compute a map they alone use themselves, a group of registers at a time (whether
this one does): a store, a layout conversion through shared memory (``relayout``)."""


@lowering(tile.MapOp)
def lower_map(em: PtxEmitter, op: tile.MapOp) -> None:
    """Every register of the result; a map only a store uses is computed by the store instead,
    a vector at a time, so a whole tile of results is never live at once (an epilogue)."""
    user = op.result.get_user_of_unique_use() if op.result.has_one_use() else None
    streams = STREAMING_USERS.get(type(user)) if user is not None else None
    if streams is not None and user.parent_block() is op.parent_block() and streams(em, user):  # type: ignore[union-attr]
        em.deferred.add(op.result)
        return
    elements = MapElements(em, op)
    registers = distribution(em, op.result.type).registers
    if not elements.paired:
        run = constant_run(em, op)
        values: list[SSAValue] = []
        for r in range(registers):
            values.append(values[r - r % run] if r % run else elements.value(r))
        em.bind(op.result, values)
        return
    parts: list[SSAValue] = []
    for r in range(0, registers, 2):
        lanes = elements.pair(r)
        if lanes.word is not None:
            em.packed[(op.result, r)] = lanes.word
        parts += lanes.scalars(em)
    em.bind(op.result, parts)


# arith.cmpi predicates (slt, sge, ult, uge; and mirrored) whose truth for x in [g*q, g*q + g)
# is that of g*q when the bound is a multiple of g: x < b is floor_g(x) < b
_RANGE_LEFT = {2, 5, 6, 9}


_RANGE_RIGHT = {3, 4, 7, 8}


def known_multiple(value: SSAValue) -> int:
    """The largest power of two ``value`` (an i32) is known to be a multiple of: a constant's, a
    ``tile.multiple_of``'s (launch specialisation, ``kt.multiple_of``); 1 when unknown."""
    owner = value.owner
    if isinstance(owner, tile.MultipleOfOp):
        n = owner.n.value.data
        return max(n & -n, 1)
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        c = owner.value.value.data
        return 1 << 30 if c == 0 else min(c & -c, 1 << 30)
    return 1


def constant_run(em: PtxEmitter, op: tile.MapOp) -> int:
    """Registers in a row over which the map's result is one value: a range compared with a
    bound known to be a multiple of the run (``kt.arange(C) < n`` with n a multiple of 8 is one
    predicate per 8 consecutive elements a thread holds, as Triton's axis analysis finds: one
    compare instead of eight, and no predicate registers spilled to hold them). 1 otherwise."""
    if len(op.inputs) != 1 or not isinstance(op.inputs[0].owner, tile.RangeOp):
        return 1
    body = list(op.block.ops)
    if len(body) != 2 or not isinstance(body[0], arith.CmpiOp) or body[1].operands[0] is not body[0].result:
        return 1
    cmp, arg = body[0], op.block.args[0]
    predicate = cmp.predicate.value.data
    if cmp.lhs is arg and cmp.rhs is not arg and predicate in _RANGE_LEFT:
        bound = cmp.rhs
    elif cmp.rhs is arg and cmp.lhs is not arg and predicate in _RANGE_RIGHT:
        bound = cmp.lhs
    else:
        return 1
    # registers 0..c-1 hold consecutive elements from a multiple of c (the thread's base)
    return min(known_multiple(bound), distribution(em, op.inputs[0].type).contiguous(0))


__all__ = ["STREAMED_INPUTS", "STREAMING_USERS", "WORD_USERS", "MapElements", "constant_run", "known_multiple", "pair_of", "tile_elements"]
