"""Shared memory as the async proxy sees it: bulk copies (TMA) land late, wgmma and TMA stores
read late, and the generic and async proxies meet only through ``fence.proxy.async``.

The hardware (PTX ISA, "Memory Consistency Model: Proxies"; "cp.async.bulk"; "wgmma") runs
``cp.async.bulk[.tensor]``, the shared operands of ``wgmma.mma_async`` and the shared source of
TMA stores in the *async proxy*; ``ld``/``st``, ``ldmatrix``, atomics and ``cp.async`` (the
non-bulk copy) are the *generic proxy*. The simulator keeps, per granule of the batch's shared
memory (``EntryInfo.shared_granule`` bytes: exact, since no generic access covers part of one),
what is needed to be at least as strict as the hardware:

* **in flight** (``landing``): the bulk load writing it. A load reads global memory when issued
  (a bad source is reported at its line) but writes shared memory only when an
  ``mbarrier.try_wait``/``test_wait`` on its barrier would otherwise fail, or at the end of the
  batch: the latest moment the ISA allows. Until then any access to its bytes is an error.
* **read late** (``readers``): the async reads still pending: a wgmma's operands until the
  ``wgmma.wait_group`` that retires its group, a TMA store's source until the
  ``cp.async.bulk.wait_group[.read]`` that covers its group (the store reads shared memory
  and writes global memory then) or the end of the batch. A write to those bytes in between
  is an error naming both lines.
* **proxy order** (the last generic write, and the last generic read by each warp: thread,
  time, PC). Whether one thread's access precedes another thread's point, and whether a proxy
  fence lies between, is kept as vector clocks (``causality.py``): the PTX ISA's proxy causality
  ("Memory Consistency Model", "Causality Order"; "fence": a bi-directional proxy fence takes
  effect within its thread and composes with other synchronisation) has a generic access X
  precede an async access Y only through a proxy fence Z with X before Z and Z before Y in base
  causality order (program order, barriers, mbarrier arrive/wait). So a generic write by T then
  an async read (wgmma operand, TMA store source) issued by I (a warpgroup: any of its threads)
  needs a ``fence.proxy.async`` covering shared memory (plain, ``.shared::cta``,
  ``.shared::cluster``; not ``.global``, nor ``fence.mbarrier_init``) by T after the write and
  before the synchronisation that reaches I, or by a thread of I after a synchronisation that
  ordered the write before it: CUTLASS's placement (every writer fences, then a barrier) and
  Triton's (a barrier, then the issuing threads fence). A generic read or write then a bulk load
  into those bytes (checked at its issue: it may land at any moment after) needs the same fence,
  and, first, the access must precede the issue at all: a barrier, or an mbarrier the accessing
  thread arrived at after it and the issuer waited on (a ring's "empty" barrier). Missing
  either is a ``KaioSimError`` naming both lines and threads.
* **landed** (``l_key``): the bulk load that last wrote each granule, its mbarrier and the phase
  it completed in. An async write then a generic access needs no fence, but the accessing
  thread must have observed that phase complete (its own successful wait, or a barrier or
  mbarrier after a thread's wait): otherwise the bytes it reads are not guaranteed to be the
  copy's, a ``KaioSimError``. A read before the copy landed at all is the in-flight error.
  Whether T and I are ordered for a plain data race is the race check's business (``race.py``):
  with ``race_check`` on, each async read is handed to it when it retires (a read by its
  warpgroup or thread that a later write of another thread must be barrier-ordered after), and
  each bulk load at its issue.
* An mbarrier a bulk load completes on must have been initialised with a fence after the init
  by the initialising thread, before the copy is issued: ``fence.mbarrier_init.release.cluster``
  (CUTLASS's ``fence_barrier_init``) or a shared ``fence.proxy.async`` (the CUDA guide's).

Times are the batch's step counter (``ctx.clock``). Where the ISA leaves the order open (the
copies a forced wait lands; the stores a bulk wait completes) a seeded adversarial schedule
(``ctx.rng``) picks one at random.

Cost: nothing for a kernel without async-proxy instructions (``ctx.async_proxy`` is None and
every hook is behind an ``is None`` test); otherwise a few numpy operations per shared access and
per barrier (``causality.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .causality import Causality
from .faults import SimFault

if TYPE_CHECKING:
    from .context import ExecContext
    from .ops_mbarrier import Barrier
    from .program import EntryInfo, Idx

NONE = -1
# the op classes that make a kernel use the async proxy on shared memory
_ASYNC_CLASSES = ("cp.async.bulk", "wgmma.m")


def uses_async_proxy(entry: EntryInfo) -> bool:
    return any(op.klass.startswith(_ASYNC_CLASSES) for op in entry.ops)


def state_bytes_per_cta(entry: EntryInfo, cta_threads: int, shared_bytes: int) -> int:
    """What one CTA of a batch costs the async proxy (0 for a kernel that does not use it): per
    granule of shared memory the records of ``AsyncProxy``, per thread its two vector clocks
    (``causality.py``), so the simulator sizes its batches with them."""
    if not shared_bytes or not uses_async_proxy(entry):
        return 0
    granules = -(-shared_bytes // entry.shared_granule)
    warps = -(-cta_threads // 32)
    return granules * (44 + 12 * warps) + cta_threads * (8 * cta_threads + 64)


@dataclass
class _Load:
    """A bulk load in flight: its bytes land at a forced wait or at the end of the batch."""

    thread: int
    pc: int
    key: int  # the mbarrier it completes on
    offsets: np.ndarray  # batch-wide byte offsets into ctx.shared
    data: np.ndarray  # uint8, one per offset
    granules: np.ndarray  # the distinct granules it writes


@dataclass
class _Read:
    """An async read of shared memory still pending (wgmma operands, a TMA store's source)."""

    what: str  # "wgmma" or "store"
    owner: int  # the thread whose wait retires it (a warpgroup's first thread for wgmma)
    last: int  # the last thread it reads for (a warpgroup's last; the owner for a store)
    group: int  # its group in the owner's wgmma or bulk groups
    pc: int
    granules: np.ndarray
    # a store: where its bytes go once it reads them (arena offsets, shared offsets)
    store: tuple[np.ndarray, np.ndarray] | None = None


class AsyncProxy:
    """One batch's async-proxy state (see the module doc)."""

    def __init__(self, ctx: ExecContext):
        self.granule = g = ctx.entry.shared_granule
        size = max(ctx.shared.size // g, 1)
        self.ops = ctx.entry.ops
        self.landing = np.full(size, NONE, dtype=np.int32)  # id of the bulk load writing it
        self.readers = np.zeros(size, dtype=np.int32)  # async reads pending on it
        self.reader = np.full(size, NONE, dtype=np.int32)  # the latest of them (for messages)
        # the last generic write of each granule, and its last generic read by each warp of the
        # CTA (a refill must be ordered after every reader: one slot per warp keeps them apart
        # for a few bytes per granule): time, thread, pc
        self.w_clock = np.full(size, NONE, dtype=np.int32)
        self.w_thread = np.zeros(size, dtype=np.int32)
        self.w_pc = np.zeros(size, dtype=np.int32)
        warps = -(-ctx.cta_threads // 32)
        self.r_clock = np.full((size, warps), NONE, dtype=np.int32)
        self.r_thread = np.zeros((size, warps), dtype=np.int32)
        self.r_pc = np.zeros((size, warps), dtype=np.int32)
        self.warp = (ctx.ltid // 32).astype(np.int64)
        # the bulk load that last wrote each granule (landed): its mbarrier (batch-wide key;
        # NONE once a generic write replaced its bytes), the phase it completed in, thread, pc
        self.l_key = np.full(size, NONE, dtype=np.int64)
        self.l_phase = np.zeros(size, dtype=np.int32)
        self.l_thread = np.zeros(size, dtype=np.int32)
        self.l_pc = np.zeros(size, dtype=np.int32)
        # each thread's latest fence.mbarrier_init (or shared proxy fence)
        self.init_fence = np.full(ctx.n, NONE, dtype=np.int64)
        # who is ordered after whom, and which proxy fences lie between (causality.py)
        self.causal = Causality(ctx)
        self.loads: dict[int, _Load] = {}
        self.reads: dict[int, _Read] = {}
        self.next_id = 0
        self.bulk_committed = np.zeros(ctx.n, dtype=np.int64)  # bulk groups committed per thread
        self.shared_stride = ctx.shared_stride

    # --- helpers ----------------------------------------------------------------------------

    def _line(self, pc: int) -> int:
        return self.ops[pc].line

    def _granules(self, ctx: ExecContext, idx: Idx, offsets: object, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(thread, granule) of every granule the threads ``idx`` access, thread-major."""
        threads = ctx.thread_index if idx is None else np.asarray(idx)
        off = np.broadcast_to(np.asarray(offsets, dtype=np.int64), threads.shape) // self.granule
        steps = max(1, nbytes // self.granule)
        if steps == 1:
            return threads, off
        return np.repeat(threads, steps), (off[:, None] + np.arange(steps)).reshape(-1)

    def _byte(self, granule: int) -> int:
        """The granule's first byte in its CTA's shared window (what errors report)."""
        return granule * self.granule % self.shared_stride

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _check_in_flight(self, threads: np.ndarray, granules: np.ndarray, access: str) -> None:
        hit = self.landing[granules] >= 0
        if hit.any():
            k = int(np.flatnonzero(hit)[0])
            load = self.loads[int(self.landing[granules[k]])]
            raise SimFault(
                "memory",
                f"{access} shared memory that the bulk copy of PTX line {self._line(load.pc)} (issued by thread "
                f"{load.thread}) is still writing: wait on its mbarrier phase first",
                int(threads[k]),
                self._byte(int(granules[k])),
                extra={"other_ptx_line": self._line(load.pc)},
            )

    def _check_not_read(self, threads: np.ndarray, granules: np.ndarray, access: str) -> None:
        hit = self.readers[granules] > 0
        if hit.any():
            k = int(np.flatnonzero(hit)[0])
            read = self.reads.get(int(self.reader[granules[k]]))
            if read is None:  # the latest reader retired; another is still pending
                read = next(r for r in self.reads.values() if np.isin(granules[k], r.granules))
            waiter = "wgmma.wait_group" if read.what == "wgmma" else "cp.async.bulk.wait_group.read"
            source = "operands of the wgmma.mma_async" if read.what == "wgmma" else "source of the TMA store"
            raise SimFault(
                "memory",
                f"{access} shared memory that is still being read asynchronously: it holds the {source} of "
                f"PTX line {self._line(read.pc)}, which reads it until its {waiter}",
                int(threads[k]),
                self._byte(int(granules[k])),
                extra={"other_ptx_line": self._line(read.pc)},
            )

    def _proxy_fault(self, thread: int, granule: int, generic: str, other_thread: int, other_pc: int, async_access: str) -> SimFault:
        line = self._line(other_pc)
        return SimFault(
            "sim",
            f"missing fence.proxy.async: a generic-proxy {generic} of shared memory by thread {other_thread} at PTX line "
            f"{line} is followed by an async-proxy {async_access} of the same bytes (at byte {self._byte(granule)}) with "
            f"no fence.proxy.async in between by the writing thread, nor by a thread that a barrier or an mbarrier "
            f"wait ordered after that {generic} before its fence, on the way to the issuing thread (PTX ISA, causality order)",
            thread,
            extra={"other_ptx_line": line},
        )

    def _unordered_fault(self, thread: int, granule: int, generic: str, other_thread: int, other_pc: int) -> SimFault:
        line = self._line(other_pc)
        return SimFault(
            "sim",
            f"bulk copy into shared memory (at byte {self._byte(granule)}) that thread {other_thread} accessed with a "
            f"generic-proxy {generic} at PTX line {line}, which is not ordered before this copy's issue: the copy may land "
            f"at any moment from now, so that {generic} must come before a barrier or an mbarrier arrive that the issuing "
            f"thread {thread} waited on before it issued the copy",
            thread,
            self._byte(granule),
            extra={"other_ptx_line": line},
        )

    def _check_landed(self, threads: np.ndarray, granules: np.ndarray, access: str, any_of: np.ndarray | None = None) -> None:
        """Bytes a bulk load wrote are visible to the threads that observed its mbarrier phase
        complete (a successful wait, or a barrier or mbarrier after one): PTX ISA, "mbarrier":
        complete_tx is what a waiter acquires. ``any_of``: one async operation issued by these
        threads (a warpgroup's wgmma: one of them observing it is enough)."""
        keys = self.l_key[granules]
        hit = keys >= 0
        if not hit.any():
            return
        for key in np.unique(keys[hit]).tolist():
            on = np.flatnonzero(keys == key)
            if any_of is not None:
                seen = np.full(on.size, int(self.causal.seen(any_of, key).max()))
            else:
                seen = self.causal.seen(threads[on], key)
            bad = seen <= self.l_phase[granules[on]]
            if bad.any():
                k = int(on[int(np.flatnonzero(bad)[0])])
                g = int(granules[k])
                line = self._line(int(self.l_pc[g]))
                raise SimFault(
                    "sim",
                    f"{access} shared memory (byte {self._byte(g)}) that the bulk copy of PTX line {line} (issued by thread "
                    f"{int(self.l_thread[g])}) wrote, by a thread that has not observed the completion of the mbarrier phase "
                    f"that copy completed on: only a thread whose mbarrier wait saw that phase complete, or one a barrier or an "
                    f"mbarrier arrive/wait ordered after such a thread, is guaranteed to see its bytes",
                    int(threads[k]),
                    self._byte(g),
                    extra={"other_ptx_line": line},
                )

    # --- generic accesses ---------------------------------------------------------------------

    def generic_read(self, ctx: ExecContext, idx: Idx, offsets: object, nbytes: int) -> None:
        threads, granules = self._granules(ctx, idx, offsets, nbytes)
        self._check_in_flight(threads, granules, "read of")
        self._check_landed(threads, granules, "read of")
        warps = self.warp[threads]
        self.r_clock[granules, warps] = ctx.clock
        self.r_thread[granules, warps] = threads
        self.r_pc[granules, warps] = ctx.pc

    def generic_write(self, ctx: ExecContext, idx: Idx, offsets: object, nbytes: int, pc: int | None = None) -> None:
        """A generic write (``pc``: the instruction to name for it, default the running one;
        a cp.async lands at its wait but is named by its own line)."""
        threads, granules = self._granules(ctx, idx, offsets, nbytes)
        self._check_in_flight(threads, granules, "write to")
        self._check_not_read(threads, granules, "write to")
        self._check_landed(threads, granules, "write to")
        self.l_key[granules] = NONE  # the bytes are the generic write's now
        self.w_clock[granules] = ctx.clock
        self.w_thread[granules] = threads
        self.w_pc[granules] = ctx.pc if pc is None else pc

    def fence(self, ctx: ExecContext, idx: Idx, proxy: bool) -> None:
        """``fence.proxy.async`` (``proxy``) or ``fence.mbarrier_init`` by the threads ``idx``."""
        if proxy:
            self.causal.fence(idx, ctx.clock)
        self.init_fence[slice(None) if idx is None else idx] = ctx.clock

    # --- synchronisation (causality.py) ---------------------------------------------------------

    def barrier_arrive(self, ctx: ExecContext, threads: np.ndarray, ids: np.ndarray) -> None:
        self.causal.bar_arrive(np.asarray(threads), np.asarray(ids), ctx.clock)

    def barrier_release(self, ctx: ExecContext, threads: Idx, ids: np.ndarray | None) -> None:
        """Threads released by barriers (``ids``: each one's); None: the whole batch at once."""
        self.causal.bar_release(threads, ids, ctx.clock)

    def warp_sync(self, ctx: ExecContext, idx: Idx) -> None:
        self.causal.warp_sync(idx, ctx.clock)

    def mbarrier_arrive(self, ctx: ExecContext, threads: np.ndarray, keys: np.ndarray, phases: np.ndarray) -> None:
        self.causal.mbarrier_arrive(np.asarray(threads), np.asarray(keys), np.asarray(phases), ctx.clock)

    def mbarrier_acquire(self, threads: np.ndarray, keys: np.ndarray, phases: np.ndarray) -> None:
        self.causal.mbarrier_acquire(np.asarray(threads), np.asarray(keys), np.asarray(phases))

    # --- async reads: wgmma operands, TMA store sources ----------------------------------------

    def async_read(self, ctx: ExecContext, issuers: np.ndarray, offsets: np.ndarray, what: str, group: int, store: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """The async proxy reads the shared bytes ``offsets`` (batch-wide) for an instruction the
        threads ``issuers`` executed (a warpgroup, or one thread), from now until the wait of
        ``issuers[0]`` that retires ``group``."""
        granules = np.unique(np.asarray(offsets, dtype=np.int64) // self.granule)
        owner = int(issuers[0])
        me = np.full(granules.shape, owner)
        access = "wgmma.mma_async operand read of" if what == "wgmma" else "TMA store read of"
        self._check_in_flight(me, granules, access)
        self._check_landed(me, granules, access, any_of=np.asarray(issuers))
        bad = ~self.causal.fenced_for(np.asarray(issuers), self.w_thread[granules], self.w_clock[granules])
        if bad.any():
            g = int(granules[int(np.flatnonzero(bad)[0])])
            async_access = "read (wgmma.mma_async operand)" if what == "wgmma" else "read (TMA store source)"
            raise self._proxy_fault(owner, g, "write", int(self.w_thread[g]), int(self.w_pc[g]), async_access)
        read_id = self._new_id()
        self.reads[read_id] = _Read(what, owner, int(issuers[-1]), group, ctx.pc, granules, store)
        self.readers[granules] += 1
        self.reader[granules] = read_id

    def retire(self, ctx: ExecContext, idx: Idx, what: str, committed: np.ndarray, keep: int) -> None:
        """A wait by the threads ``idx`` of all but their ``keep`` newest groups (``committed``:
        each thread's group count): the async reads it covers are done (stores write global
        memory now)."""
        if not self.reads:
            return
        waiting = None if idx is None else set(np.asarray(idx).tolist())
        due = [
            (rid, r)
            for rid, r in self.reads.items()
            if r.what == what and (waiting is None or r.owner in waiting) and r.group < int(committed[r.owner]) - keep
        ]
        rng = getattr(ctx, "rng", None)
        if rng is not None and len(due) > 1:  # stores of one wait complete in any order
            due = [due[i] for i in rng.permutation(len(due))]
        for rid, r in due:
            self._finish_read(ctx, rid, r)

    def _finish_read(self, ctx: ExecContext, rid: int, r: _Read) -> None:
        del self.reads[rid]
        if ctx.race is not None:  # the read ends here: writes of other threads must come after a barrier
            ctx.race.retire_async_read(r.owner, r.last, r.granules, r.pc)
        self.readers[r.granules] -= 1
        self.reader[r.granules] = np.where(self.reader[r.granules] == rid, NONE, self.reader[r.granules])
        if r.store is not None:
            arena_offsets, shared_offsets = r.store
            ctx.memory.view(1)[arena_offsets] = ctx.shared[shared_offsets]

    def commit_bulk(self, idx: Idx) -> None:
        if idx is None:
            self.bulk_committed += 1
        else:
            self.bulk_committed[idx] += 1

    def store(self, ctx: ExecContext, thread: int, source: np.ndarray, shared_offsets: np.ndarray, arena_offsets: np.ndarray) -> None:
        """A bulk store issued: it reads ``source`` when its bulk group completes, and writes
        ``shared_offsets`` (the part inside the tensor) to global ``arena_offsets``."""
        group = int(self.bulk_committed[thread])
        self.async_read(ctx, np.array([thread]), source, "store", group, (arena_offsets, shared_offsets))

    # --- bulk loads ---------------------------------------------------------------------------

    def check_barrier_init(self, barrier: Barrier, thread: int) -> None:
        """A bulk copy completing on ``barrier``: its init must be fenced for the async proxy."""
        t, at = barrier.init_thread, barrier.init_clock
        if t >= 0 and self.init_fence[t] <= at:
            raise SimFault(
                "sim",
                f"the mbarrier this bulk copy completes on was initialised by thread {t} at PTX line "
                f"{self._line(barrier.init_pc)} with no fence.mbarrier_init.release.cluster (or fence.proxy.async"
                ".shared::cta) by that thread before the copy: the async proxy may not see the initialised barrier",
                thread,
                extra={"other_ptx_line": self._line(barrier.init_pc)},
            )

    def load(self, ctx: ExecContext, thread: int, key: int, offsets: np.ndarray, data: np.ndarray) -> None:
        """A bulk load issued by ``thread``: its bytes (``data`` for the batch-wide ``offsets``)
        are in flight until a wait on barrier ``key`` lands them."""
        granules = np.unique(offsets // self.granule)
        me = np.full(granules.shape, thread)
        self._check_in_flight(me, granules, "bulk copy into")
        self._check_not_read(me, granules, "bulk copy into")
        # every generic access of these bytes must precede the copy's issue (it may land at any
        # moment after): ordered by a barrier or an mbarrier arrive/wait (the ring's "empty"
        # barrier), and with a proxy fence on the way (PTX ISA, "Causality Order")
        accesses = [(self.w_clock[granules], self.w_thread[granules], self.w_pc[granules], "write")]
        for w in range(self.r_clock.shape[1]):
            accesses.append((self.r_clock[granules, w], self.r_thread[granules, w], self.r_pc[granules, w], "read"))
        for clock, who, pc, generic in accesses:
            unordered = ~self.causal.ordered(thread, who, clock)
            if unordered.any():
                k = int(np.flatnonzero(unordered)[0])
                raise self._unordered_fault(thread, int(granules[k]), generic, int(who[k]), int(pc[k]))
        for clock, who, pc, generic in accesses:
            bad = ~self.causal.fenced_for(np.array([thread]), who, clock)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise self._proxy_fault(thread, int(granules[k]), generic, int(who[k]), int(pc[k]), "write (this bulk copy)")
        if ctx.race is not None:  # it may land from now on: accesses of other threads must be ordered before
            ctx.race.issue_bulk(thread, offsets)
        load_id = self._new_id()
        self.loads[load_id] = _Load(thread, ctx.pc, key, offsets, data, granules)
        self.landing[granules] = load_id

    def in_flight_on(self, key: int) -> bool:
        """Whether a bulk copy in flight completes on barrier ``key``."""
        return any(load.key == key for load in self.loads.values())

    def land_for(self, ctx: ExecContext, keys: list[int]) -> bool:
        """A wait on barriers ``keys`` would fail: land their copies in flight (complete_tx on
        each). True when something landed."""
        wanted = set(keys)
        due = [lid for lid, load in self.loads.items() if load.key in wanted]
        if not due:
            return False
        self._land(ctx, due)
        return True

    def drain(self, ctx: ExecContext) -> None:
        """The end of the batch: every copy lands and every store completes."""
        self._land(ctx, list(self.loads))
        for rid in list(self.reads):
            self._finish_read(ctx, rid, self.reads[rid])

    def _land(self, ctx: ExecContext, due: list[int]) -> None:
        rng = getattr(ctx, "rng", None)
        if rng is not None and len(due) > 1:  # copies in flight land in any order
            due = [due[i] for i in rng.permutation(len(due))]
        for lid in due:
            load = self.loads.pop(lid)
            ctx.shared[load.offsets] = load.data
            if ctx.shared_written is not None:
                ctx.shared_written[load.offsets] = 1
            g = load.granules
            self.landing[g] = NONE
            # the copy is now the bytes' last writer, through the async proxy: the generic
            # accesses before it were checked at its issue; the ones after it need no fence, but
            # must observe the mbarrier phase it completes in (_check_landed)
            self.w_clock[g] = NONE
            self.r_clock[g] = NONE
            assert ctx.mbarriers is not None  # the copy named a barrier when it was issued
            self.l_key[g] = load.key
            self.l_phase[g] = ctx.mbarriers.get(load.key, load.thread, "a bulk copy's complete_tx").phase
            self.l_thread[g] = load.thread
            self.l_pc[g] = load.pc
            if ctx.race is not None:
                ctx.race.forget(load.offsets)
            ctx.mbarriers.complete_tx(load.key, load.thread, int(load.offsets.size))
