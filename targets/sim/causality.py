"""Happens-before between the threads of a CTA, as vector clocks: what the async-proxy rules
(``async_proxy.py``) need to know about whether one thread's access is ordered before another's.

The PTX ISA ("Memory Consistency Model", "Causality Order") orders an operation X before Y in
*base causality order* through program order and *synchronizes-with*: a barrier (``bar.sync``,
``bar.red``, ``bar.arrive`` with a ``bar.sync``/``bar.red`` on the same barrier), and a release
pattern observed by an acquire pattern (``mbarrier.arrive`` is a release, a successful
``mbarrier.try_wait``/``test_wait`` an acquire of the phases it observed complete). The
simulator keeps, per thread P of a batch and per thread C of P's CTA:

* ``clock[P, C]``: the latest time (``ctx.clock``) of C up to which everything C did precedes
  P's current point in base causality order (P's own entry: the time of its latest release);
* ``fenced[P, C]``: the latest time of C up to which everything C did precedes, in base
  causality order, a ``fence.proxy.async`` that precedes P's current point: P's knowledge as
  of that fence (a fence copies its thread's ``clock`` row). A generic access X at time t by
  C reaches an async-proxy access Y that P issues exactly when ``fenced[P, C] >= t``: the
  proxy fence lies on the causality path from X to Y (PTX ISA, "fence": bi-directional proxy
  fences "take effect within a single thread" and compose with other synchronisation through
  the memory model; Lustig et al., "Mixed-Proxy Extensions for the NVIDIA PTX Memory
  Consistency Model", ISCA 2022, section 6.2.4, proxy-preserved base causality order);
* ``seen[P, b]``: per mbarrier b, the phases whose completion P has observed (a successful wait
  of P, or of a thread ordered before P): ``seen > p`` when phase p is known complete. The bytes
  a bulk load landed in phase p are visible to P's generic accesses exactly then.

A release (a barrier arrival, an mbarrier arrival, a fence) first sets the thread's own entry to
now; the barrier merges (element-wise maximum) the rows of the threads that arrived into the
rows of the threads it releases; an mbarrier keeps, per phase, the maximum of its arrivals' rows
and hands the completed phases' maximum to a successful waiter. ``bar.warp.sync`` merges the
rows of the lanes that execute it.

Cost: two int32 matrices of (batch threads) x (CTA threads) and a column per mbarrier, made only
for kernels that use the async proxy; a barrier merges rows with a few numpy operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .context import ExecContext
    from .program import Idx

NONE = -1


class Causality:
    """One batch's vector clocks (see the module doc)."""

    def __init__(self, ctx: ExecContext):
        self.n = ctx.n
        self.cta_threads = ct = ctx.cta_threads
        self.n_ctas = ctx.n_ctas
        self.local = ctx.ltid.astype(np.int64)
        self.cta = ctx.cta
        self.stride = ctx.shared_stride
        # clock | seen: one matrix, so a merge is one operation; seen grows a column per mbarrier
        self.rows = np.full((ctx.n, ct), NONE, dtype=np.int32)
        self.fenced = np.full((ctx.n, ct), NONE, dtype=np.int32)
        self.columns: dict[int, int] = {}  # an mbarrier's CTA-local byte offset -> its column in rows
        self.arrived: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # (cta, barrier id) -> merged rows
        self.mbar_pending: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}  # key -> phase -> rows
        self.mbar_done: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # key -> rows of its completed phases

    # --- queries ------------------------------------------------------------------------------

    def ordered(self, thread: int, others: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Per access (thread ``others``, time ``times``; NONE: no access): whether it precedes
        ``thread``'s current point (its own accesses do, by program order)."""
        know = self.rows[thread, self.local[np.where(others >= 0, others, 0)]]
        return (times < 0) | (others == thread) | (know >= times)

    def fenced_for(self, threads: np.ndarray, others: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Per generic access (``others``, ``times``): whether a proxy fence on a causality path
        from it precedes the current point of some thread of ``threads`` (the issuers of one async
        operation: a warpgroup's wgmma is after each of its threads' program points)."""
        cols = self.local[np.where(others >= 0, others, 0)]
        best = self.fenced[threads][:, cols].max(axis=0) if len(threads) > 1 else self.fenced[int(threads[0]), cols]
        return (times < 0) | (best >= times)

    def column(self, key: int) -> int:
        """The column of ``rows`` for the mbarrier at batch-wide offset ``key`` (made on first use)."""
        local = key % self.stride
        col = self.columns.get(local)
        if col is None:
            col = self.rows.shape[1]
            self.columns[local] = col
            self.rows = np.concatenate([self.rows, np.full((self.n, 1), NONE, dtype=np.int32)], axis=1)
            for table in (self.arrived, *self.mbar_pending.values(), self.mbar_done):
                for k, (r, f) in list(table.items()):
                    table[k] = (np.append(r, NONE).astype(np.int32), f)
        return col

    def seen(self, threads: np.ndarray, key: int) -> np.ndarray:
        """Per thread: the first phase of the mbarrier ``key`` it has not observed complete."""
        col = self.columns.get(key % self.stride)
        return np.full(len(threads), NONE, dtype=np.int32) if col is None else self.rows[threads, col]

    # --- releases and acquires -----------------------------------------------------------------

    def _stamp(self, threads: np.ndarray, now: int) -> None:
        self.rows[threads, self.local[threads]] = now

    def _merged(self, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.rows[threads].max(axis=0), self.fenced[threads].max(axis=0)

    def _grouped(self, threads: np.ndarray, labels: np.ndarray) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
        """Per distinct label: the label, the maximum of its threads' rows and fenced rows, and
        each thread's group number (one numpy reduction for every group)."""
        order = np.argsort(labels, kind="stable")
        t, lab = threads[order], labels[order]
        starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])
        rows = np.maximum.reduceat(self.rows[t], starts, axis=0)
        fenced = np.maximum.reduceat(self.fenced[t], starts, axis=0)
        group = np.empty(threads.size, dtype=np.int64)
        group[order] = np.cumsum(np.r_[True, lab[1:] != lab[:-1]]) - 1
        return lab[starts].tolist(), rows, fenced, group

    def _acquire(self, threads: np.ndarray, rows: np.ndarray, fenced: np.ndarray) -> None:
        self.rows[threads] = np.maximum(self.rows[threads], rows)
        self.fenced[threads] = np.maximum(self.fenced[threads], fenced)

    def fence(self, threads: Idx, now: int) -> None:
        """``fence.proxy.async`` (shared): everything its threads know precedes it."""
        t = np.arange(self.n) if threads is None else np.asarray(threads)
        self._stamp(t, now)
        self.fenced[t] = self.rows[t, : self.cta_threads]

    def bar_arrive(self, threads: np.ndarray, ids: np.ndarray, now: int) -> None:
        """Threads arrived at named barriers ``ids``: their rows join the barrier's."""
        self._stamp(threads, now)
        labels, rows, fenced, _ = self._grouped(threads, self.cta[threads] * 16 + ids)
        for i, key in enumerate(labels):
            cta_id = (key // 16, key % 16)
            old = self.arrived.get(cta_id)
            merged = (rows[i], fenced[i])
            self.arrived[cta_id] = merged if old is None else (np.maximum(old[0], rows[i]), np.maximum(old[1], fenced[i]))

    def bar_release(self, threads: Idx, ids: np.ndarray | None, now: int) -> None:
        """Threads released from barriers (``ids`` per thread); None: the whole batch arrived at
        one barrier together (every CTA's threads merge)."""
        if threads is None:
            self._stamp(np.arange(self.n), now)
            shape = (self.n_ctas, self.cta_threads, -1)
            for table in (self.rows, self.fenced):
                merged = table.reshape(shape).max(axis=1)
                table[:] = np.repeat(merged, self.cta_threads, axis=0)
            self.arrived.clear()
            return
        threads = np.asarray(threads)
        assert ids is not None
        keys = self.cta[threads] * 16 + ids
        for key in np.unique(keys).tolist():
            merged = self.arrived.pop((key // 16, key % 16), None)
            if merged is not None:
                self._acquire(threads[keys == key], *merged)

    def warp_sync(self, threads: Idx, now: int) -> None:
        """``bar.warp.sync``: the executing lanes of each warp merge their rows."""
        t = np.arange(self.n) if threads is None else np.asarray(threads)
        self._stamp(t, now)
        _, rows, fenced, group = self._grouped(t, t // 32)  # CTAs hold whole warps: batch-wide warps
        self.rows[t] = rows[group]
        self.fenced[t] = fenced[group]

    def mbarrier_init(self, key: int, thread: int) -> None:
        """``mbarrier.init`` (again, say after ``inval``): phase 0 again, nothing observed."""
        col = self.columns.get(key % self.stride)
        if col is not None:
            self.rows[self.cta == self.cta[thread], col] = NONE
        self.mbar_pending.pop(key, None)
        self.mbar_done.pop(key, None)

    def mbarrier_arrive(self, threads: np.ndarray, keys: np.ndarray, phases: np.ndarray, now: int) -> None:
        """Arrivals (releases) of ``threads`` at mbarriers ``keys`` in ``phases``."""
        self._stamp(threads, now)
        for key in np.unique(keys).tolist():
            self.column(key)
        labels, rows, fenced, _ = self._grouped(threads, keys.astype(np.int64) * (1 << 24) + phases)
        for i, label in enumerate(labels):
            key, phase = divmod(label, 1 << 24)
            pending = self.mbar_pending.setdefault(key, {})
            old = pending.get(phase)
            pending[phase] = (rows[i], fenced[i]) if old is None else (np.maximum(old[0], rows[i]), np.maximum(old[1], fenced[i]))

    def mbarrier_acquire(self, threads: np.ndarray, keys: np.ndarray, phases: np.ndarray) -> None:
        """Successful waits of ``threads`` on mbarriers ``keys``, now in ``phases``: they observe
        every phase before it complete and acquire its arrivals."""
        for key in np.unique(keys).tolist():
            mine = keys == key
            waiters, phase = threads[mine], int(phases[mine].max())
            col = self.column(key)
            pending = self.mbar_pending.get(key, {})
            for done in [p for p in pending if p < phase]:
                rows, fenced = pending.pop(done)
                old = self.mbar_done.get(key)
                self.mbar_done[key] = (rows, fenced) if old is None else (np.maximum(old[0], rows), np.maximum(old[1], fenced))
            if key in self.mbar_done:
                self._acquire(waiters, *self.mbar_done[key])
            self.rows[waiters, col] = np.maximum(self.rows[waiters, col], phases[mine])
