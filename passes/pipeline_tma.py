"""``pipeline-tma{stages=N}``: the K loop's tile copies on Hopper's Tensor Memory Accelerator
(sm_90), in a ring of N shared stages completed through mbarriers.

Where ``pipeline-cp-async`` has every thread copy 16 bytes at a time, one thread here asks the
TMA unit for whole boxes: the copy of a ``rows x cols`` tile into a ``wgmma``-layout buffer
is one ``cp.async.bulk.tensor`` per column panel (the box is the panel: S bytes wide, ``rows``
high, swizzled by the hardware with the S-byte pattern the layout already is), or a single one
of a rank-3 box (panel, rows, panels) where the tile's columns are whole panels of the tensor's
(``tensor_map_views``: a paneled map). Completion is
counted in bytes on the stage's mbarrier, which is why no thread waits for more than the data
it reads, and boxes past the tensor's edges read as zero, like the view's bounds.

The loop becomes (S stages, K tiles t = 0, 1, ..; stage of tile t: t mod S)::

    thread 0 inits S mbarriers (one arrival each); barrier
    thread 0, for t < S - 1 inside K: expect_tx(bar[t], bytes); TMA loads of tile t -> stage t
    for each tile t (read stage r, phase p):
        wait until bar[r] completed phase p      # tile t has landed
        math on stage r
        barrier                                  # everyone is done with stage r - 1 ...
        thread 0, if t + S - 1 inside K: expect_tx + TMA loads of tile t + S - 1 -> stage r - 1

Only tiles inside the loop's range are loaded, so nothing is in flight after the loop. The
phase parity flips each time the read stage wraps. The barrier before the refill is marked
(:data:`stage_attrs.REFILL_BARRIER_ATTR`): ``lower-to-wgmma`` keeps one group of wgmmas in flight across
iterations and would otherwise add one of its own for the same reason.

The refill comes after the math so that those wgmmas of tile t - 1 may still run while tile t
is computed; S - 2 tiles are then in flight during the math. A 2-stage ring would have none,
so it refills first instead (the barrier, then tile t + 1 into the stage tile t - 1 left, then
the wait for tile t and the math): one tile loads during every tile's math (attention's K and V
rings), and ``lower-to-wgmma`` sees the refill barrier before the dot and keeps no wgmma of
the previous tile in flight (the refill overwrites its stage).

Each operand gets a ``!kernel.tensor_map`` parameter whose recipe the runtime builds the map
from at every launch (``kaio.runtime.tensor_maps``); which views a map can describe is
``tensor_map_views``'s to say. A K loop nested in other loops (a tile loop, a persistent
program) initialises its barriers once, before them, and carries its ring's state through them
(:func:`pipeline_loop`). A loop with any copy that does not qualify (another layout, a computed
extent, an unproven alignment, a 2-D block, a loop under a branch) is left to
``pipeline-cp-async``, with a debug note on the ``kaio.passes`` logger saying why.

A warp-specialised loop (``warp_specialize=true``) trades registers between its warpgroups with
``setmaxnreg`` counts derived from the registers the CTA holds at entry, which the kernel pins
with ``.maxnreg`` (``maxnreg``, ``producer_registers``, ``consumer_registers``;
:mod:`kaio.passes.register_trade` says how and why).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, UnitAttr, i32, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.traits import is_side_effect_free

from kaio.dialects import kernel, mbarrier, smem, tile, tma
from kaio.dialects import stage_attrs
from kaio.errors import KaioCompileError
from kaio.pass_contracts import OptionRange, PassContract
from kaio.passes.int_builder import IndexBuilder
from kaio.launch_limits import MAX_STAGES, MIN_RING_STAGES
from kaio.passes.stage_rings import erase_single_buffers, load_slice, make_rings, move_math, next_stage, read_stages
from kaio.passes.register_trade import PRODUCER_REGISTERS, PRODUCER_THREADS, RegisterTrade, plan_trade
from kaio.passes.tensor_map_views import MappedView, add_map_param, map_view

log = logging.getLogger("kaio.passes")


@dataclass
class TmaCopy:
    """How one tile copy becomes TMA boxes: one per ``span``-byte column panel, or one for all
    of them where the operand's map is paneled (``mapped.panels_per_box``)."""

    copy: smem.CopyOp
    mapped: MappedView
    rows: int
    span: int  # panel width in bytes (the box's inner extent and the swizzle span)
    panels: int
    elem_bytes: int

    @property
    def coords(self) -> tuple[SSAValue, ...]:
        return self.mapped.coords

    @property
    def bytes(self) -> int:
        return self.rows * self.span * self.panels


