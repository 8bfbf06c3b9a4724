"""Ring counters become rotating stage offsets (part of ``ptx-iv-reduce``).

A multi-stage copy ring (``pipeline-cp-async``) walks its stages with a counter that cycles
``0, 1, ..., N-1, 0, ...``: once per trip ``r <- (r + 1 == N) ? 0 : r + 1``, and every tile
access of the loop reads the stage's shared address as ``r * stage_bytes + base``
(``mad.lo r, C, base``: one per ldmatrix fragment and per copy). ptxas keeps ``r`` as a small
integer and rebuilds ``r * C + base`` for each address (eight ``IMAD`` per trip for the V tile
of an attention key loop on sm_80). As in CUTLASS and Triton, the stage is better held as the
byte offset ``off = r * C`` itself, rotated once per trip: every address becomes
``off + base`` (ptxas folds that into the ldmatrix/copy addressing: ``[R + UR]``) and the
counter disappears.

The rewrite, per loop and counter ``r`` (a ``ptx.reg``):

- ``r``'s only assign in the loop is ``r <- selp(0, r + 1, r + 1 == N)`` (N a constant >= 2), the
  chain's three instructions read by nothing else, and ``r``'s last assign before the loop's
  label is a constant ``r0`` in ``[0, N)``;
- every other read of ``r`` anywhere is in the loop, as ``r * C``, ``mad.lo(r, C, x)`` or
  ``r << k`` with constant ``C`` (or ``2^k``), ``0 < N * C < 2^32``.

Then ``r`` takes only the values ``0..N-1`` in the loop (it starts in range and the update maps
the range into itself), so for each distinct ``C`` a register ``off_C = r0 * C`` set before the
label and advanced right after ``r``'s update by

- ``off_C ^= C`` when ``N == 2`` (``r`` is 0 or 1: ``off_C`` is 0 or ``C`` and the xor swaps
  them; one instruction instead of three), else
- ``t = off_C + C; off_C = (t == N * C) ? 0 : t`` (``t == N * C`` exactly when ``r + 1 == N``:
  the multiples ``C, 2C, ..., NC`` are distinct since ``NC < 2^32``)

equals ``r * C`` at every point of the loop but the one between the two adjacent updates. The
reads become ``off_C`` (``mad`` becomes ``add off_C, x``) and ``r``, its chain and its assigns
go. A counter read in any other way (a barrier phase, a value after the loop) is left alone, and
so is one whose offsets would take more instructions per trip than its own update (three): with
``N > 2``, more than one distinct scale (the reads' ``mad``s only turn into ``add``s).
"""

from __future__ import annotations

from dataclasses import dataclass

from kaio.dialects import ptx
from kaio.passes.ptx_loops import Loop, entry_constant, loop_assignments
from kaio.passes.ptx_scalar import ConstPool, Emit, block_ops, const_int, spec_parts
from xdsl.dialects.builtin import i1, i32
from xdsl.ir import Operation, SSAValue


@dataclass
class Ring:
    """A stage counter of one loop and the loop's reads of it, by scale."""

    reg: SSAValue
    update: ptx.AssignOp
    chain: tuple[Operation, ...]  # bump (r + 1), wrap (== N), select
    stages: int
    start: int
    reads: list[tuple[Operation, int]]  # (reading op, scale C)


def _other(op: Operation, reg: SSAValue) -> SSAValue | None:
    """The operand of a two-operand ``op`` that is not ``reg`` (``reg`` must be one of them)."""
    a, b = op.operands[:2]
    return b if a is reg else a if b is reg else None


def _only_read_by(v: SSAValue, readers: set[Operation]) -> bool:
    return all(u.operation in readers for u in v.uses)


def _counter_update(update: ptx.AssignOp) -> tuple[tuple[Operation, ...], int] | None:
    """``(bump, wrap, select), N`` when ``update`` writes ``selp(0, r + 1, r + 1 == N)``."""
    reg, value = update.operands
    select = value.owner
    if type(select) is not ptx.SelpOp or "guard" in select.properties:
        return None
    zero, bumped, wrapped = select.operands
    bump, wrap = bumped.owner, wrapped.owner
    if (
        const_int(zero) != 0
        or type(bump) is not ptx.AddOp
        or spec_parts(bump)[1][-1] not in ("s32", "u32", "b32")  # type: ignore[arg-type]
        or const_int(_other(bump, reg) or reg) != 1
        or type(wrap) is not ptx.SetpOp
        or spec_parts(wrap)[0] != ("eq",)  # type: ignore[arg-type]
        or len(wrap.results) != 1
        or _other(wrap, bumped) is None
    ):
        return None
    stages = const_int(_other(wrap, bumped))  # type: ignore[arg-type]
    chain = (bump, wrap, select)
    if (
        stages is None
        or stages < 2
        or not _only_read_by(bumped, {wrap, select})
        or not _only_read_by(wrapped, {select})
        or not _only_read_by(value, {update})
    ):
        return None
    return chain, stages


