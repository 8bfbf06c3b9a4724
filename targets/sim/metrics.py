"""Memory metrics of a profiled launch, counted per instruction the way NVIDIA's profilers do.

A *request* is one warp executing one memory instruction (the lanes that execute it together,
so a diverged warp makes one request per group of lanes at the same PC).

Global memory (ld/st ``.global`` or generic addresses that resolve to global, atom/red on global
memory, the source reads of cp.async): per request, the distinct 32-byte sectors its lanes touch
and the distinct bytes they ask for (a byte read by several lanes counts once; cp.async counts
its src-size bytes, and a lane that reads nothing counts nothing). Efficiency = bytes /
(32 x sectors): 100 % when a warp reads consecutive, aligned data; 12.5 % for 4-byte reads at a
stride of 32 bytes or more.

Shared memory (32 banks of 4 bytes; bank = (address / 4) mod 32): a request is split into the
phases the hardware serves separately, and each phase costs as many *wavefronts* as its most
loaded bank has distinct 4-byte words (several lanes reading one word is a broadcast: one
word). Phases: accesses of up to 4 bytes, one phase of the whole warp; 8-byte accesses, two
half-warp phases (lanes 0-15, 16-31); 16-byte accesses (``.v4.b32``, cp.async 16), four
quarter-warp phases of 8 lanes; ldmatrix, one phase per 8x8 matrix (its 8 rows of 16 bytes).
Ideal wavefronts = phases; *ways* = wavefronts / phases (1 = conflict-free, 32 = a column of a
32-float-wide array); bank conflicts = wavefronts - phases, as Nsight Compute reports them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import WARP, ExecContext
from .memory import GLOBAL_BASE
from .program import Idx, Op

SECTOR_BYTES = 32
BANKS = 32
BANK_BYTES = 4


@dataclass
class GlobalCounts:
    requests: int = 0
    sectors: int = 0
    bytes: int = 0


@dataclass
class SharedCounts:
    access: str  # "load", "store", "ldmatrix", "cp.async write"
    requests: int = 0
    wavefronts: int = 0
    phases: int = 0
    max_ways: int = 0


class Profiler:
    """Collects the memory metrics of one launch (every batch) per instruction."""

    def __init__(self, ops: list[Op]):
        self.ops = ops
        self.pc = 0  # the instruction running now; the executor sets it before each step
        self.global_counts: dict[int, GlobalCounts] = {}
        self.shared_counts: dict[int, SharedCounts] = {}

    # --- global memory ----------------------------------------------------------------------

    def global_access(self, ctx: ExecContext, idx: Idx, addr: np.ndarray, nbytes: int | np.ndarray) -> None:
        """Lanes ``idx`` access ``nbytes`` (per lane, 0 = nothing) at global addresses ``addr``."""
        warp, a, size = _per_lane(ctx, idx, addr, nbytes)
        used = size > 0
        if not used.all():
            warp, a, size = warp[used], a[used], size[used]
        if warp.size == 0:
            return
        offset = (a - np.uint64(GLOBAL_BASE)).astype(np.int64)
        sector_keys = np.concatenate([_key(warp, offset // SECTOR_BYTES), _key(warp, (offset + size - 1) // SECTOR_BYTES)])
        distinct, first = np.unique(_key(warp, offset), return_index=True)
        counts = self.global_counts.setdefault(self.pc, GlobalCounts())
        counts.requests += int(np.unique(warp).size)
        counts.sectors += int(np.unique(sector_keys).size)
        counts.bytes += int(size[first].sum()) if distinct.size else 0

    # --- shared memory ----------------------------------------------------------------------

    def shared_access(self, ctx: ExecContext, idx: Idx, addr: np.ndarray, nbytes: int, access: str = "cp.async write") -> None:
        """Lanes ``idx`` access ``nbytes`` each at shared (state-space) addresses ``addr``."""
        warp, a, _ = _per_lane(ctx, idx, addr, nbytes)
        lane = (ctx.lane if idx is None else ctx.lane[idx]).astype(np.int64)
        phases = max(nbytes // BANK_BYTES, 1)  # a phase moves at most 128 bytes: 8 B -> 2, 16 B -> 4
        phase = warp * WARP + lane // (WARP // phases)
        self._banks(warp, phase, a.astype(np.int64), max(nbytes, 1), access)

    def ldmatrix_access(self, ctx: ExecContext, row_threads: np.ndarray, addr: np.ndarray, count: int) -> None:
        """One phase per 8x8 matrix: rows ``addr`` (warp-major, matrix-major) of 16 bytes."""
        warp = ctx.warp[row_threads]
        matrix = np.tile(np.repeat(np.arange(count), 8), row_threads.size // (8 * count))
        self._banks(warp, warp * WARP + matrix, addr.astype(np.int64), 16, "ldmatrix")

    def _banks(self, warp: np.ndarray, phase: np.ndarray, addr: np.ndarray, nbytes: int, access: str) -> None:
        words_per_lane = max(nbytes // BANK_BYTES, 1)
        words = (addr // BANK_BYTES)[:, None] + np.arange(words_per_lane)
        keys = np.unique(_key(np.repeat(phase, words_per_lane), words.reshape(-1)))  # distinct words per phase
        phase_of, word = keys >> 32, keys & 0xFFFFFFFF
        bank_keys, load = np.unique(phase_of * BANKS + word % BANKS, return_counts=True)
        phase_ids, starts = np.unique(bank_keys // BANKS, return_index=True)
        ways = np.maximum.reduceat(load, starts) if load.size else load
        counts = self.shared_counts.setdefault(self.pc, SharedCounts(access))
        counts.requests += int(np.unique(warp).size)
        counts.wavefronts += int(ways.sum())
        counts.phases += int(phase_ids.size)
        counts.max_ways = max(counts.max_ways, int(ways.max(initial=0)))


def _key(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """One int64 per (warp or phase, value) pair; values stay below 2^32."""
    return (high.astype(np.int64) << 32) | (np.asarray(low, dtype=np.int64) & 0xFFFFFFFF)


def _per_lane(ctx: ExecContext, idx: Idx, addr: np.ndarray, nbytes: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    warp = ctx.warp if idx is None else ctx.warp[idx]
    m = warp.size
    a = np.broadcast_to(np.asarray(addr, dtype=np.uint64).reshape(-1) if np.size(addr) > 1 else np.asarray(addr, dtype=np.uint64), (m,))
    size = np.broadcast_to(np.asarray(nbytes, dtype=np.int64), (m,))
    return warp, a, size