def plan_copy(copy: smem.CopyOp, func: kernel.KernelFuncOp) -> TmaCopy | str:
    """The TMA plan of a copy, or why it cannot have one."""
    dst = copy.dst.type
    assert isinstance(dst, smem.BufferType)
    if dst.layout.kind.data != "wgmma":
        return f"a buffer is in the {dst.layout.kind.data} layout (TMA fills the wgmma layout's panels)"
    eb = dst.elem_bytes
    rows, cols = dst.tile
    span = dst.layout.panel_span(cols, eb)
    panels = cols * eb // span
    mapped = map_view(copy.src.owner, func, rows, span, eb, merge_panels=panels)
    if isinstance(mapped, str):
        return mapped
    return TmaCopy(copy, mapped, rows, span, panels, eb)


def barrier_slot(ix: IndexBuilder, barriers: SSAValue, stage: SSAValue) -> SSAValue:
    """The mbarrier of ``stage`` in a ring of them (``mbarrier.alloc count S``: 8 bytes each)."""
    return ix.add(barriers, ix.mul(stage, ix.const(8)))


class _Issuer:
    """Issues the TMA loads of one tile (all operands) into one stage."""

    def __init__(self, plans: list[TmaCopy], maps: list[SSAValue], rings: dict[SSAValue, SSAValue], barriers: SSAValue,
                 tid: SSAValue, leader: SSAValue, slice_ops: list[Operation], iv: SSAValue, ub: SSAValue):  # fmt: skip
        self.plans, self.maps, self.rings, self.barriers = plans, maps, rings, barriers
        self.tid, self.leader, self.slice_ops, self.iv, self.ub = tid, leader, slice_ops, iv, ub
        self.total = sum(p.bytes for p in plans)

    def barrier(self, ix: IndexBuilder, stage: SSAValue) -> SSAValue:
        return barrier_slot(ix, self.barriers, stage)

    def issue(self, ix: IndexBuilder, k: SSAValue, stage: SSAValue, refill: bool, ub: SSAValue | None = None,
              valid: SSAValue | None = None, outer: dict[SSAValue, SSAValue] | None = None) -> None:  # fmt: skip
        """The issuing thread, if tile ``k`` is inside the loop (below ``ub``, default the
        loop's, and ``valid``): arm the stage's barrier, load the boxes (``refill``: into a stage
        the block has read before: see :meth:`load`; ``outer``: values of the enclosing loop's
        body recomputed for another of its iterations, see :func:`_next_run`)."""
        inside = ix.b.insert(arith.CmpiOp(k, ub or self.ub, "slt")).result
        go = ix.b.insert(arith.AndIOp(self.leader, inside)).result
        if valid is not None:
            go = ix.b.insert(arith.AndIOp(go, valid)).result
        block = Block()
        self.load(IndexBuilder(Builder(InsertPoint.at_end(block))), k, stage, refill, outer)
        block.add_op(scf.YieldOp())
        ix.b.insert(scf.IfOp(go, [], [block]))

    def load(self, body: IndexBuilder, k: SSAValue, stage: SSAValue, refill: bool,
             outer: dict[SSAValue, SSAValue] | None = None) -> None:  # fmt: skip
        """Arm the stage's barrier with the tile's bytes and load the tile at ``k`` into it.

        A refill overwrites, through the async proxy, bytes the block read before: if those
        reads were generic-proxy ones (``ldmatrix``, ``ld.shared`` of an mma.sync dot), the
        barrier (or the released mbarrier phase) orders them before this thread, but only a
        ``fence.proxy.async`` orders them before the TMA write (PTX ISA, memory consistency
        model, "proxies": accesses through different proxies need a proxy fence between them;
        Triton's ProxyFenceInsertion and CUTLASS put it in the issuing thread, after the
        synchronisation, before the copy). ``lower-to-wgmma`` drops the fence where every reader
        of the stage is a wgmma (the async proxy already)."""
        if refill:
            body.b.insert(tma.FenceOp()).attributes[stage_attrs.REFILL_FENCE_ATTR] = UnitAttr()
        mapping: dict[SSAValue, SSAValue] = {**(outer or {}), self.iv: k}
        for op in self.slice_ops:
            body.b.insert(op.clone(value_mapper=mapping))
        bar = self.barrier(body, stage)
        body.b.insert(mbarrier.ArriveExpectTxOp(bar, body.const(self.total)))
        for plan, tmap in zip(self.plans, self.maps):
            coords = [mapping.get(v, v) for v in plan.coords]
            buffer = body.b.insert(smem.StageOp(self.rings[plan.copy.dst], stage)).result
            base = body.b.insert(smem.AddressOp(buffer)).result
            for p in range(0, plan.panels, plan.mapped.panels_per_box):  # a box's panels land one after another
                dst = body.add(base, body.const(p * plan.rows * plan.span)) if p else base
                body.b.insert(tma.LoadOp(tmap, plan.mapped.box_coords(body, coords, p), dst, bar))