def _scale(op: Operation, reg: SSAValue) -> int | None:
    """``C`` when ``op`` reads ``reg`` only as ``reg * C`` (``mul.lo``, ``mad.lo`` as a factor,
    ``shl`` by a constant)."""
    cls = type(op)
    if not isinstance(op, ptx.PtxInstr) or "guard" in op.properties or cls not in (ptx.MulOp, ptx.MadOp, ptx.ShlOp):
        return None
    mods, types = spec_parts(op)
    if types[-1] not in ("s32", "u32", "b32") or [v is reg for v in op.operands].count(True) != 1:
        return None
    if cls is ptx.ShlOp:
        k = const_int(op.operands[1])
        return 1 << k if op.operands[0] is reg and k is not None and k < 32 else None
    if mods != ("lo",) or op.operands[0] is not reg and op.operands[1] is not reg:
        return None
    return const_int(_other(op, reg))  # type: ignore[arg-type]


def find_rings(ops: list[Operation], loop: Loop) -> list[Ring]:
    """The loop's stage counters that the rewrite applies to (see the module doc)."""
    inside, updates = loop_assignments(ops, loop)
    rings = []
    for reg, writes in updates.items():
        if len(writes) != 1 or reg.type != i32 or "guard" in writes[0].properties:
            continue
        found = _counter_update(writes[0])
        start = entry_constant(ops, loop.head, reg)
        if found is None or start is None or not 0 <= start < found[1]:
            continue
        chain, stages = found
        reads: list[tuple[Operation, int]] = []
        for use in reg.uses:
            user = use.operation
            if user is chain[0] or (type(user) is ptx.AssignOp and use.index == 0):
                continue
            scale = _scale(user, reg) if user in inside else None
            if scale is None or not 0 < scale * stages < 1 << 32:
                break
            reads.append((user, scale))
        else:
            scales = len({scale for _, scale in reads})
            if reads and scales * (1 if stages == 2 else 3) <= len(chain):  # no more updates than before
                rings.append(Ring(reg, writes[0], chain, stages, start, reads))
    return rings


def _rotating_offset(ring: Ring, scale: int, head: Operation, pool: ConstPool) -> SSAValue:
    """A register ``off = r * scale`` set before the loop and advanced after ``r``'s update."""
    block = head.parent_block()
    anchor = ring.update.next_op  # the advance goes right after the counter's update
    assert block is not None and anchor is not None
    reg = ptx.RegOp(i32)
    block.insert_op_before(reg, head)
    block.insert_op_before(ptx.AssignOp("b32", [reg.result, pool.get(ring.start * scale, i32)]), head)
    after = Emit(anchor, pool)
    if ring.stages == 2:
        nxt = after(ptx.XorOp, "b32", [reg.result, scale], 32)
    else:
        bumped = after(ptx.AddOp, "s32", [reg.result, scale], 32)
        wrapped = ptx.SetpOp("eq.s32", [bumped, pool.get(ring.stages * scale, i32)], [i1])
        wrapped.location = ring.update.location
        block.insert_op_before(wrapped, anchor)
        nxt = after(ptx.SelpOp, "b32", [0, bumped, wrapped.results[0]], 32)
    move = ptx.AssignOp("b32", [reg.result, nxt])
    move.location = ring.update.location
    block.insert_op_before(move, anchor)
    return reg.result


def rotate(ring: Ring, head: Operation, pool: ConstPool) -> None:
    """Replace ``ring``'s counter by one rotating offset per scale (see the module doc)."""
    scales = dict.fromkeys(scale for _, scale in ring.reads)
    offsets = {scale: _rotating_offset(ring, scale, head, pool) for scale in scales}
    for op, scale in ring.reads:
        value = offsets[scale]
        if type(op) is ptx.MadOp:
            value = Emit(op, pool)(ptx.AddOp, "s32", [value, op.operands[2]], 32)
        op.results[0].replace_all_uses_with(value)
        op.detach()
        op.erase()
    for op in (ring.update, *reversed(ring.chain)):
        op.detach()
        op.erase()
    for use in list(ring.reg.uses):  # what is left: the assigns before the loop
        use.operation.detach()
        use.operation.erase()
    ring.reg.owner.detach()  # type: ignore[union-attr]
    ring.reg.owner.erase()  # type: ignore[union-attr]


def rotate_rings(ops: list[Operation], loop: Loop, pool: ConstPool) -> int:
    """Rewrite every qualifying counter of the loop; returns how many. ``ops`` is listed again."""
    head = ops[loop.head]
    latch = ops[loop.latch]
    rings = find_rings(ops, loop)
    for ring in rings:
        rotate(ring, head, pool)
    if rings:
        ops[:] = block_ops(head.parent_block())  # type: ignore[arg-type]
        loop.head, loop.latch = ops.index(head), ops.index(latch)
    return len(rings)
