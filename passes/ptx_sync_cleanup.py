"""What ``ptx-sync-cleanup`` does (the pass is
:class:`~kaio.passes.ptx_optimize.PtxSyncCleanupPass`, which calls :func:`sync_cleanup_module`):
drop the ``cp.async.wait_group``, ``bar.sync`` and ``fence.proxy.async.shared::cta`` instructions
that order nothing.

Lowerings emit their synchronisation locally: each buffer that takes a dead buffer's bytes
waits for the copies in flight and adds a barrier before its first write (``shared_reuse``), a
pipelined loop drains its ring when it ends, a layout conversion through shared memory fences
its scratch on both sides. Side by side these repeat each other: three reusing buffers give
three wait-and-barrier pairs where the first orders everything, a drain is followed by a
reuse's wait, a conversion's closing barrier meets the next one's opening barrier with only
global loads between. The synchronisation-mutant campaign (``kaio.tools.sync_mutants``) finds
them as survivors: deleting one changes nothing.

* A ``cp.async.wait_group N`` (or ``wgmma.wait_group N``) goes when at most N committed
  groups of its kind can be pending on every path to it: a forward walk counts the commits
  since the last wait (a wait lands only committed groups, so copies issued but not committed
  do not count; a guarded commit counts, a guarded wait tells nothing); a label's count
  merges its fall-through's with every branch to it from above, a loop head's is unknown.
* A CTA-wide ``bar.sync 0`` (no thread count, unguarded) orders the accesses its threads made
  since their previous CTA barrier (the kernel's start counts as one) before those they make up
  to their next one (or their exit). Over the control-flow graph, each barrier gets the union
  of what can come *before* it and *after* it, as a set of regions x {read, write}, a region
  being global memory or one shared array (an address is traced back through the arithmetic
  that computes it to the ``mov`` of the array's symbol; one the trace cannot follow may be in
  any array, and the dynamic arrays are one region); it goes when no access before can
  conflict with one after (the same region, one of them a write). A layout conversion's
  scratch needs no barrier against the reduction scratch or the operand tiles around it. A
  barrier is executed by every thread, so the k-th barrier of one thread is the k-th of every
  other: two threads' accesses are ordered by this barrier only when one is before it and the
  other after. Which accesses count: ``ld``/``st``/``atom``/``red`` in their space (a generic
  address: global and every shared array), ``ldmatrix`` reads shared, a ``cp.async`` reads
  global and, seen from an earlier barrier, writes its shared array (its bytes land any time
  after the issue), a wait that may land copies writes the arrays copies go to; ``ld.param``/``.const``/``.local`` and register-only
  instructions touch nothing shared between threads. A ``wgmma.mma_async`` reads the regions
  its descriptors are traced to, from its issue on, and a ``wgmma.wait_group`` reads the
  regions of the wgmmas that may be pending at it (issued since a ``wait_group 0`` on some
  path: the reads it waits for end there, so a barrier between the two orders them); ``wgmma.fence``, ``wgmma.commit_group`` and ``fence.proxy.async`` order a thread's own
  accesses and make none. Anything else (an mbarrier, bulk copy, a counted or guarded barrier,
  an instruction this pass does not know) conflicts with everything. Barriers go one at a time (each removal merges two intervals), the most
  deeply nested first: of a loop's barrier and the one after the loop, the loop's.
* A ``fence.proxy.async.shared::cta`` (unguarded) goes when on every path to it the thread has
  already fenced shared memory for the async proxy since its last generic access to shared
  memory and its last synchronisation: the fence orders the thread's generic accesses (and
  those a barrier or mbarrier ordered before it) before its later async-proxy ones (wgmma
  operands, bulk copies), and an earlier fence with nothing of that kind between orders the
  same ones. Between the two may lie register work, global memory accesses and wgmma
  instructions (async-proxy reads: no generic access); a shared or generic load or store, a
  ``cp.async`` or its wait, a barrier, an mbarrier or bulk-copy instruction, or one this pass
  does not know ends the cover. (A cp.async pipeline's wait, barrier and fence come before the
  first of a block's wgmmas; the fence before the second, whose operand landed in the same
  wait, goes.)
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp, i64
from xdsl.ir import Operation, SSAValue

from kaio.dialects import ptx
from kaio.dialects.ptx_hopper import FenceProxyAsyncOp, WgmmaCommitOp, WgmmaFenceOp, WgmmaMmaAsyncOp, WgmmaWaitOp
from kaio.passes.ptx_scalar import PURE_OPS, block_ops, const_int, entries, is_instr



def sync_cleanup_module(module: ModuleOp) -> None:
    """``ptx-sync-cleanup`` on every entry of ``module``: its :func:`redundant_syncs` go."""
    for entry in entries(module):
        for dead in redundant_syncs(block_ops(entry.body.block)):
            dead.detach()
            dead.erase()


def _cta_barrier(op: Operation) -> bool:
    """``bar.sync 0`` with no thread count and no guard: every thread of the CTA."""
    return (type(op) is ptx.BarSyncOp and "guard" not in op.properties and len(op.srcs) == 1  # type: ignore[attr-defined]
            and const_int(op.srcs[0]) == 0)  # type: ignore[attr-defined]  # fmt: skip


def redundant_syncs(ops: list[Operation]) -> list[Operation]:
    """The waits and barriers of ``ops`` (an entry's instructions, in order) that order nothing,
    in program order."""
    waits = redundant_waits(ops)
    gone = {id(op) for op in waits}
    barriers = redundant_barriers(ops, gone)
    gone |= {id(op) for op in barriers}
    gone |= {id(op) for op in redundant_fences(ops, gone)}
    return [op for op in ops if id(op) in gone]


# -- waits ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Queue:
    """A kind of asynchronous operation that completes in committed groups, waited on by count."""

    commit: type[Operation]
    wait: type[Operation]
    wait_all: type[Operation] | None = None


_QUEUES = (
    _Queue(ptx.CpAsyncCommitOp, ptx.CpAsyncWaitGroupOp, ptx.CpAsyncWaitAllOp),
    _Queue(WgmmaCommitOp, WgmmaWaitOp),
)
_QUEUE_OF = {cls: n for n, q in enumerate(_QUEUES) for cls in (q.commit, q.wait, q.wait_all) if cls is not None}


def redundant_waits(ops: list[Operation]) -> list[Operation]:
    """The ``cp.async.wait_group`` and ``wgmma.wait_group`` of ``ops`` that can land nothing: one
    forward walk with, per queue, the number of committed groups that may be pending (None:
    unknown)."""
    position = {op.sym_name.data: i for i, op in enumerate(ops) if type(op) is ptx.LabelOp}  # type: ignore[attr-defined]
    loop_heads = {op.symbol.data for i, op in enumerate(ops)  # type: ignore[attr-defined]
                  if type(op) is ptx.BraOp and position.get(op.symbol.data, -1) <= i}  # type: ignore[attr-defined]  # fmt: skip
    unknown: tuple[int | None, ...] = (None,) * len(_QUEUES)
    incoming: dict[str, tuple[int | None, ...]] = {}  # label -> the merge of the branches to it seen so far
    dead: list[Operation] = []
    pending: tuple[int | None, ...] = (0,) * len(_QUEUES)
    live = True  # False after an unconditional branch, until a label

    def merge(a: tuple[int | None, ...], b: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return tuple(None if x is None or y is None else max(x, y) for x, y in zip(a, b, strict=True))

    for op in ops:
        cls = type(op)
        if cls is ptx.LabelOp:
            name = op.sym_name.data  # type: ignore[attr-defined]
            if name in loop_heads:
                pending = unknown
            elif name in incoming:
                arrived = incoming.pop(name)
                pending = merge(pending, arrived) if live else arrived
            elif not live:
                pending = unknown  # reached from nowhere above: assume anything
            live = True
            continue
        if not live:
            continue
        if cls is ptx.BraOp:
            target = op.symbol.data  # type: ignore[attr-defined]
            if target not in loop_heads:
                incoming[target] = merge(pending, incoming[target]) if target in incoming else pending
            live = "guard" in op.properties
            continue
        n = _QUEUE_OF.get(cls)
        if n is None:
            continue
        queue, count = _QUEUES[n], pending[n]
        if cls is not queue.commit and "guard" in op.properties:
            continue  # a guarded wait may not run: it tells nothing (a guarded commit may: counted)
        if cls is queue.commit:
            count = None if count is None else count + 1
        elif cls is queue.wait:
            keep = const_int(op.srcs[0])  # type: ignore[attr-defined]
            if keep is not None and count is not None and count <= keep:
                dead.append(op)
                continue
            count = keep if count is None or keep is None else min(count, keep)
        else:
            count = 0
        pending = (*pending[:n], count, *pending[n + 1 :])
    return dead


# -- barriers ---------------------------------------------------------------------------------

# An access's effect is a bit set over *regions*: global memory is region 0, each static
# ``.shared`` array of the entry one more, the dynamic shared arrays (which all start at the
# same byte) one together, and one for shared memory reached through an address of no known
# array. Region r has a read bit (1 << 2r) and a write bit above it.
GLOBAL_READ, GLOBAL_WRITE = 1, 2
# instructions that read and write registers only (PURE_OPS and the ones with side conditions
# other passes care about: special-function approximations, warp collectives)
_TOUCH_NOTHING = PURE_OPS | {
    ptx.AssignOp, ptx.RegOp, ptx.ConstOp, ptx.BraOp, ptx.LabelOp, ptx.MmaOp, ptx.ShflOp, ptx.VoteOp,
    ptx.ActivemaskOp, ptx.CpAsyncCommitOp, ptx.RcpOp, ptx.SqrtOp,
    ptx.RsqrtOp, ptx.Ex2Op, ptx.Lg2Op, ptx.SinOp, ptx.CosOp, ptx.TanhOp, ptx.Dp4aOp, ptx.Dp2aOp,
    ptx.CopysignOp,
}  # fmt: skip
_END = (ptx.RetOp, ptx.ExitOp)
_BARRIER = -1  # the effect of a CTA barrier: it starts a new interval


def conflict(before: int, after: int, reads: int) -> bool:
    """Whether accesses ``before`` a barrier and ``after`` it need it: the same region, one a
    write (``reads``: the read bit of every region)."""
    before_writes, after_writes = (before >> 1) & reads, (after >> 1) & reads
    return bool(before_writes & (after | after_writes) or before & reads & after_writes)


class _Regions:
    """Which regions an entry's shared accesses touch: an address is traced through the
    register instructions that compute it to the ``mov`` of an array's symbol. An address the
    trace cannot follow (loaded from memory, from no array, or a generic one) touches every
    shared region. PTX places distinct ``.shared`` arrays apart, and an address computed from
    one array's start stays inside that array (an access past its end is out of bounds), so
    accesses to two arrays never overlap. Within one static array, a start with a ``within``
    property (a buffer's, where the lowering laid several buffers out in one declaration) says
    which bytes every address computed from it stays in: the array is cut into segments at
    those bounds, each a region, and such a start touches the segments its bytes cover (the
    array's own start, all of them). The dynamic array is one region (see ``__init__``)."""

    def __init__(self, ops: list[Operation], arrays: bool = True) -> None:
        """``arrays`` False: shared memory is one region (every address may be anywhere)."""
        static = [op.sym_name.data for op in ops if arrays and type(op) is ptx.SharedDeclOp]  # type: ignore[attr-defined]
        dynamic = [op.sym_name.data for op in ops if arrays and type(op) is ptx.DynamicSharedDeclOp]  # type: ignore[attr-defined]
        names = static + dynamic[:1]  # every dynamic array is the same memory: one array
        # the dynamic array stays one region: telling its buffers apart let 4 barriers of the
        # attention backward's dK/dV kernel at head dim 256 go, and ptxas's schedule without
        # them spills on sm_80 (its register budget was tuned with them): a follow-up
        marks = [w for op in ops if (w := ptx.within_of(op)) is not None and w[0] in static]
        self._cuts = {name: sorted({0, *(b for m in marks if m[0] == name for b in m[1:])}) for name in names}
        self._first: dict[str, int] = {}  # per array: the region index of its first segment
        count = 1  # region 0: global memory
        for name in names:
            self._first[name] = count
            count += len(self._cuts[name])  # the last segment runs from the last cut to the end
        self.count = count + 1  # and the unknown
        self.everything = (1 << (2 * self.count)) - 1
        self.reads = self.everything // 3  # 0b0101...: the read bit of every region
        self.shared = self.reads - GLOBAL_READ  # of every shared region
        self._bit = {name: self._segments(name, 0, None) for name in names}
        self._bit |= {name: self._bit[dynamic[0]] for name in dynamic}
        self._origin = self._trace(ops) if names else {}
        self.copied = 0  # the regions cp.async writes: what a wait may land
        self.multiplied = 0  # the regions wgmma reads: what a wgmma wait may still see read
        for op in ops:
            if type(op) is ptx.CpAsyncOp:
                self.copied |= self.of(op, op.srcs[0])  # type: ignore[attr-defined]
            elif type(op) is WgmmaMmaAsyncOp:
                self.multiplied |= self.wgmma_reads(op)

    def wgmma_reads(self, op: Operation) -> int:
        """The read bits of the shared regions a ``wgmma.mma_async`` reads: those its B
        descriptor, and A's when A is one (64 bits; else A is four registers), are traced to
        (a descriptor holds its matrix's address, shifted and masked: the trace follows it)."""
        srcs = op.srcs  # type: ignore[attr-defined]
        descriptors = [srcs[-2], *([srcs[-3]] if srcs[-3].type == i64 else [])]
        reads = 0
        for d in descriptors:
            reads |= self.of(op, d)
        return reads

    def _segments(self, name: str, lo: int, hi: int | None) -> int:
        """The read bits of the segments of array ``name`` that bytes [lo, hi) touch (hi None:
        to the end)."""
        cuts, first, bits = self._cuts[name], self._first[name], 0
        for i, start in enumerate(cuts):
            end = cuts[i + 1] if i + 1 < len(cuts) else None
            if (hi is None or start < hi) and (end is None or lo < end):
                bits |= 1 << (2 * (first + i))
        return bits

    def _trace(self, ops: list[Operation]) -> dict[int, int | None]:
        """Per register (by ``id``: xDSL's value hash is slow), the read bits of the arrays its value may point into (absent or 0:
        none, an integer; None: unknown). One walk in program order settles every SSA value
        (defined before its uses); the walk repeats only while a ``mov`` into a ``ptx.reg``
        (loop-carried, read before it is assigned) still widens what that register holds."""
        origin: dict[int, int | None] = {}
        get = origin.get
        steps = [op for op in ops if op.results and type(op) not in (ptx.RegOp, ptx.ConstOp) or type(op) is ptx.AssignOp]
        changed = True
        while changed:
            changed = False
            for op in steps:
                cls = type(op)
                if cls is ptx.AssignOp:
                    dst, src = (id(v) for v in op.srcs)  # type: ignore[attr-defined]
                    value = _join(get(dst, 0), get(src, 0))
                    if value != get(dst, 0):
                        origin[dst] = value
                        changed = True
                    continue
                if "within" in op.properties and (w := ptx.within_of(op))[0] in self._cuts:  # type: ignore[index]
                    value = self._segments(*w)  # type: ignore[misc]  # a buffer's start: its bytes alone
                elif cls is ptx.MovOp and "symbol" in op.properties:
                    value = self._bit.get(op.symbol.data, 0)  # type: ignore[attr-defined]  # (a special register: an integer)
                elif cls is ptx.LdOp and "param" in op.mods:  # type: ignore[attr-defined]
                    value = 0
                elif cls in _TOUCH_NOTHING or cls in PURE_OPS:
                    value = 0
                    for src in op.operands:
                        value = _join(value, get(id(src), 0))
                else:
                    value = None  # loaded, exchanged: anything
                if value != 0 or get(id(op.results[0]), 0) != 0:
                    for result in op.results:
                        origin[id(result)] = value
        return origin

    def of(self, op: Operation, address: SSAValue | None) -> int:
        """The read bits of the shared regions ``op`` may touch at ``address`` (or its symbol)."""
        if "symbol" in op.properties:
            bit = self._bit.get(op.symbol.data)  # type: ignore[attr-defined]
            return bit if bit is not None else self.shared
        origin = self._origin.get(id(address), 0) if address is not None else None
        return origin or self.shared


def _join(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a | b


def _space(op: Operation, regions: _Regions) -> int:
    """The read bits of what ``op`` addresses: its shared arrays, global memory, both for a
    generic address, nothing for param, const and local; the write bits are twice these."""
    mods = op.mods  # type: ignore[attr-defined]
    address = op.srcs[0] if op.srcs else None  # type: ignore[attr-defined]
    if any(m.startswith("shared") for m in mods):
        return regions.of(op, address)
    if "global" in mods:
        return GLOBAL_READ
    if any(m in ("param", "const", "local") for m in mods):
        return 0
    return regions.shared | GLOBAL_READ


def _effects(op: Operation, regions: _Regions) -> tuple[int, int]:
    """What ``op`` does as seen from a later barrier and from an earlier one."""
    cls = type(op)
    if cls in _TOUCH_NOTHING or not is_instr(cls) or cls in _END:
        return 0, 0
    if _cta_barrier(op):
        return _BARRIER, _BARRIER
    if cls is ptx.LdOp or cls is ptx.LdIntoOp or cls is ptx.LdmatrixOp:
        return (_space(op, regions),) * 2
    if cls is ptx.StOp:
        return (_space(op, regions) << 1,) * 2
    if cls is ptx.AtomOp or cls is ptx.RedOp:
        return (_space(op, regions) * 3,) * 2
    if cls is ptx.CpAsyncOp:
        return GLOBAL_READ, GLOBAL_READ | regions.of(op, op.srcs[0]) << 1  # type: ignore[attr-defined]
    if cls is ptx.CpAsyncWaitGroupOp or cls is ptx.CpAsyncWaitAllOp:
        return (regions.copied << 1,) * 2
    if cls is WgmmaMmaAsyncOp:  # its operand reads, from its issue on
        return (regions.wgmma_reads(op),) * 2
    if cls is WgmmaWaitOp:  # until a wait, issued reads may still be reading: they end here
        return (regions.multiplied,) * 2
    if cls in (WgmmaFenceOp, WgmmaCommitOp, FenceProxyAsyncOp):
        # register and proxy ordering of the thread's own accesses: no access of their own
        return 0, 0
    return regions.everything, regions.everything


@dataclass
class _Block:
    ops: list[int]  # indices into the entry's instructions
    succs: list[int]
    preds: list[int]


def _blocks(ops: list[Operation]) -> list[_Block]:
    """The entry's basic blocks: a label starts one, a branch, ``ret`` or ``exit`` ends one."""
    starts, label_block = [0], {}
    for i, op in enumerate(ops):
        cls = type(op)
        if cls is ptx.LabelOp and i:
            starts.append(i)
        elif (cls is ptx.BraOp or cls in _END) and i + 1 < len(ops):
            starts.append(i + 1)
    starts = sorted(set(starts))
    blocks = [_Block(list(range(a, b)), [], []) for a, b in zip(starts, [*starts[1:], len(ops)], strict=True)]
    for n, block in enumerate(blocks):
        for i in block.ops:
            if type(ops[i]) is ptx.LabelOp:
                label_block[ops[i].sym_name.data] = n  # type: ignore[attr-defined]
    for n, block in enumerate(blocks):
        last = ops[block.ops[-1]] if block.ops else None
        cls, guarded = type(last), last is not None and "guard" in last.properties
        if cls is ptx.BraOp:
            block.succs.append(label_block[last.symbol.data])  # type: ignore[union-attr]
        if n + 1 < len(blocks) and (cls not in (ptx.BraOp, *_END) or guarded):
            block.succs.append(n + 1)
    for n, block in enumerate(blocks):
        for s in block.succs:
            blocks[s].preds.append(n)
    return blocks


def _intervals(blocks: list[_Block], effect: list[int], forward: bool) -> dict[int, int]:
    """Per CTA barrier (by index), the union of the effects on every path from the previous
    barrier or the kernel's start (``forward``), or to the next barrier or an exit."""
    at_barrier: dict[int, int] = {}
    edge = [0] * len(blocks)  # per block: what leaves it (forward) or enters it (backward)
    order = range(len(blocks)) if forward else range(len(blocks) - 1, -1, -1)
    changed = True
    while changed:
        changed = False
        for n in order:
            block = blocks[n]
            state = 0
            for m in block.preds if forward else block.succs:
                state |= edge[m]
            for i in block.ops if forward else reversed(block.ops):
                e = effect[i]
                if e == _BARRIER:
                    at_barrier[i] = state
                    state = 0
                else:
                    state |= e
            if state != edge[n]:
                edge[n] = state
                changed = True
    return at_barrier


def _loop_depth(ops: list[Operation]) -> list[int]:
    """How many loops (a label and a branch back to it) hold each instruction."""
    position = {op.sym_name.data: i for i, op in enumerate(ops) if type(op) is ptx.LabelOp}  # type: ignore[attr-defined]
    delta = [0] * (len(ops) + 1)
    for i, op in enumerate(ops):
        if type(op) is ptx.BraOp and position.get(op.symbol.data, i + 1) <= i:  # type: ignore[attr-defined]
            delta[position[op.symbol.data]] += 1  # type: ignore[attr-defined]
            delta[i + 1] -= 1
    depth, level = [], 0
    for d in delta[:-1]:
        level += d
        depth.append(level)
    return depth


def redundant_barriers(ops: list[Operation], gone: set[int] = frozenset()) -> list[Operation]:  # type: ignore[assignment]
    """The CTA barriers of ``ops`` that order no conflicting pair of accesses, with the ops
    whose ids are in ``gone`` taken as deleted. Each removal changes the intervals around the
    others, so they go one at a time, the most deeply nested (then the latest) first: first
    those that go with all of shared memory one region, then those the arrays let go. (Of two
    barriers either of which may go, which one stays moves ptxas's schedule: the first round
    keeps the choices made before arrays were told apart, which the kernels' spill-free
    register budgets were tuned on.)"""
    if not any(_cta_barrier(op) for op in ops):
        return []
    blocks, depth = _blocks(ops), _loop_depth(ops)
    arrays = _Regions(ops)
    dead: list[int] = []
    # with fewer than two arrays, telling them apart lets nothing more go
    for regions in (_Regions(ops, arrays=False), arrays) if arrays.count > 3 else (arrays,):
        pairs = [((0, 0) if id(op) in gone or i in dead else _effects(op, regions)) for i, op in enumerate(ops)]
        for i, pending in _pending_wgmma_reads(ops, blocks, regions, gone).items():
            pairs[i] = (pending, pending)  # a wgmma wait: the reads still pending on some path to it
        dead += _removable(blocks, depth, [p[0] for p in pairs], [p[1] for p in pairs], regions.reads)
    return [ops[i] for i in sorted(dead)]


def _pending_wgmma_reads(ops: list[Operation], blocks: list[_Block], regions: _Regions, gone: set[int]) -> dict[int, int]:
    """Per ``wgmma.wait_group`` (by index), the regions of the wgmmas that may still be reading
    when it is reached: issued on some path since an unguarded ``wait_group 0`` (which retires
    every one) or the kernel's start. A wait with a count retires none for sure."""
    out = [0] * len(blocks)
    at: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for n, block in enumerate(blocks):
            state = 0
            for m in block.preds:
                state |= out[m]
            for i in block.ops:
                op = ops[i]
                if id(op) in gone:
                    continue
                if type(op) is WgmmaMmaAsyncOp:
                    state |= regions.wgmma_reads(op)
                elif type(op) is WgmmaWaitOp:
                    at[i] = state
                    if const_int(op.srcs[0]) == 0 and "guard" not in op.properties:  # type: ignore[attr-defined]
                        state = 0
            if state != out[n]:
                out[n] = state
                changed = True
    return at


def _removable(blocks: list[_Block], depth: list[int], before_effect: list[int], after_effect: list[int],
               reads: int) -> list[int]:  # fmt: skip
    """The barriers (by index) that go, one at a time, given each op's effects."""
    dead: list[int] = []
    while True:
        before = _intervals(blocks, before_effect, forward=True)
        after = _intervals(blocks, after_effect, forward=False)
        free = [i for i in before if not conflict(before[i], after.get(i, 0), reads)]
        if not free:
            return dead
        i = max(free, key=lambda i: (depth[i], i))
        before_effect[i] = after_effect[i] = 0
        dead.append(i)


# -- proxy fences -----------------------------------------------------------------------------

_QUIET, _FENCE, _DIRTY = 0, 1, 2
# async-proxy instructions that make no generic access (a wgmma reads shared memory through the
# async proxy, its accumulators are registers)
_NO_GENERIC_ACCESS = _TOUCH_NOTHING | {WgmmaFenceOp, WgmmaMmaAsyncOp, WgmmaCommitOp, WgmmaWaitOp}


def _fences_shared(op: Operation) -> bool:
    """An unguarded proxy fence that covers shared memory (plain, .shared::cta, .shared::cluster)."""
    return (type(op) is FenceProxyAsyncOp and "guard" not in op.properties
            and "global" not in op.mods)  # type: ignore[attr-defined]  # fmt: skip


def _fence_kind(op: Operation) -> int:
    """How ``op`` bears on a later proxy fence: a fence of shared memory, nothing, or a generic
    shared access or synchronisation the fence must come after."""
    cls = type(op)
    if _fences_shared(op):
        return _FENCE
    if cls in _NO_GENERIC_ACCESS or cls in _END or not is_instr(cls) or cls is FenceProxyAsyncOp:
        return _QUIET
    if cls in (ptx.LdOp, ptx.LdIntoOp, ptx.StOp, ptx.AtomOp, ptx.RedOp):
        mods = op.mods  # type: ignore[attr-defined]
        shared = any(m.startswith("shared") for m in mods)
        if not shared and any(m in ("global", "param", "const", "local") for m in mods):
            return _QUIET
    return _DIRTY


def redundant_fences(ops: list[Operation], gone: set[int] = frozenset()) -> list[Operation]:  # type: ignore[assignment]
    """The ``fence.proxy.async.shared::cta`` of ``ops`` that an earlier fence already covers on
    every path (see the module doc), with the ops whose ids are in ``gone`` taken as deleted."""
    if not any(type(op) is FenceProxyAsyncOp for op in ops):
        return []
    kind = [_QUIET if id(op) in gone else _fence_kind(op) for op in ops]
    blocks = _blocks(ops)
    fenced_out = [True] * len(blocks)  # the greatest fixpoint: a path with no fence clears it

    def entry_state(n: int) -> bool:
        preds = blocks[n].preds
        return n != 0 and bool(preds) and all(fenced_out[m] for m in preds)

    changed = True
    while changed:
        changed = False
        for n, block in enumerate(blocks):
            state = entry_state(n)
            for i in block.ops:
                state = True if kind[i] == _FENCE else False if kind[i] == _DIRTY else state
            if state != fenced_out[n]:
                fenced_out[n] = state
                changed = True
    dead = []
    for n, block in enumerate(blocks):
        state = entry_state(n)
        for i in block.ops:
            if kind[i] == _FENCE and state and tuple(ops[i].mods) == ("shared::cta",):  # type: ignore[attr-defined]
                dead.append(ops[i])
            state = True if kind[i] == _FENCE else False if kind[i] == _DIRTY else state
    return dead