def _prepare(loop: scf.ForOp, plans: list[TmaCopy], stages: int, func: kernel.KernelFuncOp,
             outer: IndexBuilder) -> _Issuer:  # fmt: skip
    """Rings filled by TMA, one tensor-map parameter per operand, the stages' (full) barriers
    (``outer``: where the kernel's top level reaches the loop, before its outermost loop)."""
    body = loop.body.block
    slice_ops = load_slice(body, [v for p in plans for v in p.coords])
    rings = make_rings([p.copy for p in plans], stages, "pipeline-tma")
    for ring in rings.values():
        ring.owner.attributes[stage_attrs.TMA_RING_ATTR] = UnitAttr()  # type: ignore[union-attr]
    maps = [add_map_param(func, plan.mapped) for plan in plans]
    barriers = outer.b.insert(mbarrier.AllocOp(stages)).result
    tid = outer.b.insert(kernel.ThreadIdOp("x")).result
    leader = outer.b.insert(tma.IssuerOp(0)).result
    return _Issuer(plans, maps, rings, barriers, tid, leader, slice_ops, body.args[0], loop.ub)


def _init_barriers(outer: IndexBuilder, leader: SSAValue, rings: list[tuple[SSAValue, int]], stages: int) -> None:
    """Thread 0 initialises each ring of barriers (with its arrival count) and fences them for
    the async proxy; then every thread waits for it.

    ``mbarrier.init`` is a generic-proxy write, and the TMA loads that complete on the barriers
    (complete_tx) act through the async proxy: without a proxy fence, the first copy's
    transaction may reach a barrier before its initialisation does. The CUDA programming
    guide's TMA example fences with ``fence.proxy.async.shared::cta`` right after the init, in
    the initialising thread, before the block barrier (CUTLASS's ``fence_barrier_init`` is the
    cluster-wide ``fence.mbarrier_init.release.cluster``; kaio launches no clusters)."""
    block = Block()
    ix = IndexBuilder(Builder(InsertPoint.at_end(block)))
    for barriers, arrivals in rings:
        for s in range(stages):
            ix.b.insert(mbarrier.InitOp(barrier_slot(ix, barriers, ix.const(s)), arrivals))
    ix.b.insert(tma.FenceOp())
    block.add_op(scf.YieldOp())
    outer.b.insert(scf.IfOp(leader, [], [block]))
    outer.b.insert(kernel.BarrierOp())


