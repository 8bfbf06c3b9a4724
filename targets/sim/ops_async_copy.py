"""cp.async (global -> shared copies of 4, 8 or 16 bytes), cp.async.commit_group,
cp.async.wait_group N and cp.async.wait_all.

The model makes pipelining bugs visible instead of lucky:

* a copy reads global memory when it is issued (so bounds errors name the cp.async line), and
  queues its bytes in the issuing thread's current, not yet committed group;
* ``commit_group`` closes that group (an empty group is a group too);
* the bytes land in shared memory only when a wait of the *issuing thread* releases their group:
  ``wait_group N`` lands every group of the thread but the N most recently committed ones,
  ``wait_all`` commits and lands everything. A kernel that reads the tile before the wait sees
  the old contents, or, with the uninitialized-shared check, gets an error. A thread that exits
  with copies not waited for is an error (``executor.py``): the ISA completes a copy only at its
  thread's wait;
* two copies of one thread in flight to overlapping bytes are an error at the second one's
  issue: the ISA orders a copy's loads and stores among themselves only, not with another
  cp.async of the same thread ("Memory Consistency Model", "Asynchronous Operations"), so which
  lands last is undefined until a wait lands the first (a missing drain between two pipelined
  loops that fill the same ring stage).

``src-size`` (fewer bytes read, the rest of the cp-size zero-filled) and the ``ignore-src``
predicate (read nothing, fill zeros) are supported; a thread that reads no byte is not
bounds-checked on its source, since it touches no global memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .context import ExecContext
from .faults import DecodeError, SimFault, first_fault
from .memory import GLOBAL_BASE
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_memory import SPACE_NAMES
from .program import Behaviour, Idx
from .ptx_types import PTX_TYPES
from .spaces import locate, mark_shared_written
from .syntax import ImmOperand, Instruction, NegPredOperand, RegOperand

_U32 = PTX_TYPES["u32"]
_PRED = PTX_TYPES["pred"]
_SIZES = {"ca": (4, 8, 16), "cg": (16,)}


@dataclass
class _Pending:
    """The copies one cp.async instruction queued for some threads (issue order is kept)."""

    threads: np.ndarray  # int64 batch thread indices
    group: np.ndarray  # int64: the group each copy belongs to (its thread's commit count at issue)
    offsets: np.ndarray  # int64 byte offsets into ctx.shared
    data: np.ndarray  # uint8 (threads, cp-size): the bytes to land, zero-filled past src-size
    pc: int = 0  # the cp.async instruction (race_check and the async proxy name it)


class AsyncCopies:
    """One batch's queued copies and every thread's count of committed groups."""

    def __init__(self, n: int):
        self.committed = np.zeros(n, dtype=np.int64)
        self.pending: list[_Pending] = []

    def issue(self, ctx: ExecContext, threads: np.ndarray, offsets: np.ndarray, data: np.ndarray, pc: int = 0) -> None:
        if self.pending:
            self._check_no_overlap(ctx, threads, offsets, data.shape[1])
        self.pending.append(_Pending(threads, self.committed[threads], offsets, data, pc))

    def _check_no_overlap(self, ctx: ExecContext, threads: np.ndarray, offsets: np.ndarray, size: int) -> None:
        """No copy in flight of the same thread writes any of the bytes this one does."""
        at = np.full(ctx.n, -1, dtype=np.int64)  # per batch thread: this copy's first byte
        at[threads] = offsets
        for p in self.pending:
            mine = at[p.threads]
            clash = (mine >= 0) & (mine < p.offsets + p.data.shape[1]) & (p.offsets < mine + size)
            if clash.any():
                k = int(np.flatnonzero(clash)[0])
                line = ctx.entry.ops[p.pc].line
                raise SimFault(
                    "sim",
                    f"cp.async writes shared bytes that a cp.async of PTX line {line} by the same thread, still "
                    "in flight, writes too: the ISA does not order two copies, so which lands last is undefined; "
                    "wait for the first (cp.async.wait_group) before issuing the second",
                    int(p.threads[k]),
                    extra={"other_ptx_line": line},
                )

    def commit(self, idx: Idx) -> None:
        if idx is None:
            self.committed += 1
        else:
            self.committed[idx] += 1

    def land(self, ctx: ExecContext, idx: Idx, keep: int) -> None:
        """Write to shared memory every queued copy of the threads ``idx`` whose group is older
        than their ``keep`` most recent committed groups; in issue order, so a later copy to the
        same bytes wins."""
        if not self.pending:
            return
        limit = self.committed - keep
        if idx is not None:
            waiting = np.zeros(ctx.n, dtype=bool)
            waiting[idx] = True
        remaining: list[_Pending] = []
        for p in self.pending:
            due = p.group < limit[p.threads]
            if idx is not None:
                due &= waiting[p.threads]
            if due.any():
                offsets, data = p.offsets[due], p.data[due]
                if ctx.race is not None:
                    ctx.race.land_copy(p.threads[due], offsets, data.shape[1], p.pc)
                if ctx.async_proxy is not None:  # cp.async writes through the generic proxy, at landing
                    ctx.async_proxy.generic_write(ctx, p.threads[due], offsets, data.shape[1], p.pc)
                ctx.shared[offsets[:, None] + np.arange(data.shape[1])] = data
                for start in range(0, data.shape[1], 4):
                    mark_shared_written(ctx, offsets + start, 4)
                if not due.all():
                    keep_mask = ~due
                    remaining.append(_Pending(p.threads[keep_mask], p.group[keep_mask], p.offsets[keep_mask], p.data[keep_mask], p.pc))
            else:
                remaining.append(p)
        self.pending = remaining


def async_copies(ctx: ExecContext) -> AsyncCopies:
    state = ctx.async_copies
    if state is None:
        state = ctx.async_copies = AsyncCopies(ctx.n)
    return state


def _copy(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    level = mods.require("ca", "cg")
    spaces = [m for m in mods.items if m in SPACE_NAMES]
    if [SPACE_NAMES[m] for m in spaces] != ["shared", "global"]:
        raise DecodeError(f"{ins.opcode}: cp.async copies .global to .shared (written .shared.global)")
    mods.items = [m for m in mods.items if m not in spaces]
    has_policy = "L2::cache_hint" in mods.items
    mods.drop_memory_hints()
    ops = operands(ins, (3, 4, 5))
    if has_policy:
        ops = ops[:-1]  # the cache policy: a hint
    if len(ops) not in (3, 4):
        raise DecodeError(f"{ins.opcode} takes [dst], [src], cp-size and an optional src-size or ignore-src")
    size_op = ops[2]
    if not isinstance(size_op, ImmOperand) or size_op.kind != "int" or int(size_op.value) not in _SIZES[level]:
        raise DecodeError(f"{ins.opcode}: cp-size must be one of {', '.join(map(str, _SIZES[level]))} for .{level}")
    size = int(size_op.value)
    dst = dc.address(ops[0], "shared")
    src = dc.address(ops[1], "global")
    if len(ops) == 4 and isinstance(ops[3], ImmOperand) and int(ops[3].value) > size:
        raise DecodeError(f"{ins.opcode}: src-size {ops[3].value} exceeds cp-size {size}")
    src_size = _src_size_reader(dc, ops[3], size) if len(ops) == 4 else None
    columns = np.arange(size, dtype=np.int64)

    def run(ctx: ExecContext, idx: Idx) -> None:
        m = ctx.n if idx is None else idx.size
        threads = ctx.thread_index if idx is None else idx
        d_addr = np.broadcast_to(np.asarray(dst(ctx, idx), dtype=np.uint64), (m,))
        offsets = np.broadcast_to(locate(ctx, "shared", idx, d_addr, size, size, "cp.async write"), (m,))
        s_addr = np.broadcast_to(np.asarray(src(ctx, idx), dtype=np.uint64), (m,))
        n_read = np.full(m, size, dtype=np.int64) if src_size is None else np.broadcast_to(src_size(ctx, idx), (m,)).astype(np.int64)
        if (n_read > size).any():
            raise first_fault(n_read > size, idx, "sim", f"cp.async src-size {int(n_read[n_read > size][0])} exceeds cp-size {size}")
        data = np.zeros((m, size), dtype=np.uint8)
        reads = n_read > 0
        if reads.any():
            _check_source(ctx, idx, s_addr, n_read, size)
            start = (s_addr - np.uint64(GLOBAL_BASE)).astype(np.int64)
            inside = columns < n_read[:, None]
            arena = ctx.memory.view(1)
            data[inside] = arena[(start[:, None] + columns)[inside]]
        if ctx.profiler is not None:
            ctx.profiler.global_access(ctx, idx, s_addr, n_read)
            ctx.profiler.shared_access(ctx, idx, d_addr, size)
        if ctx.race is not None:
            ctx.race.issue_copy(threads, offsets, size)
        async_copies(ctx).issue(ctx, np.array(threads), np.array(offsets), data, ctx.pc)

    return Behaviour(run=run, klass="cp.async", shared_access=size)


def _src_size_reader(dc: DecodeContext, op: Any, size: int) -> Any:
    """src-size (bytes to read) from a u32 operand, or from an ignore-src predicate."""
    op = dc.as_register(op)
    is_pred = isinstance(op, NegPredOperand) or (
        isinstance(op, RegOperand) and dc.has_register(op.name) and dc.register_types[dc.slot(op.name)] == np.dtype(np.bool_)
    )
    if is_pred:
        ignore = dc.reader(op, _PRED)
        return lambda ctx, idx: np.where(np.asarray(ignore(ctx, idx)), 0, size)
    return dc.reader(op, _U32)


def _check_source(ctx: ExecContext, idx: Idx, addr: np.ndarray, n_read: np.ndarray, size: int) -> None:
    """Alignment (cp-size) and bounds (src-size bytes) of the threads that read anything."""
    reads = n_read > 0
    misaligned = reads & ((addr & np.uint64(size - 1)) != 0)
    if misaligned.any():
        raise first_fault(misaligned, idx, "memory", f"misaligned cp.async global read ({size} bytes, needs {size}-byte alignment)", addr)
    outside = np.zeros(addr.shape, dtype=bool)
    for nbytes in np.unique(n_read[reads]):
        group = n_read == nbytes
        oob = ctx.memory.out_of_bounds(addr[group], int(nbytes))
        if oob is not None:
            outside[np.flatnonzero(group)[oob]] = True
    if outside.any():
        raise first_fault(outside, idx, "memory", "out-of-bounds cp.async global read", addr)


def _commit(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    operands(ins, 0)
    return Behaviour(run=lambda ctx, idx: async_copies(ctx).commit(idx), klass="cp.async.commit_group")


def _wait_group(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    (n_op,) = operands(ins, 1)
    if not isinstance(n_op, ImmOperand) or n_op.kind != "int" or int(n_op.value) < 0:
        raise DecodeError(f"{ins.opcode} needs a non-negative integer constant")
    keep = int(n_op.value)
    return Behaviour(run=lambda ctx, idx: async_copies(ctx).land(ctx, idx, keep), klass="cp.async.wait_group")


def _wait_all(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    operands(ins, 0)

    def run(ctx: ExecContext, idx: Idx) -> None:
        state = async_copies(ctx)
        state.commit(idx)
        state.land(ctx, idx, 0)

    return Behaviour(run=run, klass="cp.async.wait_all")


_FORMS = {"commit_group": _commit, "wait_group": _wait_group, "wait_all": _wait_all}


def make_cp(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    if not mods.flag("async"):
        raise DecodeError(f"unsupported instruction {ins.opcode}: only cp.async is supported")
    if mods.flag("bulk"):
        from .ops_bulk_copy import make_bulk  # the TMA forms: a module of their own

        return make_bulk(ins, mods, dc)
    form = mods.take(*_FORMS)
    if form is not None:
        return _FORMS[form](ins, mods, dc)
    if mods.take("mbarrier") is not None:
        raise DecodeError(f"unsupported instruction {ins.opcode}: cp.async.mbarrier.arrive is not supported")
    return _copy(ins, mods, dc)


TABLE = {("cp", "*"): make_cp}
