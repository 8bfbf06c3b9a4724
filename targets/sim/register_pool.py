"""The CTA register pool that ``setmaxnreg`` trades in (PTX ISA, "setmaxnreg").

A CTA is launched with R registers per thread for every warp (R: ptxas's count at entry, see
``kaio.targets.ptx.registers``), so it holds R x 32 registers per warp and its pool of free
registers starts empty. ``setmaxnreg.dec N`` lowers the executing warp's count to N and returns
(current - N) x 32 registers per warp to the pool at once; ``setmaxnreg.inc N`` raises it to N and
*blocks* until the pool holds (N - current) x 32 per warp. The instruction is ``.sync.aligned``
over a warpgroup (four consecutive warps; all of them must execute the same one), so an
``.inc`` is granted to the whole warpgroup at once, once each of its warps has arrived and the
pool holds what all of them ask for. ``.dec`` to more than the current count, or ``.inc`` to
less, is an error, as the ISA says.

Registers of warps that exited stay with the CTA until the whole CTA ends: the ISA says nothing
of returning them to the pool, so the simulator assumes the stricter case, and a kernel that
counts on an exit to free registers is reported rather than trusted.

A blocked ``.inc`` that can never be granted is a deadlock reported with its reason: every
warpgroup waiting at an ``.inc`` needs more than the pool holds plus everything the warps that
are neither waiting there nor exited could still free (each down to the minimum of 24). Checked
whenever a warpgroup blocks, a warp exits, or the pool changes; the executor parks the blocked
threads (``ctx.held``) and resumes them when granted (``ctx.resumed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .context import WARP, ExecContext
from .executor import SimDeadlock
from .faults import SimFault

WARPGROUP_WARPS = 4
MIN_REGISTERS = 24  # the smallest count setmaxnreg may set


@dataclass
class PendingInc:
    """A warpgroup's ``.inc`` that some of its warps reached: who arrived, and what it asks."""

    count: int
    line: int
    text: str
    warps: set[int] = field(default_factory=set)  # batch warps that arrived
    threads: list[np.ndarray] = field(default_factory=list)  # their threads, held by the executor