Tail = Callable[[IndexBuilder, Block, SSAValue], None]  # (builder, new body, write stage)


def _rebuild_loop(loop: scf.ForOp, issuer: _Issuer, stages: int, tail: Tail, start: list[SSAValue] | None = None,
                  head: Tail | None = None) -> scf.ForOp:  # fmt: skip
    """The loop, carrying the read and write stages and the read stage's phase parity (from
    ``start``; default: a fresh ring) : ``head`` (if any) refills, it waits for its tile,
    computes on the read stage, then ``tail`` refills or releases."""
    body = loop.body.block
    n = len(body.args)
    new_body = Block(arg_types=[*body.arg_types, i32, i32, i32])
    for old, new in zip(body.args, new_body.args[:n]):
        old.replace_all_uses_with(new)
    read, write, phase = new_body.args[n:]
    ix = IndexBuilder(Builder(InsertPoint.at_end(new_body)))
    issuer.iv = new_body.args[0]
    if head is not None:
        head(ix, new_body, write)
    ix.b.insert(mbarrier.WaitParityOp(issuer.barrier(ix, read), phase))
    old_yield = move_math(body, ix.b)
    read_stages(new_body, issuer.rings, read)
    tail(ix, new_body, write)
    carried = list(old_yield.arguments)
    old_yield.erase(safe_erase=False)
    next_read = next_stage(ix, read, stages)
    ix.b.insert(scf.YieldOp(*carried, next_read, next_stage(ix, write, stages), _flip_on_wrap(ix, phase, next_read)))

    if start is None:
        outer = IndexBuilder(Builder(InsertPoint.before(loop)))
        start = [outer.const(0), outer.const(stages - 1), outer.const(0)]
    new_loop = scf.ForOp(loop.lb, loop.ub, loop.step, [*loop.iter_args, *start], new_body)
    Rewriter.insert_op(new_loop, InsertPoint.before(loop))
    for old, new in zip(loop.results, new_loop.results):
        old.replace_all_uses_with(new)
    loop.detach()
    loop.erase()
    erase_single_buffers(issuer.rings)
    return new_loop


def _flip_on_wrap(ix: IndexBuilder, phase: SSAValue, stage: SSAValue) -> SSAValue:
    """The phase parity of the next use of a stage: flipped when the stage index wrapped to 0."""
    wrapped = ix.b.insert(arith.CmpiOp(stage, ix.const(0), "eq")).result
    return ix.b.insert(arith.XOrIOp(phase, ix.b.insert(arith.ExtUIOp(wrapped, i32)).result)).result


