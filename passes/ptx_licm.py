"""What ``ptx-licm`` does (the pass is :class:`~kaio.passes.ptx_optimize.PtxLicmPass`, which
calls :func:`licm_module`): loop-invariant code motion on the flat ``ptx`` form.

``lower-to-ptx`` turns each loop into a label, its body and a backward ``bra``; the lowering
rules recompute their index math (warp and lane coordinates, swizzled shared offsets, row
addresses) wherever a tile op sits, so inside a K loop most of it is the same on every trip. An
instruction of the loop moves just before the loop's label (it then runs once, on the way in)
when it is pure (:func:`~kaio.passes.ptx_scalar.is_pure`: no memory, no synchronisation, no
warp-collective, not guarded) and each of its operands is defined outside the loop, is a
``ptx.reg`` no ``ptx.assign`` of the loop writes, or was itself moved. Inner loops go first, so
what leaves one can leave the next as well.

A loop is moved out of only when it has a single entry: no branch from outside its range lands
on its label or inside it (then the code before the label runs exactly when the loop is entered:
:func:`~kaio.passes.ptx_loops.find_loops`).

Loads are moved too, but only from loops that write no memory and synchronise nothing (no
store, atomic, asynchronous copy, barrier, fence, tensor-core or warp-collective instruction:
any instruction that is not pure, a load or control flow keeps every load in place), only
plain weak loads (``.volatile``, ``.relaxed``, ``.acquire`` stay), and only loads every trip
executes: those before the body's first branch or label, so the moved load reads an address the
first trip would have read anyway.

The moved instructions' repeats (the lowering rules recompute a thread's row and bounds for
each tile op) then merge, and so do the body's instructions that repeat a nearby one in the
same straight-line stretch and read no ``ptx.reg`` (:func:`merge_repeats`).
"""

from __future__ import annotations

from kaio.dialects import ptx
from kaio.passes.ptx_fold import value_key
from kaio.passes.ptx_loops import Loop, for_each_loop
from kaio.passes.ptx_scalar import (
    entries,
    is_pure,
    reads_registers,
    spec_parts,
)
from xdsl.dialects.builtin import ModuleOp, f64, i64
from xdsl.ir import Operation, OpResult, SSAValue

_READS_OR_CONTROL = frozenset((ptx.LdOp, ptx.ConstOp, ptx.LabelOp, ptx.BraOp, ptx.AssignOp, ptx.CommentOp))
_ORDERED_LOADS = frozenset(("volatile", "relaxed", "acquire", "mmio"))


def _hoistable_load(op: Operation, before_control: bool, read_only: bool) -> bool:
    return (
        type(op) is ptx.LdOp and read_only and before_control and op.guard is None
        and not _ORDERED_LOADS.intersection(spec_parts(op)[0])
    )  # fmt: skip


def _words(v: SSAValue) -> int:
    """Registers a value holds while live (constants are immediates; a predicate counts one)."""
    if type(v.owner) is ptx.ConstOp:
        return 0
    return 2 if v.type in (i64, f64) else 1


def invariant_ops(body: list[Operation]) -> list[Operation]:
    """The loop's instructions that may move before it, in program order."""
    # sets of ids, not of ops: an op or value hashes through a Python ``__hash__`` (the ops
    # are alive throughout, so no id is reused)
    inside = {id(op) for op in body}
    assigned = {id(op.operands[0]) for op in body if type(op) is ptx.AssignOp}
    read_only = all(is_pure(op) or type(op) in _READS_OR_CONTROL for op in body)
    found: set[int] = set()
    before_control = True
    for op in body:
        if type(op) in (ptx.LabelOp, ptx.BraOp):
            before_control = False
        if not (is_pure(op) or _hoistable_load(op, before_control, read_only)) or not op.results:
            continue
        if all((id(v.owner) not in inside or id(v.owner) in found) and id(v) not in assigned for v in op.operands):
            found.add(id(op))
    return [op for op in body if id(op) in found]


