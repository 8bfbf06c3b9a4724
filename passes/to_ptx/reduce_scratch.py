"""One shared scratch for every cross-warp reduction of a kernel, in two halves used in turn.

A reduction across warps goes through shared memory: each warp writes its partial result, a
block barrier, then every thread reads all the warps' partials (``tile_reduce._across_warps``).
Giving each reduction a buffer of its own costs, besides the bytes, the buffer's address: on a
cluster-capable arch (sm_90) ptxas builds every ``.shared`` symbol's address from
``SR_CgaCtaId``, once per symbol. One declaration serves all reductions here, and its two
halves alternate so that the barrier each reduction already has orders the reuse:

    reduction 1 writes half 0, barrier, reads half 0
    reduction 2 writes half 1, barrier, reads half 1    <- every thread is past its reads of half 0
    reduction 3 writes half 0, ...

A reduction may write a half once every thread's earlier reads of it are done, that is when a
block barrier lies on every path from those reads to the write. The plan walks the kernel in
program order with the set of halves possibly read since the last such barrier ("dirty"); a
reduction takes a clean half, or (both dirty: branches that each read one) waits at a barrier of
its own first. A region (a loop body, an ``scf.if`` without ``else``) may not run, so what its
barriers clean does not count after it, while what it reads does; of an ``if`` and its ``else``
one runs, so either's state may follow.

In a loop, the next trip writes the halves again. A loop body whose reductions take the same
halves on every trip with none waiting first needs nothing more: its first reduction writes a
half the previous trip left clean, and its barrier orders the rest (two reductions a trip,
layer_norm's long rows and its backward: half 0, then half 1, two barriers a trip). The plan
finds that by walking the body again with what a trip leaves dirty assumed dirty at its start,
until nothing new is. Otherwise (one reduction a trip, always in the same half) the last
reduction of each block in a loop ends with a barrier after its reads, and the others need none
(the next one's barrier, in the same block, comes first): the block ends with nothing dirty
that was not dirty where it began.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import scf
from xdsl.dialects.builtin import i32
from xdsl.ir import Block, SSAValue

from kaio.dialects import ptx, tile
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.passes.to_ptx.shared_reuse import in_loop

HALVES = 2
ALIGN = 16


@dataclass(frozen=True)
class ScratchSlot:
    """Where one reduction's partials go: ``half`` of the kernel's reduce scratch, and whether
    a barrier must come before the writes (both halves may still be read) or after the reads."""

    half: int
    barrier_first: bool
    barrier_after: bool = False  # in a loop, the last reduction of its block: before the next trip's writes


@dataclass(frozen=True)
class ReducePlan:
    slots: dict[tile.ReduceOp, ScratchSlot]
    half_bytes: int  # each half: the largest reduction's partials, rounded up to ALIGN
    halves: int  # halves in use (1 when no reduction needs the second)


def plan_reductions(root: Block, needs: Callable[[tile.ReduceOp], int | None]) -> ReducePlan:
    """The slot of every reduction under ``root`` that ``needs`` shared bytes (None: it stays
    within a warp), by the walk the module doc describes."""
    slots: dict[tile.ReduceOp, ScratchSlot] = {}
    widest = 0

    def walk(block: Block, dirty: frozenset[int]) -> frozenset[int]:
        sizes = {op: n for op in block.ops if isinstance(op, tile.ReduceOp) and (n := needs(op)) is not None}
        if sizes and isinstance(block.parent_op(), scf.ForOp):
            # a loop body whose reductions take the same halves on every trip, none waiting
            # first, needs no barrier after its last: the halves the next trip reads were
            # assumed dirty at its start. Assume what a trip leaves dirty until that holds.
            assumed = dirty
            for _ in range(HALVES + 1):
                saved = dict(slots)
                end = walk_block(block, assumed, sizes, after_last=False)
                if end <= assumed and not any(slots[op].barrier_first for op in sizes):
                    return end
                slots.clear()
                slots.update(saved)
                if end <= assumed:
                    break
                assumed |= end
        return walk_block(block, dirty, sizes, after_last=in_loop(block))

    def walk_block(block: Block, dirty: frozenset[int], sizes: dict[tile.ReduceOp, int], after_last: bool) -> frozenset[int]:
        nonlocal widest
        last = list(sizes)[-1] if sizes else None
        for op in block.ops:
            if op in sizes:
                assert isinstance(op, tile.ReduceOp)
                widest = max(widest, sizes[op])
                clean = [h for h in range(HALVES) if h not in dirty]
                after = op is last and after_last
                slots[op] = ScratchSlot(clean[0] if clean else 0, not clean, after)
                # its reads leave its half dirty, unless a barrier after them cleans it
                dirty = frozenset() if after else frozenset({slots[op].half})
                continue
            if not op.regions:
                continue
            ends = [walk(inner, dirty) for region in op.regions for inner in region.blocks]
            # an scf.if runs one of its blocks (a missing else: none, the state before); any
            # other region may not run at all
            branches = isinstance(op, scf.IfOp) and len(ends) == 2
            dirty = frozenset().union(*ends) if branches else dirty.union(*ends)
        return dirty

    walk(root, frozenset())
    used = 1 + max((s.half for s in slots.values()), default=0)
    return ReducePlan(slots, -(-widest // ALIGN) * ALIGN, used)


_PLANS: weakref.WeakKeyDictionary[PtxEmitter, ReducePlan] = weakref.WeakKeyDictionary()


def reduce_slot(em: PtxEmitter, op: tile.ReduceOp,
                needs: Callable[[tile.ReduceOp], int | None]) -> tuple[SSAValue, ScratchSlot]:  # fmt: skip
    """The shared address of ``op``'s half of the kernel's reduce scratch (declared, with the
    kernel's plan, on the first call) and its slot (the barriers it needs besides its own)."""
    if em not in _PLANS:
        _PLANS[em] = plan_reductions(em.func.body.block, needs)
    plan = _PLANS[em]
    slot = plan.slots[op]
    if "reduce" not in em.scratch:
        em.scratch["reduce"] = em.shared("reduce", plan.half_bytes * plan.halves, ALIGN)
    base = em.scratch["reduce"]
    if slot.half == 0:
        return base, slot
    offset = slot.half * plan.half_bytes
    address = em.invariant(("reduce-half", slot.half),
                           lambda: em.instr(ptx.AddOp, "u32", [base, em.const(offset, i32)], i32))  # fmt: skip
    return address, slot


__all__ = ["ReducePlan", "ScratchSlot", "plan_reductions", "reduce_slot"]