def pipeline_loop(loop: scf.ForOp, plans: list[TmaCopy], stages: int, func: kernel.KernelFuncOp,
                  enclosing: list[scf.ForOp]) -> None:  # fmt: skip
    """Every warp computes; thread 0 also issues the loads, S - 1 tiles ahead.

    A K loop inside ``enclosing`` loops (outermost first: a tile loop, a persistent program)
    initialises its barriers once, before them, and continues the ring where its previous run
    left it: the read stage and its phase parity are carried through every enclosing loop, so
    each barrier's phases keep counting. In one enclosing loop whose body computes the run's
    bounds and coordinates without effects (the persistent matmul's tile loop), the next run's
    first S - 1 tiles are loaded right after this run (:class:`NextRun`), while the epilogue
    (the C tile's stores) goes on, and the first run's before the enclosing loop; loads past
    its last iteration are not issued, so nothing is in flight when it ends. Elsewhere a run
    loads only its own tiles, and a block barrier before the next run's prologue makes sure
    every warp is done reading the stages it refills."""
    top = IndexBuilder(Builder(InsertPoint.before(enclosing[0] if enclosing else loop)))
    issuer = _prepare(loop, plans, stages, func, top)
    _init_barriers(top, issuer.leader, [(issuer.barriers, 1)], stages)
    ring = carry_ring_state(enclosing, top) if enclosing else None
    ahead = _next_run(loop, ring.loops[-1], issuer) if ring is not None and len(ring.loops) == 1 else None
    outer = IndexBuilder(Builder(InsertPoint.before(loop)))
    if ring is None:
        first, phase = outer.const(0), outer.const(0)
    else:
        first, phase = ring.inside
        if ahead is None:
            outer.b.insert(kernel.BarrierOp())  # the previous run's readers are done with its stages
    stage = first
    if ahead is not None:  # the previous iteration (or the code before the loop) loaded this run's first tiles
        ahead.prologue(IndexBuilder(Builder(InsertPoint.before(ring.loops[-1]))), None, stages)  # type: ignore[union-attr]
        for _ in range(stages - 1):
            stage = next_stage(outer, stage, stages)
    for s in range(stages - 1 if ahead is None else 0):  # prologue: tiles 0 .. S-2, into the stages from the first on
        issuer.issue(outer, outer.add(loop.lb, outer.mul(loop.step, outer.const(s))), stage, refill=ring is not None)
        stage = next_stage(outer, stage, stages) if ring is not None else outer.const(s + 1)

    def refill(ix: IndexBuilder, body: Block, write: SSAValue) -> None:
        ix.b.insert(kernel.BarrierOp()).attributes[stage_attrs.REFILL_BARRIER_ATTR] = UnitAttr()
        issuer.issue(ix, ix.add(body.args[0], ix.mul(loop.step, ix.const(stages - 1))), write, refill=True)

    def nothing(ix: IndexBuilder, body: Block, write: SSAValue) -> None:
        pass

    if stages == 2:  # refill first: the next tile loads while this one is computed (see the module doc)
        new_loop = _rebuild_loop(loop, issuer, stages, nothing, [first, stage, phase], head=refill)
    else:
        new_loop = _rebuild_loop(loop, issuer, stages, refill, [first, stage, phase])
    if ring is not None:
        read, _, next_phase = new_loop.results[-3:]
        if ahead is not None:
            after = IndexBuilder(Builder(InsertPoint.after(new_loop)))
            # every warp is done reading this run's stages (the last iteration's refill barrier
            # already ordered the reads of the stages loaded here; this keeps the prefetch
            # independent of where the loop refills)
            after.b.insert(kernel.BarrierOp())
            ahead.prologue(after, read, stages)
        ring.close([read, next_phase])


@dataclass
class NextRun:
    """The first tiles of a K loop's next run, loaded ahead: the ops of the enclosing loop's
    body that the run's bounds and box coordinates come from (pure, recomputed for another
    iteration of it)."""

    loop: scf.ForOp  # the K loop
    enclosing: scf.ForOp
    ops: list[Operation]
    issuer: _Issuer

    def prologue(self, ix: IndexBuilder, start: SSAValue | None, stages: int) -> None:
        """Issue tiles 0 .. S-2 of the run of the enclosing loop's next iteration (``start``:
        the stage after this run's last; None: the first iteration's, into a fresh ring, placed
        before the enclosing loop), if there is one."""
        iv = self.enclosing.body.block.args[0]
        if start is None:
            index, stage = self.enclosing.lb, ix.const(0)
        else:
            index, stage = ix.add(iv, self.enclosing.step), start
        valid = ix.b.insert(arith.CmpiOp(index, self.enclosing.ub, "slt")).result
        mapping: dict[SSAValue, SSAValue] = {iv: index}
        for op in self.ops:
            ix.b.insert(op.clone(value_mapper=mapping))
        lb, ub, step = (mapping.get(v, v) for v in (self.loop.lb, self.loop.ub, self.loop.step))
        for s in range(stages - 1):
            k = ix.add(lb, ix.mul(step, ix.const(s))) if s else lb
            self.issuer.issue(ix, k, stage, refill=start is not None, ub=ub, valid=valid, outer=mapping)
            if s < stages - 2:
                stage = next_stage(ix, stage, stages) if start is not None else ix.const(s + 1)