class RegisterPool:
    """Per CTA of a batch: free registers, each warp's count per thread, the pending ``.inc``s."""

    def __init__(self, ctx: ExecContext, entry_registers: int):
        self.ctx = ctx
        self.entry = entry_registers
        self.warps_per_cta = ctx.warps_per_cta
        self.groups_per_cta = -(-self.warps_per_cta // WARPGROUP_WARPS)
        n_warps = ctx.n_ctas * self.warps_per_cta
        self.current = np.full(n_warps, entry_registers, dtype=np.int64)  # registers per thread
        self.live = np.ones(n_warps, dtype=bool)  # a warp with a thread that has not exited
        self.free = np.zeros(ctx.n_ctas, dtype=np.int64)
        self.pending: dict[int, PendingInc] = {}  # by batch warpgroup
        self._exited_threads = np.zeros(n_warps, dtype=np.int64)

    # --- geometry -------------------------------------------------------------------------------

    def group_of(self, warp: int) -> int:
        cta, w = divmod(warp, self.warps_per_cta)
        return cta * self.groups_per_cta + w // WARPGROUP_WARPS

    def warps_of(self, group: int) -> range:
        cta, g = divmod(group, self.groups_per_cta)
        first = cta * self.warps_per_cta + g * WARPGROUP_WARPS
        return range(first, min(first + WARPGROUP_WARPS, (cta + 1) * self.warps_per_cta))

    def lanes(self, warp: int) -> int:
        """Threads of a warp (the last warp of a CTA may be partial)."""
        w = warp % self.warps_per_cta
        return min(WARP, self.ctx.cta_threads - w * WARP)

    # --- the instruction ------------------------------------------------------------------------

    def execute(self, threads: np.ndarray, action: str, count: int, line: int, text: str) -> None:
        """``setmaxnreg.{action} count`` by ``threads`` (whole warps, already checked converged)."""
        ctx = self.ctx
        warps = ctx.warp[threads]
        for warp in np.unique(warps).tolist():
            first = int(threads[np.searchsorted(warps, warp)])
            have = int(self.current[warp])
            if action == "dec":
                if count > have:
                    raise SimFault("sim", f"setmaxnreg.dec to {count} registers, more than the warp's current {have}", first)
                self.free[warp // self.warps_per_cta] += (have - count) * self.lanes(warp)
                self.current[warp] = count
                continue
            if count < have:
                raise SimFault("sim", f"setmaxnreg.inc to {count} registers, fewer than the warp's current {have}", first)
            group = self.group_of(warp)
            pending = self.pending.setdefault(group, PendingInc(count, line, text))
            if pending.count != count or pending.line != line:
                raise SimFault(
                    "sim",
                    f"warps of one warpgroup execute different setmaxnreg instructions (PTX lines {pending.line} and {line})",
                    first,
                )
            pending.warps.add(warp)
            mine = threads[warps == warp]
            pending.threads.append(mine)
            ctx.held = mine if ctx.held is None else np.concatenate([ctx.held, mine])
            self._check_mates(group)
        self._grant()
        self._check()

    def exited(self, threads: np.ndarray) -> None:
        """Threads exited: a warp whose every thread exited frees nothing (see the module doc)
        but can no longer free registers or reach a setmaxnreg its warpgroup waits at."""
        np.add.at(self._exited_threads, self.ctx.warp[threads], 1)
        for warp in np.unique(self.ctx.warp[threads]).tolist():
            if self._exited_threads[warp] < self.lanes(warp):
                continue
            self.live[warp] = False
            self._check_mates(self.group_of(warp))
        self._check()

    def _check_mates(self, group: int) -> None:
        """Every warp of a warpgroup must execute its setmaxnreg: one that exited never will."""
        pending = self.pending.get(group)
        if pending is None:
            return
        for warp in self.warps_of(group):
            if warp not in pending.warps and not self.live[warp]:
                raise SimDeadlock(
                    f"deadlock at {pending.text.rstrip(';')!r}: warp {warp % self.warps_per_cta} of warpgroup "
                    f"{group % self.groups_per_cta} exited without executing it, and every warp of a "
                    "warpgroup must execute the same setmaxnreg",
                    int(np.concatenate(pending.threads)[0]),
                    pending.line,
                )

    # --- grants and deadlock --------------------------------------------------------------------

    def _arrived(self, group: int, pending: PendingInc) -> bool:
        return len(pending.warps) == len(self.warps_of(group))

    def _need(self, pending: PendingInc) -> int:
        return sum((pending.count - int(self.current[w])) * self.lanes(w) for w in pending.warps)

    def _grant(self) -> None:
        """Grant, in warpgroup order, every ``.inc`` whose warps all arrived and that the pool covers."""
        for group in sorted(self.pending):
            pending = self.pending[group]
            cta = group // self.groups_per_cta
            need = self._need(pending)
            if not self._arrived(group, pending) or need > self.free[cta]:
                continue
            self.free[cta] -= need
            for w in pending.warps:
                self.current[w] = pending.count
            del self.pending[group]
            threads = np.concatenate(pending.threads)
            held = self.ctx.held
            if held is not None:  # arrived in this very step: not parked yet, just not held
                self.ctx.held = held[~np.isin(held, threads)] if held.size else held
                if self.ctx.held.size == 0:
                    self.ctx.held = None
                threads = threads[~np.isin(threads, held)]
            if threads.size:
                self.ctx.resumed = threads if self.ctx.resumed is None else np.concatenate([self.ctx.resumed, threads])

    def _check(self) -> None:
        """Raise if some CTA's waiting ``.inc``s can never be granted."""
        if not self.pending:
            return
        by_cta: dict[int, list[int]] = {}
        for group in self.pending:
            by_cta.setdefault(group // self.groups_per_cta, []).append(group)
        for cta, groups in by_cta.items():
            waiting = {w for g in groups for w in self.pending[g].warps}
            warps = range(cta * self.warps_per_cta, (cta + 1) * self.warps_per_cta)
            could_free = sum(
                max(int(self.current[w]) - MIN_REGISTERS, 0) * self.lanes(w) for w in warps if self.live[w] and w not in waiting
            )
            free = int(self.free[cta])
            needs = [self._need(self.pending[g]) for g in groups]
            if min(needs) <= free + could_free:
                continue
            first = self.pending[min(groups)]
            names = ", ".join(str(g % self.groups_per_cta) for g in sorted(groups))
            each = "" if len(set(needs)) > 1 or len(needs) == 1 else f" ({needs[0]} each)"
            threads = self.ctx.cta_threads
            raise SimDeadlock(
                f"deadlock at {first.text.rstrip(';')!r}: warpgroup{'s' if len(groups) > 1 else ''} {names} "
                f"need{'s' if len(groups) == 1 else ''} {sum(needs)} more registers{each}, the pool holds {free} "
                f"after every .dec and the warps still running could free at most {could_free} more "
                f"(entry: {self.entry} registers x {threads} threads)",
                int(np.concatenate(first.threads)[0]),
                first.line,
            )

    def finish(self) -> None:
        """The batch ran out of runnable threads with ``.inc``s still waiting."""
        if not self.pending:
            return
        self._check()
        group = min(self.pending)
        pending = self.pending[group]
        missing = [w % self.warps_per_cta for w in self.warps_of(group) if w not in pending.warps and self.live[w]]
        if missing:
            reason = f"waits for its warps {', '.join(map(str, missing))} to execute it, and they wait elsewhere"
        else:
            reason = (
                f"needs {self._need(pending)} more registers, the pool holds {int(self.free[group // self.groups_per_cta])} "
                f"and every other warp waits or has exited (entry: {self.entry} registers x {self.ctx.cta_threads} threads)"
            )
        raise SimDeadlock(
            f"deadlock at {pending.text.rstrip(';')!r}: warpgroup {group % self.groups_per_cta} {reason}",
            int(np.concatenate(pending.threads)[0]),
            pending.line,
        )
