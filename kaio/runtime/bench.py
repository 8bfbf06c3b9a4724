"""``kaio.bench``: time a function the way ``triton.testing.do_bench`` does.

``warmup`` and ``rep`` are time budgets in milliseconds, as in Triton: a few calls estimate the
cost of one, then ``fn`` runs for about ``warmup`` ms untimed and about ``rep`` ms timed, one
measurement per call. On a GPU each call is bracketed by CUDA events on the default stream, and
the L2 cache is flushed (a 256 MiB memset) before each call so every call starts cold, like
Triton. On the simulator there is no GPU clock: each call is timed with the host's
``perf_counter`` (the simulator is synchronous, so that is the kernel's CPU time plus the
host-side launch path).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kaio.runtime.device import Device

L2_FLUSH_BYTES = 256 << 20


@dataclass(frozen=True)
class BenchResult:
    """Per-call times in milliseconds and how they were measured."""

    times_ms: tuple[float, ...]
    method: str  # "cuda events" or "wall clock"
    device: str

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times_ms)

    @property
    def min(self) -> float:
        return min(self.times_ms)

    @property
    def max(self) -> float:
        return max(self.times_ms)

    @property
    def p20(self) -> float:
        return self.quantile(0.2)

    @property
    def p80(self) -> float:
        return self.quantile(0.8)

    @property
    def reps(self) -> int:
        return len(self.times_ms)

    def quantile(self, q: float) -> float:
        return float(np.quantile(np.asarray(self.times_ms), q))

    def __str__(self) -> str:
        return (
            f"median {self.median:.4f} ms (min {self.min:.4f}, p20 {self.p20:.4f}, "
            f"p80 {self.p80:.4f}) over {self.reps} runs; {self.method} on {self.device}"
        )


def _count(budget_ms: float, per_call_ms: float) -> int:
    return max(1, int(budget_ms / max(per_call_ms, 1e-6)))


def bench(
    fn: Callable[[], Any],
    warmup: float = 25,
    rep: float = 100,
    *,
    device: Device | None = None,
    flush_l2: bool = True,
    max_reps: int = 100_000,
) -> BenchResult:
    """Time ``fn()`` (see the module doc). ``device``: where ``fn`` runs (default device)."""
    dev = device if device is not None else Device()
    if dev.is_simulator:
        return _bench_wall_clock(fn, warmup, rep, dev, max_reps)
    return _bench_events(fn, warmup, rep, dev, flush_l2, max_reps)


def _bench_wall_clock(
    fn: Callable[[], Any], warmup: float, rep: float, dev: Device, max_reps: int
) -> BenchResult:
    fn()  # the first call may compile and load: not part of the estimate
    first = time.perf_counter()
    for _ in range(3):
        fn()
    estimate = (time.perf_counter() - first) * 1e3 / 3
    for _ in range(min(_count(warmup, estimate), max_reps)):
        fn()
    times = []
    for _ in range(min(_count(rep, estimate), max_reps)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return BenchResult(tuple(times), "wall clock", repr(dev))


def _bench_events(
    fn: Callable[[], Any], warmup: float, rep: float, dev: Device, flush_l2: bool, max_reps: int
) -> BenchResult:
    scratch = dev.empty(L2_FLUSH_BYTES, np.uint8) if flush_l2 else None

    def flush() -> None:
        if scratch is not None:
            dev._activate()
            dev._backend.zero(scratch._ptr, scratch.nbytes)

    fn()
    dev.synchronize()
    start, end = dev.event(), dev.event()
    start.record()
    for _ in range(5):
        flush()
        fn()
    end.record()
    estimate = start.elapsed_ms(end) / 5
    for _ in range(min(_count(warmup, estimate), max_reps)):
        fn()
    n = min(_count(rep, estimate), max_reps)
    starts = [dev.event() for _ in range(n)]
    ends = [dev.event() for _ in range(n)]
    for s, e in zip(starts, ends, strict=True):
        flush()
        s.record()
        fn()
        e.record()
    dev.synchronize()
    times = tuple(s.elapsed_ms(e) for s, e in zip(starts, ends, strict=True))
    if scratch is not None:
        scratch.free()
    return BenchResult(times, "cuda events", repr(dev))
