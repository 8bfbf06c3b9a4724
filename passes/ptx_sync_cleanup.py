"""``ptx-sync-cleanup``: drop the ``cp.async.wait_group`` and ``bar.sync`` instructions that
order nothing, in straight-line code.

Lowerings emit their synchronisation locally: each buffer that takes a dead buffer's bytes
waits for the copies in flight and adds a barrier before its first write (``shared_reuse``), a
pipelined loop drains its ring when it ends. Side by side these repeat each other: three
reusing buffers give three wait-and-barrier pairs where the first orders everything, and a
drain is followed by a reuse's wait. The synchronisation-mutant campaign
(``kaio.tools.sync_mutants``) finds them as survivors: deleting one changes nothing. Here, in
each run of instructions with no label between (so every instruction in it runs after the
ones before it, on every path):

* a ``cp.async.wait_group N`` is dropped when at most N committed groups can be pending: the
  run counts the ``cp.async.commit_group`` since its last wait (a wait lands only committed
  groups, so copies issued but not committed do not count);
* a CTA-wide ``bar.sync 0`` (no thread count, unguarded) is dropped when an earlier one in the
  run has been followed only by instructions that touch no memory (arithmetic, moves,
  branches, register-only ``mma``), ``cp.async`` issues and commits (their writes are ordered
  by the wait and barrier that land them, their reads of the source by the earlier barrier),
  and waits that land nothing.

Anything else between two barriers (a load or store in any space: a barrier orders global
memory too; ``ldmatrix``; a wait that may land copies; an mbarrier, fence or wgmma operation;
a guarded instruction) keeps the second. A label starts a run with nothing known.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from kaio.dialects import ptx
from kaio.pass_contracts import PassContract
from kaio.passes.ptx_scalar import PURE_OPS, block_ops, const_int, entries, is_instr

# instructions that read and write registers only (a barrier between them and the next is moot)
_REGISTER_ONLY = PURE_OPS | {ptx.AssignOp, ptx.RegOp, ptx.ConstOp, ptx.BraOp, ptx.MmaOp}


@dataclass(frozen=True)
class PtxSyncCleanupPass(ModulePass):
    contract = PassContract(after=("lower-to-ptx",))
    name = "ptx-sync-cleanup"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for entry in entries(op):
            for dead in redundant_syncs(block_ops(entry.body.block)):
                dead.detach()
                dead.erase()


def _cta_barrier(op: Operation) -> bool:
    """``bar.sync 0`` with no thread count and no guard: every thread of the CTA."""
    return (type(op) is ptx.BarSyncOp and "guard" not in op.properties and len(op.srcs) == 1  # type: ignore[attr-defined]
            and const_int(op.srcs[0]) == 0)  # type: ignore[attr-defined]  # fmt: skip


@dataclass(frozen=True)
class _State:
    """What is known at a point: how many committed groups may be in flight (None: any), and
    whether a CTA barrier came on every path here with nothing it must order since."""

    pending: int | None
    barrier_open: bool

    def merge(self, other: _State | None) -> _State:
        if other is None:
            return self
        pending = None if self.pending is None or other.pending is None else max(self.pending, other.pending)
        return _State(pending, self.barrier_open and other.barrier_open)


_UNKNOWN = _State(None, False)


def redundant_syncs(ops: list[Operation]) -> list[Operation]:
    """The waits and barriers of ``ops`` (an entry's instructions, in order) that order nothing.

    One forward walk: a label's state merges the fall-through's with that of every branch to it
    from above (a local if/else, a zero-fill diamond); a label some branch reaches from below (a
    loop's head) starts from nothing known."""
    position = {op.sym_name.data: i for i, op in enumerate(ops) if type(op) is ptx.LabelOp}  # type: ignore[attr-defined]
    loop_heads = {op.symbol.data for i, op in enumerate(ops)  # type: ignore[attr-defined]
                  if type(op) is ptx.BraOp and position.get(op.symbol.data, -1) <= i}  # type: ignore[attr-defined]  # fmt: skip
    incoming: dict[str, _State] = {}  # label -> the merge of the branches to it seen so far
    dead: list[Operation] = []
    state: _State | None = _State(0, False)  # None: unreachable (after an unconditional branch)
    for op in ops:
        cls = type(op)
        if cls is ptx.LabelOp:
            name = op.sym_name.data  # type: ignore[attr-defined]
            arrived = incoming.pop(name, None)
            state = _UNKNOWN if name in loop_heads else (arrived if state is None else state.merge(arrived)) or _UNKNOWN
            continue
        if state is None:
            continue  # unreachable until a label
        if cls is ptx.BraOp:
            target = op.symbol.data  # type: ignore[attr-defined]
            if target not in loop_heads:
                incoming[target] = state.merge(incoming.get(target))
            if "guard" not in op.properties:
                state = None
            continue
        state, drop = _step(op, state)
        if drop:
            dead.append(op)
    return dead


def _step(op: Operation, state: _State) -> tuple[_State, bool]:
    """The state after ``op``, and whether ``op`` orders nothing (may go)."""
    cls, guarded = type(op), "guard" in op.properties
    if cls is ptx.CpAsyncCommitOp:
        return _State(None if state.pending is None else state.pending + 1, state.barrier_open), False
    if cls is ptx.CpAsyncOp and not guarded:
        return state, False  # ordered by the wait and barrier that land it
    if cls is ptx.CpAsyncWaitGroupOp and not guarded:
        keep = const_int(op.srcs[0])  # type: ignore[attr-defined]
        if keep is not None and state.pending is not None and state.pending <= keep:
            return state, True  # nothing it could land
        return _State(keep, False), False  # it may land copies: a barrier after it publishes them
    if _cta_barrier(op):
        return _State(state.pending, True), state.barrier_open
    if (cls in _REGISTER_ONLY and not guarded) or (not is_instr(cls) and cls is not ptx.LabelOp):
        return state, False  # no memory touched (or not an instruction: a declaration, a comment)
    return _State(0 if cls is ptx.CpAsyncWaitAllOp else state.pending, False), False
