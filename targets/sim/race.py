"""Opt-in race detection on shared memory (``Simulator(race_check=True)``), like
compute-sanitizer's racecheck.

Time is cut into *epochs* per thread: every barrier release gives the threads it released one
new epoch number, unique in the batch. A CTA-wide barrier (``bar.sync``, ``barrier.sync``,
``bar.red``; a counted barrier whose count covers the whole CTA) renumbers every thread of its
CTA; a barrier of part of the CTA renumbers its participants only: ``bar.warp.sync`` the lanes
executing it, a counted named barrier the threads that arrived at it (``bar.arrive`` included).
An access records its thread's epoch. A later access by another thread is ordered after it when
the recorded thread has been renumbered since and now shares the accessor's epoch (both were in
its latest release); otherwise two accesses to one shared byte by different threads of a CTA
race when at least one writes: read-after-write, write-after-write, write-after-read. With only
CTA-wide barriers this is exactly "the same barrier interval". With partial barriers it errs on
the quiet side: a thread whose latest release did not include the accessor counts as unordered
with it, and a ``bar.arrive`` thread's accesses between its arrival and the release count as
before the release.
Atomics (``atom``/``red``) count as writes, but do not race with each other.
``cp.async`` writes its bytes when the issuing thread's wait lands them (checked and recorded
there, with the ``cp.async`` line as the writer), and is also checked when it is issued: between
issue and landing its bytes are *in flight*, and any access to them by another thread races
with it (the hardware may land the copy at any moment in between). ``ldmatrix`` reads each
16-byte row on behalf of the lane that supplied the row's address. The async proxy's reads (wgmma
descriptor operands, TMA store sources) are checked at issue against writers outside the issuing
warpgroup or thread (``async_read``), and last until the wait that retires them: until then
``async_proxy.py`` reports any write to their bytes; at that wait they are recorded as reads by
the warpgroup or thread (``retire_async_read``, a separate two-slot record, ``late``, made at
the first one), so a write by a thread outside it races unless a barrier released both after the
wait (a barrier between the issue and the wait does not order the read's end), or, for a wgmma,
unless the writer acquired an mbarrier that a thread of the warpgroup arrived at after its own
``wgmma.wait_group`` (``mbarrier_arrive``/``mbarrier_acquire``: the one release/acquire pair
followed, as warp-specialised producers refill a stage). A bulk load is checked at issue
against another thread's ``cp.async`` in flight and those retired reads (``issue_bulk``), and
its landing starts its bytes afresh (``forget``): its mbarrier orders it, and its in-flight
window is checked, always, by ``async_proxy.py``.

Per CTA batch the checker keeps a record of 13 int32 fields per shared byte (``state``): the
writers of the byte in its epoch (one plain writer, or up to two atomic writers: two distinct
ones are enough to name "another thread" for any accessor), how they wrote (atomics only, a
store, a landed cp.async), two distinct readers, the epochs of both sets, the thread whose
cp.async is in flight, and the PC of each for the message. Every shared access gathers the
records of its bytes, compares them with numpy and scatters them back: a few dozen array
operations per shared instruction, none per other instruction. A record stands for a *granule*
of bytes rather than one byte when every shared access of the kernel covers whole granules
(``EntryInfo.shared_granule``: 16 bytes for a kernel whose shared accesses are all ``ldmatrix``,
``cp.async`` 16 and ``.v4`` words, 4 for 32-bit words): the same answers for a fraction of the
work, since two accesses then share a byte exactly when they share a granule.

An instruction's checks and updates run once per distinct granule it touches, not per thread:
with the lowest and highest thread touching a granule (``lo``, ``hi``), "a recorded thread other
than the accessor" exists for some accessor exactly when the record holds two threads, or one
that differs from ``lo`` or ``hi``; so a shared word that 256 threads read costs what one read
does. Only a hazard is resolved per thread: within one instruction the threads run in increasing
thread order (as stores and atomics do), so two threads of one ``st.shared`` writing different
values to one byte race, and the reported access is the one of the lowest-numbered thread that
has a hazard: the first hazard in execution order, deterministically.
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
BYTES_PER_SHARED_BYTE = 4 * FIELDS + 8  # a record and a scratch word (at the finest granule)
ATOMIC, PLAIN, COPY = 0, 1, 2  # WHOW: atomics only; a plain store; a landed cp.async
_WRITE_KINDS = {ATOMIC: "atomic", PLAIN: "write", COPY: "cp.async write (landed at its wait)"}
_RECORD = np.dtype((np.void, 4 * FIELDS))
BARRIER_IDS = 16  # named barriers per CTA (0..15)
_STEPS = np.arange(64, dtype=np.int64)  # granule offsets within one access
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32}  # how to compare the values of a granule
# a retired async read's slot in RaceChecker.late (two slots per granule): the first and last
# thread it was made for (a warpgroup, or a TMA store's one thread), its PC, its epoch, and the
# event number of its retiring wait (mbarrier arrivals after it release it)
LATE_FIRST, LATE_LAST, LATE_PC, LATE_EPOCH, LATE_EVENT = range(5)
LATE_SLOTS = (0, 5)
LATE_FIELDS = 10
WARPGROUP = 128


class _Access:
    """One instruction's accesses: per accessed granule (thread-major) its thread ``t`` and granule
    ``b``; per distinct granule ``u`` the lowest and highest thread touching it (``lo``, ``hi``), the
    epoch of its CTA and a copy of its record ``st`` (``c = st.T``: ``c[FIELD]`` is a field of every
    distinct granule). ``rep`` picks one element per distinct granule (None: all are distinct)."""

    __slots__ = ("t", "b", "u", "lo", "hi", "rep", "epoch", "st", "c")

    def __init__(self, t: np.ndarray, b: np.ndarray, u: np.ndarray, lo: np.ndarray, hi: np.ndarray, rep: np.ndarray | None, epoch: Any, st: np.ndarray):
        self.t, self.b, self.u, self.lo, self.hi, self.rep, self.epoch, self.st = t, b, u, lo, hi, rep, epoch, st
        self.c = st.T

    def other(self, one: int) -> np.ndarray:
        """Per distinct granule: whether the two-slot record at ``one`` holds a thread other than
        some accessor (slot ``one + 2`` is the second)."""
        first = self.c[one]
        return (first >= 0) & ((self.c[one + 2] >= 0) | (first != self.lo) | (first != self.hi))

    def not_only(self, field: int) -> np.ndarray:
        """Per distinct granule: whether ``field`` names a thread other than some accessor."""
        v = self.c[field]
        return (v >= 0) & ((v != self.lo) | (v != self.hi))


class RaceChecker:
    """One batch's race-detection state. ``pc`` is the instruction running now (the executor
    sets it before each step); ``barrier`` starts a new epoch for CTAs."""

    def __init__(self, ctx: ExecContext):
        # no reference to ctx itself (ctx holds the checker: a cycle would keep a whole batch
        # alive until the garbage collector runs)
        self.threads = ctx.thread_index.astype(np.int32)
        self.cta_threads = ctx.cta_threads
        self.geometry = ctx.geometry
        self.ops = ctx.entry.ops
        self.granule = ctx.entry.shared_granule
        self.stride = ctx.shared_stride // self.granule  # granules per CTA
        size = ctx.shared.size // self.granule
        # one record of FIELDS int32 per granule, gathered and scattered as a whole
        self.state = np.full((size, FIELDS), NONE, dtype=np.int32)
        self.records = self.state.view(_RECORD).reshape(size)
        self.scratch = np.empty(size, dtype=np.int64)
        self.scratch32 = self.scratch.view(np.int32)[:size]  # the dtype of thread numbers: no casts
        self.cta = ctx.cta
        self.epoch = np.zeros(ctx.n, dtype=np.int32)  # each thread's current epoch
        self.clock = 0  # the last epoch number given out
        self.arrived = np.full(ctx.n, NONE, dtype=np.int8)  # the barrier id a thread arrived at
        self.pc = 0
        # retired async reads (two slots of LATE_* fields per granule), made at the first one:
        # a kernel without wgmma or TMA stores pays nothing
        self.late: np.ndarray | None = None
        # mbarrier release/acquire, for retired wgmma reads only (see ``mbarrier_arrive``)
        self.events = 0  # numbers retirements of async reads and wgmma waits, in execution order
        self.waited = np.full(ctx.n, NONE, dtype=np.int32)  # each thread's latest wgmma.wait_group
        # per thread and warpgroup of its CTA: the latest wait of that warpgroup whose release
        # (an mbarrier arrival after it) the thread acquired
        self.acquired: np.ndarray | None = None
        self.arrivals: dict[int, dict[int, dict[int, int]]] = {}  # barrier -> phase -> warpgroup -> wait
        self.released: dict[int, dict[int, int]] = {}  # barrier -> warpgroup -> wait, completed phases

    def barrier(self, ctas: np.ndarray | None = None) -> None:
        """CTA-wide barriers released for ``ctas`` (default: every CTA of the batch)."""
        if ctas is None:
            self.clock += 1
            self.epoch[:] = self.clock
            return
        ctas = np.asarray(ctas)
        fresh = np.zeros(int(self.cta.max(initial=0)) + 1, dtype=np.int32)
        fresh[ctas] = self.clock + 1 + np.arange(ctas.size, dtype=np.int32)
        self.clock += ctas.size
        mine = np.isin(self.cta, ctas)
        self.epoch[mine] = fresh[self.cta[mine]]

    def _renumber(self, threads: np.ndarray, groups: np.ndarray) -> None:
        """One new epoch per distinct group, for the threads of that group."""
        keys, which = np.unique(groups, return_inverse=True)
        self.epoch[threads] = self.clock + 1 + which.astype(np.int32)
        self.clock += keys.size

    def warp_sync(self, idx: Idx) -> None:
        """``bar.warp.sync``: the executing lanes of each warp are ordered with each other."""
        threads = self.threads if idx is None else np.asarray(idx)
        local = threads % self.cta_threads
        self._renumber(threads, (threads // self.cta_threads) * 64 + local // 32)

    def arrive(self, threads: np.ndarray, ids: np.ndarray) -> None:
        self.arrived[threads] = ids

    def release(self, ctas: np.ndarray, ids: np.ndarray, wide: np.ndarray) -> None:
        """Barriers ``ids`` of CTAs ``ctas`` released (pairwise); ``wide``: the count is the whole
        CTA. Their threads that arrived take part: a new epoch per CTA, or per partial barrier."""
        if wide.any():
            self.barrier(ctas[wide])
        threads = np.flatnonzero(self.arrived >= 0)
        thread_keys = self.cta[threads] * BARRIER_IDS + self.arrived[threads]
        released = np.isin(thread_keys, ctas * BARRIER_IDS + ids)
        threads, thread_keys = threads[released], thread_keys[released]
        self.arrived[threads] = NONE
        partial = np.isin(thread_keys, (ctas * BARRIER_IDS + ids)[~wide])
        if partial.any():
            self._renumber(threads[partial], thread_keys[partial])

    def _unordered(self, a: _Access, epoch_field: int, slot: int) -> np.ndarray:
        """Per distinct granule: whether the access recorded in ``slot`` (epoch in ``epoch_field``)
        is not ordered before this one by a barrier (see the module doc)."""
        c = a.c
        recorded = c[slot]
        valid = recorded >= 0
        now = self.epoch[np.where(valid, recorded, 0)]
        return valid & ((now == c[epoch_field]) | (now != a.epoch))

    # --- the accesses ---------------------------------------------------------------------------

    def read(self, idx: Idx, offsets: np.ndarray, nbytes: int) -> None:
        """A plain read (``ld``, ``ldmatrix`` rows) of ``nbytes`` at each byte offset into
        ``ctx.shared``, by the threads ``idx``."""
        a = self._access(idx, offsets, nbytes)
        c = a.c
        raw = self._unordered(a, WEPOCH, W1) & a.other(W1)
        flight = a.not_only(F)
        if (raw | flight).any():
            raise self._fault("read", a, [(raw, "writer", W1), (flight, "cp.async", F)])
        self._add(a, self._unordered(a, REPOCH, R1), R1)
        c[REPOCH] = a.epoch
        self._store(a)

    def write(self, idx: Idx, offsets: np.ndarray, nbytes: int, values: Callable[[], np.ndarray] | None = None) -> None:
        """A plain write (``st``). ``values`` gives the stored bytes, (threads, nbytes) uint8:
        threads of this instruction storing the same value to a byte do not race (Triton has
        every lane of a warp store the warp's result)."""
        a = self._access(idx, offsets, nbytes)
        self._check_write(a, "write", values)
        self._record_write(a, self.pc, PLAIN)

    def atomic(self, idx: Idx, offsets: np.ndarray, nbytes: int) -> None:
        """``atom``/``red``: a write that does not race with other atomics."""
        a = self._access(idx, offsets, nbytes)
        c = a.c
        live = self._unordered(a, WEPOCH, W1)
        waw = live & a.other(W1) & (c[WHOW] != ATOMIC)  # a plain write by another thread
        war = self._unordered(a, REPOCH, R1) & a.other(R1)
        flight = a.not_only(F)
        if (waw | war | flight).any():
            raise self._fault("atomic", a, [(waw, "writer", W1), (war, "read", R1), (flight, "cp.async", F)])
        self._check_late(a, "atomic")
        self._add(a, live, W1)
        c[WHOW] = np.where(live, c[WHOW], ATOMIC)
        c[WEPOCH] = a.epoch
        self._store(a)

    def issue_copy(self, threads: np.ndarray, offsets: np.ndarray, nbytes: int) -> None:
        """A ``cp.async`` issued: its bytes may land from now on, so it must not touch what
        another thread accessed in this epoch; they are in flight until its wait lands them."""
        a = self._access(threads, offsets, nbytes)
        self._check_write(a, "cp.async")
        a.c[F] = a.hi  # the one thread copying there (two would have raised)
        a.c[FPC] = self.pc
        self._store(a)

    def land_copy(self, threads: np.ndarray, offsets: np.ndarray, nbytes: int, issue_pc: int) -> None:
        """The bytes of a ``cp.async`` (issued at ``issue_pc``) land at its thread's wait."""
        a = self._access(threads, offsets, nbytes)
        self._check_write(a, f"landing:{issue_pc}")
        a.c[F] = np.where(a.c[F] == a.hi, NONE, a.c[F])
        self._record_write(a, issue_pc, COPY)

    def async_read(self, lo: int, hi: int, offsets: np.ndarray, what: str, *, own_writes: bool = False) -> None:
        """An async-proxy read of the shared bytes ``offsets`` (batch-wide) on behalf of the threads
        ``lo..hi`` (a warpgroup for a wgmma operand, one thread for a TMA store source): a write or
        a cp.async in flight of a thread outside them, not ordered before by a barrier, races.
        With ``own_writes`` (wgmma) the threads' own writes race too: the tensor cores read every
        thread's bytes for the warpgroup through the async proxy, and only a barrier orders one
        thread's generic write before another warp's issue (``wgmma.mma_async.sync`` waits for its
        own warp alone); a TMA store's one thread is ordered after its own writes by program order.
        Not recorded as a read: the async proxy (``async_proxy.py``) holds the bytes read until
        the wait that retires it, and reports any write before that."""
        granules = np.unique(np.asarray(offsets, dtype=np.int64) // self.granule)
        c = self.state[granules].T
        writer, flight = c[W1], c[F]
        if own_writes:
            outside = lambda t: t >= 0  # noqa: E731
        else:
            outside = lambda t: (t >= 0) & ((t < lo) | (t > hi))  # noqa: E731
        now = self.epoch[np.where(writer >= 0, writer, 0)]
        raw = outside(writer) & ((now == c[WEPOCH]) | (now != self.epoch[lo]))
        hit = raw | outside(flight)
        if not hit.any():
            return
        k = int(np.flatnonzero(hit)[0])
        if raw[k]:
            other, other_pc = int(writer[k]), int(c[W1PC][k])
            other_text = f"{_WRITE_KINDS[int(c[WHOW][k])]} by thread {self.geometry.thread_coords(other % self.cta_threads)} at PTX line {self.ops[other_pc].line}, no barrier in between"
        else:
            other, other_pc = int(flight[k]), int(c[FPC][k])
            other_text = f"cp.async by thread {self.geometry.thread_coords(other % self.cta_threads)} at PTX line {self.ops[other_pc].line}, still in flight"
        message = f"shared memory race (read-after-write; this access: {what}; other access: {other_text})"
        extra = {"hazard": "read-after-write", "other_thread": self.geometry.thread_coords(other % self.cta_threads), "other_ptx_line": self.ops[other_pc].line}
        raise SimFault("memory", message, lo, int(granules[k]) % self.stride * self.granule, extra=extra)

    def retire_async_read(self, first: int, last: int, granules: np.ndarray, pc: int) -> None:
        """The async read of PTX ``pc`` (a wgmma operand for the threads ``first..last`` of a
        warpgroup, or a TMA store source for one thread) of the shared ``granules`` (batch-wide)
        ended at the wait that retired it, now: recorded as a read by those threads in the
        current epoch of ``first``, which later writes by other threads must be ordered after.
        Two slots per granule, like the readers of a record: a slot whose read is ordered before
        this one, or that holds the same threads, is reused; two live reads by other threads
        are enough to find one outside any writer's warpgroup."""
        if self.late is None:
            self.late = np.full((self.state.shape[0], LATE_FIELDS), NONE, dtype=np.int32)
        g = np.unique(np.asarray(granules, dtype=np.int64))
        rows = self.late[g].T  # a copy: written back below
        epoch = self.epoch[first]
        self.events += 1

        def free(slot: int) -> np.ndarray:
            held = rows[slot + LATE_FIRST]
            valid = held >= 0
            now = self.epoch[np.where(valid, held, 0)]
            ordered = (now != rows[slot + LATE_EPOCH]) & (now == epoch)
            return ~valid | ordered

        second = LATE_SLOTS[1]
        same_second = rows[second + LATE_FIRST] == first
        into_first = ~same_second & ((rows[LATE_FIRST] == first) | free(0))
        into_second = same_second | (~into_first & free(second))
        fields = ((LATE_FIRST, first), (LATE_LAST, last), (LATE_PC, pc), (LATE_EPOCH, epoch), (LATE_EVENT, self.events))
        for slot, take in zip(LATE_SLOTS, (into_first, into_second)):
            for field, value in fields:
                rows[slot + field] = np.where(take, value, rows[slot + field])
        self.late[g] = rows.T

    def issue_bulk(self, thread: int, offsets: np.ndarray) -> None:
        """A bulk (TMA) load issued by ``thread`` into the shared ``offsets`` (batch-wide): it may
        land at any moment from now, so it races with another thread's ``cp.async`` in flight
        there and with a retired async read of another warpgroup not ordered before it (by a
        barrier, or by an mbarrier the warpgroup arrived at after the read and this thread
        waited on). Generic reads and writes are not checked here: warp-specialised kernels
        order them before the refill with mbarriers alone, which the epochs do not model; the
        async proxy checks them, always, with vector clocks (``causality.py``). Not recorded:
        its bytes are in flight (``async_proxy.py``) until it lands, then start afresh."""
        g = np.unique(np.asarray(offsets, dtype=np.int64) // self.granule)
        a = self._access(np.full(g.shape, thread, dtype=np.int32), g * self.granule, self.granule)
        access = "bulk copy (TMA load) write"
        flight = a.not_only(F)
        if flight.any():
            raise self._fault(access, a, [(flight, "cp.async", F)])
        self._check_late(a, access)

    def wgmma_waited(self, threads: np.ndarray) -> None:
        """``threads`` executed a ``wgmma.wait_group`` (after the async proxy retired the reads it
        covers): what they do from now on follows the end of those reads."""
        self.events += 1
        self.waited[threads] = self.events

    def mbarrier_arrive(self, threads: np.ndarray, keys: np.ndarray, phases: np.ndarray) -> None:
        """Arrivals (each a release) of ``threads`` at the mbarriers ``keys`` in ``phases``. An
        arrival releases the wgmma reads its thread's latest ``wgmma.wait_group`` followed, for
        its whole warpgroup (a wgmma is one warpgroup-wide operation: any of its threads' wait
        ends it); kept per warpgroup, as that wait's event number."""
        for t, key, phase in zip(np.asarray(threads).tolist(), np.asarray(keys).tolist(), np.asarray(phases).tolist()):
            groups = self.arrivals.setdefault(key, {}).setdefault(phase, {})
            group = t % self.cta_threads // WARPGROUP
            groups[group] = max(groups.get(group, NONE), int(self.waited[t]))

    def mbarrier_acquire(self, threads: np.ndarray, keys: np.ndarray, phases: np.ndarray) -> None:
        """Successful waits of ``threads`` on the mbarriers ``keys``, now in ``phases``: they
        acquire every arrival in the phases before (all completed)."""
        if self.acquired is None:
            self.acquired = np.full((self.threads.size, -(-self.cta_threads // WARPGROUP)), NONE, dtype=np.int32)
        threads, keys, phases = np.asarray(threads), np.asarray(keys), np.asarray(phases)
        for key in np.unique(keys).tolist():
            phase = int(phases[keys == key].max())
            pending, released = self.arrivals.get(key, {}), self.released.setdefault(key, {})
            for done in [p for p in pending if p < phase]:
                for group, event in pending.pop(done).items():
                    released[group] = max(released.get(group, NONE), event)
            waiters = threads[keys == key]
            for group, event in released.items():
                self.acquired[waiters, group] = np.maximum(self.acquired[waiters, group], event)

    def forget(self, offsets: np.ndarray) -> None:
        """A bulk copy landed on the shared bytes ``offsets``: what happened to them before is
        ordered before it (its issue was checked) and what follows its mbarrier wait after it,
        so the bytes start afresh."""
        g = np.unique(np.asarray(offsets, dtype=np.int64) // self.granule)
        self.state[g] = NONE
        if self.late is not None:
            self.late[g] = NONE

    # --- helpers --------------------------------------------------------------------------------

    def _access(self, idx: Idx, offsets: np.ndarray, nbytes: int) -> _Access:
        threads = self.threads if idx is None else np.asarray(idx).astype(np.int32)
        off = np.broadcast_to(np.asarray(offsets, dtype=np.int64), threads.shape) // self.granule
        steps, rest = divmod(nbytes, self.granule)
        assert rest == 0, "a shared access smaller than the kernel's granule: annotate its op (Behaviour.shared_access)"
        if steps == 1:
            t, b = threads, off
        else:
            t = np.repeat(threads, steps)
            b = (off[:, None] + _STEPS[:steps]).reshape(-1)
        # t ascends: a scatter keeps each granule's highest thread (numpy assigns repeated
        # indices in order), a reversed one its lowest; checked, with ufunc.at as the fallback
        s = self.scratch32
        s[b] = t
        hi = s[b]
        if np.array_equal(hi, t):  # each granule is touched by one thread (the common case)
            u, lo, rep = b, t, None
        else:
            s[b[::-1]] = t[::-1]
            lo = s[b]
            if not ((hi >= t).all() and (lo <= t).all()):
                s[b] = np.iinfo(np.int32).max
                np.minimum.at(s, b, t)
                lo = s[b]
                s[b] = NONE
                np.maximum.at(s, b, t)
                hi = s[b]
            rep = np.flatnonzero(lo == t)  # one element per granule: its lowest thread's
            u, lo, hi = b[rep], lo[rep], hi[rep]
        epoch = self.epoch[lo]
        return _Access(t, b, u, lo, hi, rep, epoch, np.take(self.state, u, axis=0))

    def _store(self, a: _Access) -> None:
        self.records[a.u] = a.st.view(_RECORD).reshape(-1)

    def _check_write(self, a: _Access, access: str, values: Callable[[], np.ndarray] | None = None) -> None:
        """Raise for a write that races: with a write, a read or an in-flight copy of another
        thread in this epoch, or with another thread of this instruction writing the granule."""
        same = a.lo != a.hi
        if values is not None and same.any():
            same &= self._different_values(a, values())
        waw = self._unordered(a, WEPOCH, W1) & a.other(W1)
        war = self._unordered(a, REPOCH, R1) & a.other(R1)
        flight = a.not_only(F)
        if (same | waw | war | flight).any():
            raise self._fault(access, a, [(same, "write", None), (waw, "writer", W1), (war, "read", R1), (flight, "cp.async", F)])
        self._check_late(a, access)

    def _check_late(self, a: _Access, access: str) -> None:
        """Raise for a write to bytes a retired async read of threads outside the writer's
        (another warpgroup's wgmma, another thread's TMA store) read in this interval."""
        if self.late is None:
            return
        rows = self.late[a.u].T
        hazard = []
        for slot in LATE_SLOTS:
            first, last = rows[slot + LATE_FIRST], rows[slot + LATE_LAST]
            valid = first >= 0
            anyone = np.where(valid, first, 0)
            now = self.epoch[anyone]
            unordered = (now == rows[slot + LATE_EPOCH]) | (now != a.epoch)
            if self.acquired is not None:  # an mbarrier the warpgroup arrived at after the read, waited on
                group = anyone % self.cta_threads // WARPGROUP
                wgmma = first != last  # a TMA store's thread arrives for itself only: not followed
                unordered &= ~(wgmma & (self.acquired[a.lo, group] > rows[slot + LATE_EVENT]) & (self.acquired[a.hi, group] > rows[slot + LATE_EVENT]))
            hazard.append(valid & unordered & ((a.lo < first) | (a.hi > last)))
        if not (hazard[0] | hazard[1]).any():
            return
        # the lowest writing thread outside a flagged read's threads (the first in execution order)
        which = self._granule_of_each(a)
        best: tuple[int, int, int] | None = None  # (thread, element, slot)
        for slot, flagged in zip(LATE_SLOTS, hazard):
            first, last = rows[slot + LATE_FIRST][which], rows[slot + LATE_LAST][which]
            hit = np.flatnonzero(flagged[which] & ((a.t < first) | (a.t > last)))
            if hit.size and (best is None or int(a.t[hit[0]]) < best[0]):
                best = (int(a.t[hit[0]]), int(hit[0]), slot)
        assert best is not None
        me, k, slot = best
        j = int(which[k])
        first, last, pc = (int(rows[slot + f][j]) for f in (LATE_FIRST, LATE_LAST, LATE_PC))
        op = self.ops[pc]
        if first == last:
            reader = f"TMA store source read by thread {self.geometry.thread_coords(first % self.cta_threads)}"
        else:
            low, high = (self.geometry.thread_coords(t % self.cta_threads) for t in (first, last))
            reader = f"wgmma.mma_async operand read by the warpgroup of threads {low}..{high}"
        other_text = f"{reader} at PTX line {op.line}, retired by its wait with no barrier between that wait and this write"
        message = f"shared memory race (write-after-read; this access: {self._describe(access)}; other access: {other_text})"
        extra = {"hazard": "write-after-read", "other_thread": self.geometry.thread_coords(first % self.cta_threads), "other_ptx_line": op.line}
        raise SimFault("memory", message, me, int(a.b[k]) % self.stride * self.granule, extra=extra)

    def _different_values(self, a: _Access, stored: np.ndarray) -> np.ndarray:
        """Per distinct granule: whether the threads of this instruction store different values
        there (``stored``: (threads, bytes) uint8, thread-major like ``a.b``)."""
        g, b = self.granule, a.b
        words = stored.reshape(b.size, g)
        words = words.view(np.uint64) if g >= 8 else words.view(_WORDS[g])  # (granules, 1 or 2)
        s = self.scratch.view(np.uint64)
        differs = np.zeros(b.size, dtype=bool)
        for column in words.T:
            s[b] = column
            differs |= s[b] != column  # some other store to this granule holds another value
        s = self.scratch
        s[b] = 0
        s[b[differs]] = 1
        return s[a.u] == 1

    def _record_write(self, a: _Access, pc: int, how: int) -> None:
        """A write that passed the check: its thread (the highest, whose value remains, when
        several stored one value) is now the granule's only writer."""
        c = a.c
        c[W1] = a.hi
        c[W1PC] = pc
        c[W2] = NONE
        c[WHOW] = how
        c[WEPOCH] = a.epoch
        self._store(a)

    def _add(self, a: _Access, live: np.ndarray, one: int) -> None:
        """Add this instruction's threads to a two-slot record (readers or atomic writers): keep
        the first two distinct threads, which is all a later access needs to find a thread other
        than itself. Stale slots (another epoch) count as empty."""
        c, lo, hi, two = a.c, a.lo, a.hi, one + 2
        first = np.where(live, c[one], NONE)
        second = np.where(live, c[two], NONE)
        new_first = np.where(first >= 0, first, lo)
        candidate = np.where(lo != new_first, lo, np.where(hi != new_first, hi, NONE))
        pc = self.pc
        c[one + 1] = np.where(first >= 0, c[one + 1], pc)
        c[one] = new_first
        c[two + 1] = np.where(second >= 0, c[two + 1], pc)
        c[two] = np.where(second >= 0, second, candidate)

    def _granule_of_each(self, a: _Access) -> np.ndarray:
        """Per element of ``a`` (thread-major), the index of its distinct granule in ``a.u``."""
        if a.rep is None:
            return np.arange(a.u.size)
        s = self.scratch
        s[a.u] = np.arange(a.u.size)
        return s[a.b]

    def _describe(self, access: str) -> str:
        """This access, for a message (``landing:PC``: a cp.async landing at its wait)."""
        if access.startswith("landing:"):
            return f"the cp.async of PTX line {self.ops[int(access.split(':')[1])].line} landing at this wait"
        return access

    def _fault(self, access: str, a: _Access, masks: list[tuple[np.ndarray, str, int | None]]) -> SimFault:
        """The hazard of the lowest thread that has one (the first in execution order), named for
        the error message. The masks flag distinct granules; here they are resolved per thread.
        A mask names who the other access is: ``"write"`` another thread of this instruction,
        else a record field: a two-slot record's first slot (``"writer"``: the recorded writer,
        whose WHOW says how it wrote; ``"read"``), or F."""
        t = a.t
        if a.rep is None:
            per, lo = a.c, t  # elements are the distinct granules
        else:
            which = self._granule_of_each(a)
            per, lo = a.c[:, which], a.lo[which]
        hits = []
        for mask, kind, field in masks:
            m = mask if a.rep is None else mask[which]
            if kind == "write":
                m = m & (lo != t)  # the granule's lowest writer is first, not racing
            elif kind == "cp.async":
                m = m & (per[F] != t)
            else:
                m = m & (np.where(per[field] != t, per[field], per[field + 2]) >= 0)
            hits.append(m)
        k = int(np.flatnonzero(np.logical_or.reduce(hits))[0])
        first_kind, field = next((kind, field) for m, (_, kind, field) in zip(hits, masks) if m[k])
        me = int(t[k])
        if first_kind == "write":
            other, other_pc = int(lo[k]), self.pc
        elif first_kind == "cp.async":
            other, other_pc = int(per[F][k]), int(per[FPC][k])
        else:
            assert field is not None
            slot = field if int(per[field][k]) != me else field + 2  # W1 -> W2, R1 -> R2
            other, other_pc = int(per[slot][k]), int(per[slot + 1][k])
            if first_kind == "writer":
                first_kind = _WRITE_KINDS[int(per[WHOW][k])]
        other_thread = self.geometry.thread_coords(other % self.cta_threads)
        other_line = self.ops[other_pc].line
        this = self._describe(access)
        if first_kind == "read":
            hazard = "write-after-read"
        else:
            hazard = "read-after-write" if access == "read" else "write-after-write"
        if first_kind == "cp.async":
            other_text = f"cp.async by thread {other_thread} at PTX line {other_line}, still in flight (it lands at that thread's wait)"
        else:
            other_text = f"{first_kind} by thread {other_thread} at PTX line {other_line}, no barrier in between"
        byte = int(a.b[k]) % self.stride * self.granule  # the granule's first byte in the CTA's window
        message = f"shared memory race ({hazard}; this access: {this}; other access: {other_text})"
        extra = {"hazard": hazard, "other_thread": other_thread, "other_ptx_line": other_line}
        return SimFault("memory", message, me, byte, extra=extra)
