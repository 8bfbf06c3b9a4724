"""Runs one batch of CTAs: per-thread PCs, lowest-PC-first scheduling, CTA barriers.

Scheduling rule: at every step, execute the instruction at the lowest PC among runnable threads,
for exactly the threads at that PC. Diverged threads therefore wait at the join point until
the others catch up, and reconverge. Two modes keep this cheap:

* converged: every runnable thread is at one PC (``active`` is None for "all threads", or the
  index array of the runnable ones). Nothing is scanned: ops run on whole arrays.
* diverged: ``sched`` holds each runnable thread's PC (PARKED for waiting/exited threads); each
  step takes its minimum. As soon as every runnable thread is at that minimum the runner
  switches back to converged.

Barriers (bar.sync/barrier.sync/bar.arrive, ids 0..15, optional thread count) are per CTA. By
default exited threads count as arrived, as on the hardware (``exited_release``). Under the
simulator's ``synccheck`` option every thread of the CTA must arrive: a CTA whose other threads
exited can never release. Either way, a CTA whose threads wait at a different barrier can never
release, and when nothing can run any more the runner raises KaioSimError naming the barrier's
PTX line.

``setmaxnreg.inc`` parks its threads (HELD) until the CTA's register pool can give them their
registers (``register_pool``); the op says which threads to park and which to let go through
``ctx.held`` / ``ctx.resumed``. Under a schedule seed (``ctx.rng``) the runner never runs in
converged mode: ``schedule.AdversarialSchedule`` picks the warps of each step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import ExecContext
from .faults import SimFault
from .program import Op, OpKind
from .schedule import AdversarialSchedule

PARKED = np.iinfo(np.int64).max
# Threads whose spin-wait just failed (mbarrier.try_wait false) are scheduled at
# pc + BACKOFF x (the step it failed at): they run again only once no other thread can, so a
# consumer polling at a lower PC than its producer (warp-specialised pipelines) does not starve
# it; and among spinners the one that failed longest ago goes first, so a producer spinning at
# a lower PC does not starve consumers whose wait would now succeed either.
BACKOFF = 1 << 40
BACKOFF_RANKS = (1 << 22) - 2  # steps told apart (beyond, spinners go by PC): keeps keys in int64
# Steps of nothing but mbarrier waits that fail and change nothing, and branches, after which
# the batch is deadlocked: no thread that can run does anything that could complete a phase
# (a spinner runs only when no other thread can, so the others are parked at a barrier or gone)
FROZEN_STEPS = 20_000
RUNNABLE, WAITING, EXITED, HELD = 0, 1, 2, 3
NUM_BARRIERS = 16
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class BatchStats:
    steps: int = 0
    thread_instructions: int = 0
    barriers: int = 0  # steps that executed a barrier instruction
    barrier_releases: int = 0  # per CTA: times one of its barriers released its waiting threads
    by_pc: np.ndarray | None = None  # profile=True: thread-instructions per instruction
    warp_requests: np.ndarray | None = None  # profile=True: warp-level executions per instruction


class SimDeadlock(Exception):
    """No thread can run but some wait at a barrier; carries what the error message needs."""

    def __init__(self, message: str, thread: int, line: int):
        self.message = message
        self.thread = thread
        self.line = line
        super().__init__(message)


class BatchRunner:
    def __init__(self, ctx: ExecContext, ops: list[Op], *, exited_release: bool, max_steps: int, profile: bool):
        self.ctx = ctx
        self.ops = ops
        self.n = ctx.n
        self.exited_release = exited_release
        self.max_steps = max_steps
        self.profile = profile
        self.stats = BatchStats()
        if profile:
            self.stats.by_pc = np.zeros(len(ops), dtype=np.int64)
            self.stats.warp_requests = np.zeros(len(ops), dtype=np.int64)
        self.race = ctx.race
        self.track = profile or self.race is not None  # something wants the PC of every step
        self.current: Op | None = None
        # scheduler state
        self.sched = np.zeros(0, dtype=np.int64)
        self.n_runnable = self.n
        self.n_waiting = 0
        self.n_exited = 0
        self._status: np.ndarray | None = None
        self._bar: _BarrierState | None = None
        self.n_held = 0  # threads parked at a setmaxnreg.inc
        self._resume_at: np.ndarray | None = None
        self.adversary = AdversarialSchedule(ctx, ops, ctx.rng, BACKOFF) if ctx.rng is not None else None

    # --- per-thread state, allocated the first time something diverges ------------------------

    @property
    def status(self) -> np.ndarray:
        if self._status is None:
            self._status = np.full(self.n, RUNNABLE, dtype=np.int8)
        return self._status

    @property
    def bar(self) -> _BarrierState:
        if self._bar is None:
            self._bar = _BarrierState(self.ctx)
        return self._bar

    # --- the loop -------------------------------------------------------------------------------

    def run(self) -> BatchStats:
        ops, ctx, stats = self.ops, self.ctx, self.stats
        n = self.n
        pc = 0
        active: np.ndarray | None = None  # converged mode: the runnable threads (None: all)
        converged = True
        adversary = self.adversary
        if adversary is not None:
            self._diverge(0, None)
            converged = False
        steps = 0
        frozen = 0  # consecutive steps that could change nothing (FROZEN_STEPS)
        while True:
            if converged:
                at, sel = pc, active
                if sel is not None and sel.size == 0:
                    break
            else:
                picked = adversary.pick(self.sched) if adversary is not None else None
                if picked is not None:
                    at, sel = picked
                else:
                    lowest = int(self.sched.min())
                    if lowest == PARKED:
                        break
                    at = lowest & (BACKOFF - 1)
                    sel = np.flatnonzero(self.sched == lowest)
                    if sel.size == self.n_runnable and adversary is None:
                        converged, pc, active = True, at, (None if sel.size == n else sel)
                        sel = active
            steps += 1
            if steps > self.max_steps:
                self.current = ops[at]
                raise SimFault("sim", f"step limit of {self.max_steps} exceeded (an endless loop, or a spin wait no other CTA can satisfy)", 0 if sel is None else int(sel[0]))
            op = ops[at]
            self.current = op
            ctx.clock = steps
            ctx.pc = at

            on, off = sel, _EMPTY
            if op.guard is not None:
                g = ctx.regs[op.guard] if sel is None else ctx.regs[op.guard][sel]
                if op.guard_negated:
                    g = ~g
                if not g.all():
                    if not g.any():
                        on, off = _EMPTY, (np.arange(n) if sel is None else sel)
                    elif sel is None:
                        on, off = np.flatnonzero(g), np.flatnonzero(~g)
                    else:
                        on, off = sel[g], sel[~g]
            count = n if on is None else on.size
            stats.thread_instructions += count
            if self.track and count:
                self._count(at, on, count)

            kind = op.kind
            if kind != OpKind.SIMPLE and kind != OpKind.BRANCH:
                frozen = 0
            if kind == OpKind.SIMPLE:
                if count:
                    op.run(ctx, on)  # type: ignore[misc]
                if ctx.stalled:
                    ctx.stalled = False
                    frozen += 1
                    if frozen > FROZEN_STEPS:
                        raise SimFault("sim", f"deadlock: for {FROZEN_STEPS} steps every thread that can run has only polled mbarrier "
                                              "phases that nothing will complete (a missing arrive or expect_tx, or a wait on the "
                                              "wrong parity)", 0 if on is None else int(on[0]))  # fmt: skip
                else:
                    frozen = 0
                if converged:
                    pc = at + 1
                else:
                    self.sched[sel] = at + 1
                if ctx.spinning is not None or ctx.held is not None or ctx.resumed is not None:
                    if converged:
                        self._diverge(at + 1, active)
                        converged = False
                    self._park_and_resume(at + 1)
                continue

            if kind == OpKind.BRANCH:
                frozen += frozen > 0  # a spin loop's branch neither breaks nor starts a frozen run
                if converged:
                    if off.size == 0:
                        pc = op.target
                        continue
                    if count == 0:
                        pc = at + 1
                        continue
                    self._diverge(at, active)
                    converged = False
                self.sched[on] = op.target
                self.sched[off] = at + 1
                continue

            if kind == OpKind.EXIT:
                if count:
                    self._exit(np.arange(n) if on is None else on)
                if not converged:
                    self.sched[off] = at + 1
                else:
                    pc = at + 1
                    if count:
                        active = off  # the threads whose guard kept them alive (maybe none)
                    if self.n_waiting and self.exited_release:
                        self._diverge(pc, active)
                        converged = False
                if self.n_waiting and self.exited_release:
                    self._release_ready()
                continue

            if kind == OpKind.TRAP:
                if count:
                    raise SimFault("sim", "trap instruction executed", 0 if on is None else int(on[0]))
                if converged:
                    pc = at + 1
                else:
                    self.sched[sel] = at + 1
                continue

            # barrier
            stats.barriers += 1
            spec = op.barrier
            assert spec is not None
            if (
                converged
                and on is None
                and spec.thread_count is None
                and self.n_waiting == 0
                and self.n_exited == 0
                and np.ndim(spec.barrier_id(ctx, None)) == 0
                and spec.reduction is None
            ):
                pc = at + 1  # the whole batch arrives together: every CTA releases at once
                stats.barrier_releases += ctx.n_ctas
                if self.race is not None:
                    self.race.barrier()
                if ctx.async_proxy is not None:  # every CTA's threads are ordered after each other
                    ctx.async_proxy.barrier_release(ctx, None, None)
                continue
            if converged:
                self._diverge(at, active)
                converged = False
            self.sched[off] = at + 1
            if count:
                self._arrive(at, np.arange(n) if on is None else on, op)
        if ctx.async_proxy is not None:  # bulk copies still in flight land, stores complete
            ctx.async_proxy.drain(ctx)
        stats.steps = steps
        if self.n_held and ctx.register_pool is not None:
            ctx.register_pool.finish()
        if self.n_waiting:
            self._deadlock()
        return stats

    def _count(self, at: int, on: np.ndarray | None, count: int) -> None:
        if self.race is not None:
            self.race.pc = at
        if not self.profile:
            return
        stats, ctx = self.stats, self.ctx
        assert stats.by_pc is not None and stats.warp_requests is not None
        stats.by_pc[at] += count
        if on is None:
            stats.warp_requests[at] += ctx.warp_existing_lanes.size
        else:
            warps = ctx.warp[on]
            stats.warp_requests[at] += 1 + int(np.count_nonzero(warps[1:] != warps[:-1]))
        if ctx.profiler is not None:
            ctx.profiler.pc = at

    # --- state transitions ----------------------------------------------------------------------

    def _diverge(self, pc: int, active: np.ndarray | None) -> None:
        self.sched = np.full(self.n, PARKED, dtype=np.int64)
        if active is None:
            self.sched[:] = pc
        else:
            self.sched[active] = pc

    def _park_and_resume(self, next_pc: int) -> None:
        """Apply what the op just run asked for: back off spinners, park the threads a
        setmaxnreg.inc holds, and let go the ones it granted (at the op after theirs)."""
        ctx = self.ctx
        if ctx.spinning is not None:
            threads, ctx.spinning = ctx.spinning, None
            self.sched[threads] = next_pc + BACKOFF * (1 + min(ctx.clock, BACKOFF_RANKS))
        if ctx.held is not None:
            threads, ctx.held = ctx.held, None
            if self._resume_at is None:
                self._resume_at = np.zeros(self.n, dtype=np.int64)
            self._resume_at[threads] = next_pc
            self.status[threads] = HELD
            self.sched[threads] = PARKED
            self.n_runnable -= threads.size
            self.n_held += threads.size
        if ctx.resumed is not None:
            threads, ctx.resumed = ctx.resumed, None
            assert self._resume_at is not None
            self.status[threads] = RUNNABLE
            self.sched[threads] = self._resume_at[threads]
            self.n_runnable += threads.size
            self.n_held -= threads.size

    def _exit(self, threads: np.ndarray) -> None:
        self._check_no_copy_in_flight(threads)
        self.status[threads] = EXITED
        if self.sched.size:
            self.sched[threads] = PARKED
        self.n_runnable -= threads.size
        self.n_exited += threads.size
        self.bar.exited += np.bincount(self.ctx.cta[threads], minlength=self.ctx.n_ctas)
        if self.ctx.register_pool is not None:
            self.ctx.register_pool.exited(threads)

    def _check_no_copy_in_flight(self, threads: np.ndarray) -> None:
        """A thread may not end with ``cp.async`` copies not yet waited for: the ISA completes a
        copy only at a wait of its thread, so the bytes' landing is undefined after the thread
        is gone (and an exited CTA's shared memory belongs to the next). CUTLASS and Triton
        drain the ring (``cp.async.wait_group 0``) after their main loops."""
        self._check_no_async_read_in_flight(threads)
        copies = self.ctx.async_copies
        if copies is None or not copies.pending:
            return
        for p in copies.pending:
            still = np.intersect1d(p.threads, threads)
            if still.size:
                raise SimFault(
                    "sim",
                    f"the thread exits with a cp.async of PTX line {self.ops[p.pc].line} still in flight "
                    "(committed or not, never waited for): wait for every copy (cp.async.wait_group 0 "
                    "or cp.async.wait_all) before the kernel ends",
                    int(still.min()),
                )

    def _check_no_async_read_in_flight(self, threads: np.ndarray) -> None:
        """Nor with the async proxy still reading its CTA's shared memory: a TMA store not
        waited for (``cp.async.bulk.wait_group.read``, after its ``commit_group``) or a wgmma
        not retired (``wgmma.wait_group``). The CTA's shared memory is gone when its threads
        are (CUTLASS's epilogue ends with ``tma_store_wait<0>()``)."""
        proxy = self.ctx.async_proxy
        if proxy is None or not proxy.reads:
            return
        for read in proxy.reads.values():
            if np.isin(read.owner, threads):
                what, wait = (("TMA store", "cp.async.bulk.commit_group and cp.async.bulk.wait_group.read 0")
                              if read.what == "store" else ("wgmma.mma_async", "wgmma.wait_group 0"))  # fmt: skip
                raise SimFault(
                    "sim",
                    f"the thread exits while the {what} of PTX line {self.ops[read.pc].line} still reads shared memory: "
                    f"wait for it ({wait}) before the kernel ends",
                    read.owner,
                )

    def _arrive(self, at: int, threads: np.ndarray, op: Op) -> None:
        spec = op.barrier
        assert spec is not None
        ctx, bar = self.ctx, self.bar
        ids = np.broadcast_to(np.asarray(spec.barrier_id(ctx, threads)).astype(np.int64), threads.shape)
        if (ids >= NUM_BARRIERS).any():
            k = int(np.flatnonzero(ids >= NUM_BARRIERS)[0])
            raise SimFault("sim", f"barrier id {int(ids[k])} is out of range 0..15", int(threads[k]))
        ctas = ctx.cta[threads]
        if spec.thread_count is not None:
            counts = np.broadcast_to(np.asarray(spec.thread_count(ctx, threads)).astype(np.int64), threads.shape)
            if ((counts % 32) != 0).any() or (counts <= 0).any():
                k = int(np.flatnonzero(((counts % 32) != 0) | (counts <= 0))[0])
                raise SimFault("sim", f"barrier thread count {int(counts[k])} is not a positive multiple of 32", int(threads[k]))
            np.maximum.at(bar.expected, (ctas, ids), counts)
        np.add.at(bar.arrived, (ctas, ids), 1)
        if self.race is not None:
            self.race.arrive(threads, ids)
        if ctx.async_proxy is not None:  # an arrival releases what its thread did before
            ctx.async_proxy.barrier_arrive(ctx, threads, ids)
        if spec.reduction is not None:
            bar.red_value[threads] = np.broadcast_to(np.asarray(spec.reduction.value(ctx, threads)), threads.shape)
        if spec.wait:
            self.status[threads] = WAITING
            bar.wait_pc[threads] = at
            bar.wait_id[threads] = ids
            bar.counted[threads] = spec.thread_count is not None
            self.sched[threads] = PARKED
            self.n_runnable -= threads.size
            self.n_waiting += threads.size
        else:
            self.sched[threads] = at + 1
        self._release_ready(np.unique(ctas))

    def _release_ready(self, ctas: np.ndarray | None = None) -> None:
        """Release every barrier of ``ctas`` (default: all) whose arrivals are complete."""
        ctx, bar = self.ctx, self.bar
        rows = np.arange(ctx.n_ctas) if ctas is None else ctas
        full = ctx.cta_threads - (bar.exited[rows] if self.exited_release else np.zeros(rows.size, dtype=np.int64))
        expected = np.where(bar.expected[rows] > 0, bar.expected[rows], full[:, None])
        arrived = bar.arrived[rows]
        ready = (arrived >= expected) & (arrived > 0)
        if not ready.any():
            return
        ready_all = np.zeros_like(bar.arrived, dtype=bool)
        ready_all[rows] = ready
        waiting = np.flatnonzero(self.status == WAITING)
        released = waiting[ready_all[ctx.cta[waiting], bar.wait_id[waiting]]]
        if released.size:
            self._check_same_barrier(released)
            self._reduce(released)
            self.status[released] = RUNNABLE
            self.sched[released] = bar.wait_pc[released] + 1
            self.n_runnable += released.size
            self.n_waiting -= released.size
            if ctx.async_proxy is not None:  # the released threads are ordered after the arrivals
                ctx.async_proxy.barrier_release(ctx, released, bar.wait_id[released])
        self.stats.barrier_releases += int(ready.sum())
        if self.race is not None:
            # new race epochs: a CTA-wide release orders its whole CTA, a counted barrier that
            # covers only part of the CTA the threads that arrived at it
            r, barrier_id = np.nonzero(ready)
            self.race.release(rows[r], barrier_id, expected[r, barrier_id] >= full[r])
        bar.arrived[rows] = np.where(ready, np.maximum(arrived - expected, 0), arrived)
        bar.expected[rows] = np.where(ready, 0, bar.expected[rows])

    def _reduce(self, released: np.ndarray) -> None:
        """bar.red: give the threads released at a reducing barrier the reduction of the
        predicates of everyone released with them (same CTA and barrier id)."""
        bar, ctx = self.bar, self.ctx
        for pc in np.unique(bar.wait_pc[released]):
            reduction = self.ops[int(pc)].barrier.reduction  # type: ignore[union-attr]
            if reduction is None:
                continue
            threads = released[bar.wait_pc[released] == pc]
            key = ctx.cta[threads] * NUM_BARRIERS + bar.wait_id[threads]
            groups, which = np.unique(key, return_inverse=True)
            true = np.bincount(which, weights=bar.red_value[threads], minlength=groups.size).astype(np.int64)
            total = np.bincount(which, minlength=groups.size)
            result = {"popc": true, "and": true == total, "or": true > 0}[reduction.op][which]
            reduction.result(ctx, threads, result.astype(np.uint32) if reduction.op == "popc" else result)

    def _check_same_barrier(self, released: np.ndarray) -> None:
        """A CTA-wide barrier whose waiters sit at different bar.sync instructions means a
        barrier inside divergent code (counted, named barriers legitimately differ)."""
        bar = self.bar
        whole_cta = released[~bar.counted[released]]
        if whole_cta.size == 0:
            return
        key = self.ctx.cta[whole_cta] * NUM_BARRIERS + bar.wait_id[whole_cta]
        pcs = bar.wait_pc[whole_cta]
        lowest = np.full(self.ctx.n_ctas * NUM_BARRIERS, PARKED, dtype=np.int64)
        highest = np.full(self.ctx.n_ctas * NUM_BARRIERS, -1, dtype=np.int64)
        np.minimum.at(lowest, key, pcs)
        np.maximum.at(highest, key, pcs)
        split = lowest[key] != highest[key]
        if split.any():
            k = int(np.flatnonzero(split)[0])
            lines = " and ".join(str(self.ops[int(p)].line) for p in (lowest[key[k]], highest[key[k]]))
            raise SimFault(
                "sim",
                f"threads of one block wait at different barrier instructions (PTX lines {lines}): "
                "a barrier inside divergent code",
                int(whole_cta[k]),
            )

    def _deadlock(self) -> None:
        ctx, bar = self.ctx, self.bar
        t = int(np.flatnonzero(self.status == WAITING)[0])
        cta = int(ctx.cta[t])
        first = cta * ctx.cta_threads
        block = slice(first, first + ctx.cta_threads)
        status = self.status[block]
        here = (status == WAITING) & (bar.wait_pc[block] == bar.wait_pc[t])
        exited = int((status == EXITED).sum())
        elsewhere = (status == WAITING) & ~here
        op = self.ops[int(bar.wait_pc[t])]
        parts = [f"only {int(here.sum())} of {ctx.cta_threads} threads of the block arrived"]
        if exited:
            parts.append(f"{exited} exited without arriving")
        if elsewhere.any():
            lines = sorted({self.ops[int(p)].line for p in bar.wait_pc[block][elsewhere]})
            parts.append(f"{int(elsewhere.sum())} wait at another barrier (PTX line {', '.join(map(str, lines))})")
        raise SimDeadlock(f"deadlock at {op.text.rstrip(';')!r}: " + "; ".join(parts), t, op.line)


class _BarrierState:
    def __init__(self, ctx: ExecContext):
        self.arrived = np.zeros((ctx.n_ctas, NUM_BARRIERS), dtype=np.int64)
        self.expected = np.zeros((ctx.n_ctas, NUM_BARRIERS), dtype=np.int64)
        self.exited = np.zeros(ctx.n_ctas, dtype=np.int64)
        self.wait_pc = np.zeros(ctx.n, dtype=np.int64)
        self.wait_id = np.full(ctx.n, -1, dtype=np.int64)
        self.counted = np.zeros(ctx.n, dtype=bool)
        self.red_value = np.zeros(ctx.n, dtype=bool)  # bar.red: each waiting thread's predicate
