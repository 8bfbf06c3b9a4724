"""The seeded adversarial schedule: warps of a CTA that do not run in lockstep.

By default the executor runs every thread at the lowest PC together, so the warps of a CTA move
in lockstep and a kernel that reads another warp's store without a barrier between them works
by luck. Hardware promises no such order. Under ``Simulator(schedule_seed=...)`` the executor
asks :meth:`AdversarialSchedule.pick` which threads run each step instead:

* the unit is the warp: only the lanes at their warp's lowest PC are candidates, so a diverged
  warp reconverges exactly as in the default schedule and ``.sync.aligned`` instructions
  (mma.sync, ldmatrix, shfl.sync, ...) still see their whole warp;
* instructions that are ``.aligned`` over a warpgroup (every ``wgmma.*``) gather it: a warp
  reaching one waits until all four warps of its warpgroup are there, and they run together;
* each step picks the PC of a random ready warp and runs a random non-empty subset of the
  warps there, so a warp may fall any number of instructions behind the others;
* threads backed off from a failed spin-wait run only when no other thread can, as in the
  default schedule (a consumer polling its producer must not starve it).

When no warp is a candidate, the spinner that backed off longest ago runs; when there is none
either (every runnable warp waits for the rest of its warpgroup) the executor falls back to the
default rule, so errors such as "wgmma executed by part of a warpgroup" are still reported
rather than hanging. The generator is seeded from the
simulator's seed, the kernel's name and the batch, so a launch replays identically.
"""

from __future__ import annotations

import zlib

import numpy as np

from .context import WARP, ExecContext
from .program import Op

WARPGROUP_WARPS = 4


def launch_rng(seed: int, kernel: str, first_cta: int) -> np.random.Generator:
    """The generator of one batch: the same seed, kernel and batch give the same schedule."""
    return np.random.default_rng([seed, zlib.crc32(kernel.encode()), first_cta])


class AdversarialSchedule:
    def __init__(self, ctx: ExecContext, ops: list[Op], rng: np.random.Generator, backoff: int):
        self.rng = rng
        self.backoff = backoff
        self.starts = np.flatnonzero(ctx.ltid % WARP == 0)  # first thread of each batch warp
        self.warp = ctx.warp
        self.n_warps = self.starts.size
        gathers = np.array([op.klass.startswith("wgmma") for op in ops] + [False])
        # blocks that are not whole warpgroups cannot run wgmma at all (its op reports that)
        self.gathers = gathers if gathers.any() and ctx.warps_per_cta % WARPGROUP_WARPS == 0 else None

    def pick(self, sched: np.ndarray) -> tuple[int, np.ndarray] | None:
        """(pc, threads) to run next, or None when the default rule must choose."""
        first_pc = np.minimum.reduceat(sched, self.starts)  # per warp: its lowest key
        ready = first_pc < self.backoff  # neither parked nor backing off
        gathered = self.gathers
        if gathered is not None:
            at_gather = gathered[np.where(ready, first_pc, gathered.size - 1)]
            if at_gather.any():
                last_pc = np.maximum.reduceat(sched, self.starts)
                lo = first_pc.reshape(-1, WARPGROUP_WARPS).min(axis=1)
                hi = last_pc.reshape(-1, WARPGROUP_WARPS).max(axis=1)
                ready &= ~at_gather | np.repeat(lo == hi, WARPGROUP_WARPS)
        candidates = np.flatnonzero(ready)
        if candidates.size == 0:
            return self._spinners(sched)
        pc = int(first_pc[candidates[self.rng.integers(candidates.size)]])
        here = candidates[first_pc[candidates] == pc]
        if gathered is not None and gathered[pc]:
            groups = np.unique(here // WARPGROUP_WARPS)
            groups = groups[self._subset(groups.size)]
            here = (groups[:, None] * WARPGROUP_WARPS + np.arange(WARPGROUP_WARPS)).ravel()
        else:
            here = here[self._subset(here.size)]
        chosen = np.zeros(self.n_warps, dtype=bool)
        chosen[here] = True
        return pc, np.flatnonzero((sched == pc) & chosen[self.warp])

    def _spinners(self, sched: np.ndarray) -> tuple[int, np.ndarray] | None:
        """No warp is ready: the threads that backed off longest ago try their wait again (as
        in the default schedule), rather than warps still gathering their warpgroup."""
        spinning = sched[(sched >= self.backoff) & (sched != np.iinfo(np.int64).max)]
        if spinning.size == 0:
            return None
        key = int(spinning.min())
        return key & (self.backoff - 1), np.flatnonzero(sched == key)

    def _subset(self, n: int) -> np.ndarray:
        """A random non-empty subset of n items, as a mask (each kept with probability 1/2)."""
        keep = self.rng.random(n) < 0.5
        if not keep.any():
            keep[self.rng.integers(n)] = True
        return keep