def _next_run(loop: scf.ForOp, enclosing: scf.ForOp, issuer: _Issuer) -> NextRun | None:
    """How to load the next run's first tiles while this run's epilogue goes on (a persistent
    program's next C tile), or None where the enclosing body's values they need cannot be
    recomputed for its next iteration (an op with effects or regions, a value carried by it)."""
    body = enclosing.body.block
    values = [loop.lb, loop.ub, loop.step, *(v for op in issuer.slice_ops for v in op.operands)]
    values += [v for plan in issuer.plans for v in plan.coords]
    ops = load_slice(body, values)
    if any(op.regions or not is_side_effect_free(op) for op in ops):
        return None
    carried = set(body.args[1:])
    if any(v in carried for v in values) or any(v in carried for op in ops for v in op.operands):
        return None
    return NextRun(loop, enclosing, ops, issuer)


@dataclass
class CarriedRing:
    """A ring's (read stage, phase parity) carried through a nest of loops: ``inside`` is its
    value where the innermost body starts; :meth:`close` yields the value its run leaves."""

    loops: list[scf.ForOp]  # outermost first, rebuilt with the two values carried
    inside: list[SSAValue]

    def close(self, values: list[SSAValue]) -> None:
        for loop in reversed(self.loops):
            old_yield = loop.body.block.last_op
            assert isinstance(old_yield, scf.YieldOp)
            Rewriter.replace_op(old_yield, scf.YieldOp(*old_yield.arguments, *values))
            values = list(loop.results[-2:])


def carry_ring_state(enclosing: list[scf.ForOp], top: IndexBuilder) -> CarriedRing:
    """Rebuild each enclosing loop with two more loop-carried values, a fresh ring's (0, 0)."""
    values: list[SSAValue] = [top.const(0), top.const(0)]
    rebuilt = []
    for loop in enclosing:
        body = loop.body.block
        new_body = Block(arg_types=[*body.arg_types, i32, i32])
        for old, new in zip(body.args, new_body.args):
            old.replace_all_uses_with(new)
        for op in list(body.ops):
            op.detach()
            new_body.add_op(op)
        new_loop = scf.ForOp(loop.lb, loop.ub, loop.step, [*loop.iter_args, *values], new_body)
        Rewriter.insert_op(new_loop, InsertPoint.before(loop))
        for old, new in zip(loop.results, new_loop.results):
            old.replace_all_uses_with(new)
        loop.detach()
        loop.erase()
        rebuilt.append(new_loop)
        values = list(new_body.args[-2:])
    return CarriedRing(rebuilt, values)