def within_budget(candidates: list[Operation], budget: int) -> set[Operation]:
    """The candidates, if the registers they keep live across the loop (moved values read by
    what stays) fit ``budget``; else only the constants. A moved value lives through every
    trip, and ptxas neither sinks it back nor rematerialises it: a big loop's invariant math
    (hundreds of fragment addresses in an attention backward) would spill; ptxas's own
    scheduling handles such a loop better left alone."""
    chosen = set(candidates)
    cost = sum(_words(v) for o in candidates for v in o.results if any(u.operation not in chosen for u in v.uses))
    if cost <= budget:
        return chosen
    return {o for o in candidates if all(_words(v) == 0 for v in o.results)}


def _by_value(part: object) -> object:
    """A key part, with a constant operand as its value (the pool may not have merged them yet)."""
    # the exact type, not isinstance against xDSL's abstract SSAValue (slow); only an op's
    # result can be a constant's
    if type(part) is OpResult and type(part.owner) is ptx.ConstOp:
        return ("const", part.owner.value, part.type)  # type: ignore[attr-defined]
    return part


BODY_WINDOW = 32
"""How far apart (in ops) two repeats of a loop body may be to merge: a K tile's and a V tile's
copies sit a few instructions apart; repeats far apart merged lengthen a register's life across
the whole body (attention at head dim 256 on sm_90a then spills)."""


def merge_repeats(ops: list[Operation], window: int = 0) -> None:
    """Within each straight-line stretch of ``ops`` (no label between: the earlier instruction
    dominates the later), a pure instruction identical to an earlier one at most ``window`` ops
    before it (0: any distance) that reads no ``ptx.reg`` reads the earlier one's result
    instead and goes."""
    seen: dict[tuple[object, ...], Operation] = {}
    at = {id(op): n for n, op in enumerate(ops)} if window else {}
    for op in ops:
        if type(op) is ptx.LabelOp:
            seen.clear()
        elif is_pure(op) and op.results and type(op) is not ptx.ConstOp and not reads_registers(op):
            key = tuple(map(_by_value, value_key(op)))
            twin = seen.setdefault(key, op)
            if twin is op:
                continue
            if window and at[id(op)] - at[id(twin)] > window:
                seen[key] = op  # too far back: the later one is the twin of what follows
                continue
            for old, new in zip(op.results, twin.results):
                old.replace_all_uses_with(new)
            op.detach()
            op.erase()


def hoist_loop(ops: list[Operation], loop: Loop, budget: int) -> int:
    """Move the loop's invariant instructions before its label; returns how many moved.

    The lowering rules repeat their index math per tile op (a K tile's and a V tile's copies
    compute the same thread row and bounds), so the moved instructions hold repeats: they merge
    (a moved value lives across the loop either way). The body's repeats reading them merge
    where they are close (:data:`BODY_WINDOW`): ptxas merges repeated integer math itself but
    leaves two equal bounds compares two ``ISETP`` per trip."""
    body = ops[loop.head + 1 : loop.latch + 1]
    candidates = invariant_ops(body)
    moved = within_budget(candidates, budget)
    head = ops[loop.head]
    kept_out = [op for op in candidates if op in moved]
    for op in kept_out:
        op.detach()
        head.parent_block().insert_op_before(op, head)  # type: ignore[union-attr]
    merge_repeats(kept_out)
    moved_ids = {id(op) for op in kept_out}
    merge_repeats([op for op in body if id(op) not in moved_ids], BODY_WINDOW)
    return len(moved)


def licm_entry(entry: ptx.EntryOp, budget: int = 64) -> int:
    """Hoist out of every loop of the entry, inner loops first; returns how many moved."""
    return for_each_loop(entry.body.block, lambda ops, loop: hoist_loop(ops, loop, budget))


def licm_module(module: ModuleOp, budget: int) -> None:
    """``ptx-licm`` on every entry of ``module``: what moves out of one loop keeps at most
    ``budget`` registers live across it (:func:`within_budget`)."""
    for entry in entries(module):
        licm_entry(entry, budget)
