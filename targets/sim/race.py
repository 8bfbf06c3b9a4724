"""Opt-in race detection on shared memory (``Simulator(race_check=True)``), like
compute-sanitizer's racecheck.

Time is cut into *epochs* per CTA: every release of a CTA-wide barrier (``bar.sync``,
``barrier.sync``, ``bar.red``; a counted barrier only when its count covers the whole CTA) starts
a new one. Two accesses to one shared byte by different threads of a CTA race when they fall in
the same epoch and at least one writes: read-after-write, write-after-write, write-after-read.
Atomics (``atom``/``red``) count as writes, but do not race with each other.
``cp.async`` writes its bytes when the issuing thread's wait lands them (checked and recorded
there, with the ``cp.async`` line as the writer), and is also checked when it is issued: between
issue and landing its bytes are *in flight*, and any access to them by another thread races
with it (the hardware may land the copy at any moment in between). ``ldmatrix`` reads each
16-byte row on behalf of the lane that supplied the row's address.

Per CTA batch the checker keeps a record of 13 int32 fields per shared byte (``state``): the
writers of the byte in its epoch (one plain writer, or up to two atomic writers: two distinct
ones are enough to name "another thread" for any accessor), how they wrote (atomics only, a
store, a landed cp.async), two distinct readers, the epochs of both sets, the thread whose
cp.async is in flight, and the PC of each for the message. Every shared access gathers the
records of its bytes, compares them with numpy and scatters them back: a few dozen array
operations per shared instruction, none per other instruction.

Within one instruction the threads run in increasing thread order (as stores and atomics do), so
two threads of one ``st.shared`` writing one byte race, and the reported access is the one of the
lowest-numbered thread that has a hazard: the first hazard in execution order, deterministically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .faults import SimFault
from .program import Idx

if TYPE_CHECKING:
    from .context import ExecContext

NONE = -1
# the fields of a byte's record, the columns of RaceChecker.state
W1, W1PC, W2, W2PC, WEPOCH, WHOW, R1, R1PC, R2, R2PC, REPOCH, F, FPC = range(13)
FIELDS = 13
BYTES_PER_SHARED_BYTE = 4 * (FIELDS + 1)  # a record and a scratch word, int32 each
ATOMIC, PLAIN, COPY = 0, 1, 2  # WHOW: atomics only; a plain store; a landed cp.async
_WRITE_KINDS = {ATOMIC: "atomic", PLAIN: "write", COPY: "cp.async write (landed at its wait)"}
_RECORD = np.dtype((np.void, 4 * FIELDS))
_BYTES = np.arange(64, dtype=np.int64)  # byte offsets within one access


class RaceChecker:
    """One batch's race-detection state. ``pc`` is the instruction running now (the executor
    sets it before each step); ``barrier`` starts a new epoch for CTAs."""

    def __init__(self, ctx: ExecContext):
        # no reference to ctx itself (ctx holds the checker: a cycle would keep a whole batch
        # alive until the garbage collector runs)
        self.threads = ctx.thread_index
        self.cta_threads = ctx.cta_threads
        self.geometry = ctx.geometry
        self.ops = ctx.entry.ops
        self.stride = ctx.shared_stride
        size = ctx.shared.size
        # one record of FIELDS int32 per shared byte, gathered and scattered as a whole
        self.state = np.full((size, FIELDS), NONE, dtype=np.int32)
        self.records = self.state.view(_RECORD).reshape(size)
        self.scratch = np.empty(size, dtype=np.int32)
        self.epoch = np.zeros(ctx.n_ctas, dtype=np.int32)
        self.pc = 0

    def barrier(self, ctas: np.ndarray | None = None) -> None:
        if ctas is None:
            self.epoch += 1
        else:
            self.epoch[ctas] += 1

    # --- the accesses ---------------------------------------------------------------------------

    def read(self, idx: Idx, offsets: np.ndarray, nbytes: int) -> None:
        """A plain read (``ld``, ``ldmatrix`` rows) of ``nbytes`` at each byte offset into
        ``ctx.shared``, by the threads ``idx``."""
        t, b, st, epoch = self._gather(idx, offsets, nbytes)
        c = st.T  # c[FIELD]: that field of every accessed byte (a view: writes go to st)
        raw = (c[WEPOCH] == epoch) & (_other(c, W1, W2, t) >= 0)
        flight = (c[F] >= 0) & (c[F] != t)
        if (raw | flight).any():
            raise self._fault("read", t, b, c, [(raw, "writer", W1), (flight, "cp.async", F)])
        tmin, tmax = self._spread(t, b)
        self._add(c, c[REPOCH] == epoch, R1, R2, tmin, tmax)
        c[REPOCH] = epoch
        self.records[b] = st.view(_RECORD).reshape(-1)

    def write(self, idx: Idx, offsets: np.ndarray, nbytes: int, values: Callable[[], np.ndarray] | None = None) -> None:
        """A plain write (``st``). ``values`` gives the stored bytes, (threads, nbytes) uint8:
        threads of this instruction storing the same value to a byte do not race (Triton has
        every lane of a warp store the warp's result)."""
        t, b, st, epoch = self._gather(idx, offsets, nbytes)
        self._check_write(t, b, st.T, epoch, "write", values)
        self._record_write(b, t, st, epoch, self.pc, PLAIN)

    def atomic(self, idx: Idx, offsets: np.ndarray, nbytes: int) -> None:
        """``atom``/``red``: a write that does not race with other atomics."""
        t, b, st, epoch = self._gather(idx, offsets, nbytes)
        c = st.T
        live = c[WEPOCH] == epoch
        waw = live & (_other(c, W1, W2, t) >= 0) & (c[WHOW] != ATOMIC)  # a plain write by another thread
        war = (c[REPOCH] == epoch) & (_other(c, R1, R2, t) >= 0)
        flight = (c[F] >= 0) & (c[F] != t)
        if (waw | war | flight).any():
            raise self._fault("atomic", t, b, c, [(waw, "writer", W1), (war, "read", R1), (flight, "cp.async", F)])
        tmin, tmax = self._spread(t, b)
        self._add(c, live, W1, W2, tmin, tmax)
        c[WHOW] = np.where(live, c[WHOW], ATOMIC)
        c[WEPOCH] = epoch
        self.records[b] = st.view(_RECORD).reshape(-1)

    def issue_copy(self, threads: np.ndarray, offsets: np.ndarray, nbytes: int) -> None:
        """A ``cp.async`` issued: its bytes may land from now on, so it must not touch what
        another thread accessed in this epoch; they are in flight until its wait lands them."""
        t, b, st, epoch = self._gather(threads, offsets, nbytes)
        c = st.T
        self._check_write(t, b, c, epoch, "cp.async")
        c[F] = t
        c[FPC] = self.pc
        self.records[b] = st.view(_RECORD).reshape(-1)

    def land_copy(self, threads: np.ndarray, offsets: np.ndarray, nbytes: int, issue_pc: int) -> None:
        """The bytes of a ``cp.async`` (issued at ``issue_pc``) land at its thread's wait."""
        t, b, st, epoch = self._gather(threads, offsets, nbytes)
        c = st.T
        self._check_write(t, b, c, epoch, f"landing:{issue_pc}")
        c[F] = np.where(c[F] == t, NONE, c[F])
        self._record_write(b, t, st, epoch, issue_pc, COPY)

    # --- helpers --------------------------------------------------------------------------------

    def _gather(self, idx: Idx, offsets: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | int]:
        """(thread, byte) per accessed byte, thread-major; the records of those bytes (a copy,
        (bytes, FIELDS)); the epoch of their CTA (one number when the batch is one CTA)."""
        threads = self.threads if idx is None else np.asarray(idx, dtype=np.int64)
        off = np.broadcast_to(np.asarray(offsets, dtype=np.int64), threads.shape)
        if nbytes == 1:
            t, b = threads, off
        else:
            t = np.repeat(threads, nbytes)
            b = (off[:, None] + _BYTES[:nbytes]).reshape(-1)
        epoch = int(self.epoch[0]) if self.epoch.size == 1 else self.epoch[b // self.stride]
        return t.astype(np.int32), b, np.take(self.state, b, axis=0), epoch

    def _spread(self, t: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per accessed byte: the lowest and the highest thread of this instruction touching
        that byte (usually the thread itself: then no ufunc.at is needed)."""
        s = self.scratch
        s[b] = t
        if np.array_equal(s[b], t):  # each byte is touched by one thread
            return t, t
        s[b] = np.iinfo(np.int32).max
        np.minimum.at(s, b, t)
        tmin = s[b]
        s[b] = NONE
        np.maximum.at(s, b, t)
        return tmin, s[b]

    def _check_write(self, t: np.ndarray, b: np.ndarray, c: np.ndarray, epoch: np.ndarray | int, access: str, values: Callable[[], np.ndarray] | None = None) -> None:
        """Raise for a write that races: with a write, a read or an in-flight copy of another
        thread in this epoch, or with a lower thread of this instruction writing the byte too."""
        tmin, _ = self._spread(t, b)
        same = tmin != t
        if values is not None and same.any():
            same &= self._different_values(b, values().reshape(-1))
        waw = (c[WEPOCH] == epoch) & (_other(c, W1, W2, t) >= 0)
        war = (c[REPOCH] == epoch) & (_other(c, R1, R2, t) >= 0)
        flight = (c[F] >= 0) & (c[F] != t)
        if (same | waw | war | flight).any():
            masks = [(same, "write", tmin), (waw, "writer", W1), (war, "read", R1), (flight, "cp.async", F)]
            raise self._fault(access, t, b, c, masks)

    def _different_values(self, b: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Per accessed byte: whether the threads of this instruction store different values."""
        s = self.scratch
        s[b] = v
        differs = s[b] != v  # some other store to this byte holds another value
        s[b] = 0
        s[b[differs]] = 1
        return s[b] == 1

    def _record_write(self, b: np.ndarray, t: np.ndarray, st: np.ndarray, epoch: np.ndarray | int, pc: int, how: int) -> None:
        """A write that passed the check: its thread is now the byte's only writer."""
        c = st.T
        c[W1] = t
        c[W1PC] = pc
        c[W2] = NONE
        c[WHOW] = how
        c[WEPOCH] = epoch
        self.records[b] = st.view(_RECORD).reshape(-1)

    def _add(self, c: np.ndarray, live: np.ndarray, one: int, two: int, tmin: np.ndarray, tmax: np.ndarray) -> None:
        """Add this instruction's threads to a two-slot record (readers or atomic writers) in
        ``c``: keep the first two distinct threads, which is all a later access needs to find a
        thread other than itself. Stale slots (another epoch) count as empty."""
        first = np.where(live, c[one], NONE)
        second = np.where(live, c[two], NONE)
        new_first = np.where(first >= 0, first, tmin)
        candidate = np.where(tmin != new_first, tmin, np.where(tmax != new_first, tmax, NONE))
        pc = self.pc
        c[one + 1] = np.where(first >= 0, c[one + 1], pc)
        c[one] = new_first
        c[two + 1] = np.where(second >= 0, c[two + 1], pc)
        c[two] = np.where(second >= 0, second, candidate)

    def _fault(self, access: str, t: np.ndarray, b: np.ndarray, c: np.ndarray, masks: list[tuple[np.ndarray, str, Any]]) -> SimFault:
        """The hazard of the lowest thread that has one (the first in execution order), named
        for the error message. A mask names who the other access is: ``"write"`` a thread of
        this instruction (an array), else a record field: a two-slot record's first slot
        (``"writer"``: the recorded writer, whose WHOW says how it wrote; ``"read"``), or F."""
        hit = np.zeros(t.shape, dtype=bool)
        for mask, *_ in masks:
            hit |= mask
        k = int(np.flatnonzero(hit)[0])
        _, first_kind, who = next(m for m in masks if m[0][k])
        me = int(t[k])
        if first_kind == "write":
            other, other_pc = int(who[k]), self.pc
        elif first_kind == "cp.async":
            other, other_pc = int(c[F][k]), int(c[FPC][k])
        else:
            slot = who if int(c[who][k]) != me else who + 2  # W1 -> W2, R1 -> R2
            other, other_pc = int(c[slot][k]), int(c[slot + 1][k])
            if first_kind == "writer":
                first_kind = _WRITE_KINDS[int(c[WHOW][k])]
        other_thread = self.geometry.thread_coords(other % self.cta_threads)
        other_line = self.ops[other_pc].line
        this = access
        if access.startswith("landing:"):
            this = f"the cp.async of PTX line {self.ops[int(access.split(':')[1])].line} landing at this wait"
        if first_kind == "read":
            hazard = "write-after-read"
        else:
            hazard = "read-after-write" if access == "read" else "write-after-write"
        if first_kind == "cp.async":
            other_text = f"cp.async by thread {other_thread} at PTX line {other_line}, still in flight (it lands at that thread's wait)"
        else:
            other_text = f"{first_kind} by thread {other_thread} at PTX line {other_line}, no barrier in between"
        byte = int(b[k])
        message = f"shared memory race ({hazard}; this access: {this}; other access: {other_text})"
        extra = {"hazard": hazard, "other_thread": other_thread, "other_ptx_line": other_line}
        return SimFault("memory", message, me, byte % self.stride, extra=extra)


def _other(c: np.ndarray, one: int, two: int, t: np.ndarray) -> np.ndarray:
    """Per byte, a thread of a two-slot record other than the accessor (NONE if none)."""
    return np.where(c[one] != t, c[one], c[two])