def accumulator_registers(loop: scf.ForOp, consumers: int) -> int:
    """Registers per consumer thread the loop's dot accumulators take (32-bit words)."""
    words = 0
    for dot in loop.body.block.ops:
        if isinstance(dot, tile.DotOp):
            elements = math.prod(tile.shape_of(dot.acc.type))
            words += elements * max(tile.element_of(dot.acc.type).bitwidth, 32) // 32  # type: ignore[attr-defined]
    return -(-words // consumers)


def specialize_loop(loop: scf.ForOp, plans: list[TmaCopy], stages: int, func: kernel.KernelFuncOp,
                    budget: Callable[[int, int], RegisterTrade]) -> None:  # fmt: skip
    """A producer warpgroup (launched after the block's warps) loads; the block's warps compute.

    The producer's first thread walks the K tiles: it waits until the consumers released the
    tile's stage (its *empty* barrier), arms the stage's *full* barrier and issues the boxes,
    up to S tiles ahead; the other producer threads leave at once. The consumers wait on
    *full*, compute, and release the stage of the previous tile (lane 0 of every consumer
    warp arrives: by then ``lower-to-wgmma``'s ``wait_group 1`` has retired the wgmmas reading it).
    After the split, block barriers count only the consumers (``kernel.barrier_threads``), and
    the warpgroups trade registers (``kernel.setmaxnreg``) by the counts ``budget`` gives for the
    consumers and their accumulators (:mod:`kaio.passes.register_trade`; none where nothing is
    left to trade)."""
    consumers = func.block_shape[0]
    trade = budget(consumers, accumulator_registers(loop, consumers))
    outer = IndexBuilder(Builder(InsertPoint.before(loop)))
    issuer = _prepare(loop, plans, stages, func, outer)
    empty = outer.b.insert(mbarrier.AllocOp(stages)).result
    _init_barriers(outer, issuer.leader, [(issuer.barriers, 1), (empty, consumers // 32)], stages)
    first_lane = outer.b.insert(arith.CmpiOp(outer.b.insert(kernel.LaneIdOp()).result, outer.const(0), "eq")).result

    tid = issuer.tid
    producer = Block()
    p = IndexBuilder(Builder(InsertPoint.at_end(producer)))
    if trade.trade:
        p.b.insert(kernel.SetMaxRegistersOp("dec", trade.producer))
    walk = Block(arg_types=[i32, i32, i32])  # k, stage, phase
    w = IndexBuilder(Builder(InsertPoint.at_end(walk)))
    k, stage, phase = walk.args
    # a fresh barrier counts as having completed the phase before its first: parity 1 passes
    w.b.insert(mbarrier.WaitParityOp(barrier_slot(w, empty, stage), w.b.insert(arith.XOrIOp(phase, w.const(1))).result))
    issuer.load(w, k, stage, refill=True)  # after the consumers released the stage (the first S: a no-op wait)
    following = next_stage(w, stage, stages)
    w.b.insert(scf.YieldOp(following, _flip_on_wrap(w, phase, following)))
    issuing = Block()
    issuing.add_op(scf.ForOp(loop.lb, loop.ub, loop.step, [p.const(0), p.const(0)], walk))
    issuing.add_op(scf.YieldOp())
    first = p.b.insert(tma.IssuerOp(consumers // 32)).result  # one thread of the producer's first warp
    p.b.insert(scf.IfOp(first, [], [issuing]))
    p.b.insert(kernel.ExitOp())
    p.b.insert(scf.YieldOp())
    is_producer = outer.b.insert(arith.CmpiOp(tid, outer.const(consumers), "uge")).result
    outer.b.insert(scf.IfOp(is_producer, [], [producer]))
    if trade.trade:
        outer.b.insert(kernel.SetMaxRegistersOp("inc", trade.consumer))
        func.attributes[stage_attrs.ENTRY_REGISTERS_ATTR] = IntegerAttr(trade.entry, i64)
    else:
        log.debug("pipeline-tma: kernel %s trades no registers: its %d at entry leave the producer nothing to give",
                  func.sym_name.data, trade.entry)  # fmt: skip
    outer.b.insert(kernel.BarrierThreadsOp(consumers))
    func.attributes[stage_attrs.PRODUCER_THREADS_ATTR] = IntegerAttr(PRODUCER_THREADS, i64)

    def release(ix: IndexBuilder, body: Block, previous: SSAValue) -> None:
        """Release the previous tile's stage (none before the first tile): lane 0 of each
        consumer warp arrives once its warp's ``wgmma.wait_group`` retired the tile's reads
        (the wait is warp-wide: lane 0 past it is the whole warp past it), so the phase
        completes after every consumer warp's, with one arrival a warp instead of 32 (CUTLASS)."""
        block = Block()
        rel = IndexBuilder(Builder(InsertPoint.at_end(block)))
        rel.b.insert(mbarrier.ArriveOp(barrier_slot(rel, empty, previous)))
        block.add_op(scf.YieldOp())
        later = ix.b.insert(arith.CmpiOp(body.args[0], loop.lb, "ne")).result
        signal = ix.b.insert(arith.AndIOp(later, first_lane)).result
        ix.b.insert(scf.IfOp(signal, [], [block])).attributes[stage_attrs.REFILL_BARRIER_ATTR] = UnitAttr()

    _rebuild_loop(loop, issuer, stages, release)


@dataclass(frozen=True)
class PipelineTmaPass(ModulePass):
    name = "pipeline-tma"
    contract = PassContract(after=("promote-to-shared",), options=(OptionRange("stages", MIN_RING_STAGES, MAX_STAGES),))

    stages: int | None = None
    """Shared buffers per operand in the ring (2 = double buffering); None: the module's
    ``kaio.launch`` num_stages (below 2 there: no ring, the pass does nothing), else 3."""

    warp_specialize: bool = False
    """A producer warpgroup issues the loads and the block's warps only compute
    (:func:`specialize_loop`): the kernel's first such K loop, for blocks of whole warpgroups."""

    maxnreg: int | None = None
    """The cap ``lower-to-ptx`` will set (0: none; None: the module's ``kaio.launch`` maxnreg,
    which ``lower-to-ptx`` reads too): the warp-specialised register budget starts from it
    (:mod:`kaio.passes.register_trade`)."""

    producer_registers: int = PRODUCER_REGISTERS
    """The producer warpgroup's ``setmaxnreg.dec`` count."""

    consumer_registers: int = 0
    """The consumers' ``setmaxnreg.inc`` count (0: as many as the CTA's pool covers); a count the
    pool cannot cover is a compile error."""

    def budget(self, consumers: int, accumulators: int, maxnreg: int | None = None) -> RegisterTrade:
        cap = self.maxnreg if self.maxnreg is not None else maxnreg
        return plan_trade(consumers, cap or 0, self.producer_registers, self.consumer_registers, accumulators)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        stages = stage_attrs.launch_stages(op, self.stages)
        if stages < MIN_RING_STAGES:
            if self.stages is None:  # the kernel asked for no ring
                return
            raise KaioCompileError(f"pipeline-tma needs at least {MIN_RING_STAGES} stages, got {stages}")
        held = stage_attrs.launch_maxnreg(op)
        budget = functools.partial(self.budget, maxnreg=held)
        loops = [o for o in op.walk() if isinstance(o, scf.ForOp) and any(isinstance(x, smem.CopyOp) for x in o.body.block.ops)]
        for loop in loops:
            func = kernel.enclosing_kernel(loop)
            copies = [x for x in loop.body.block.ops if isinstance(x, smem.CopyOp)]
            plans = [plan_copy(c, func) for c in copies]
            why = next((p for p in plans if isinstance(p, str)), None)
            if func.block_shape[1:] != (1, 1) or func.block_shape[0] % 32:
                why = "the block is not 1-D whole warps (one thread of warp 0 issues the copies)"
            enclosing = enclosing_loops(loop, func)
            if enclosing is None:
                why = "the loop is under a branch (its ring state could not be carried past it)"
            if why is not None:
                log.debug("pipeline-tma: a K loop of kernel %s keeps cp.async: %s", func.sym_name.data, why)
                continue
            specialize = self.warp_specialize and func.block_shape[0] % 128 == 0
            if specialize and enclosing:
                log.debug("pipeline-tma: kernel %s is not warp-specialised: its K loop is nested", func.sym_name.data)
            if specialize and not enclosing and stage_attrs.PRODUCER_THREADS_ATTR not in func.attributes:
                specialize_loop(loop, plans, stages, func, budget)  # type: ignore[arg-type]
            else:
                pipeline_loop(loop, plans, stages, func, enclosing)  # type: ignore[arg-type,arg-type]


def enclosing_loops(loop: scf.ForOp, func: kernel.KernelFuncOp) -> list[scf.ForOp] | None:
    """The ``scf.for`` loops around ``loop``, outermost first; None if anything else is."""
    chain = []
    op = loop.parent_op()
    while op is not func:
        if not isinstance(op, scf.ForOp):
            return None
        chain.append(op)
        op = op.parent_op()
    return chain[::-1]
