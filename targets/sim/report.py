"""What a launch returns: counts of what ran and, with ``profile=True``, the instruction mix and
memory metrics per PTX instruction; ``str(report)`` prints them as tables.

Definitions of the metrics: ``metrics.py`` and docs/simulator.md ("Profiling").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class GlobalMemoryRow:
    """One global-memory instruction: warp-level requests, 32-byte sectors, distinct bytes."""

    line: int
    text: str
    requests: int
    sectors: int
    bytes: int

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def efficiency(self) -> float:
        """Useful bytes / sector bytes (1.0 = perfectly coalesced)."""
        return self.bytes / (32 * self.sectors) if self.sectors else 1.0


@dataclass
class SharedMemoryRow:
    """One shared-memory instruction: requests, wavefronts and their ideal count (phases)."""

    line: int
    text: str
    access: str  # "load", "store", "ldmatrix", "cp.async write"
    requests: int
    wavefronts: int
    phases: int
    max_ways: int

    @property
    def ways(self) -> float:
        """Average bank-conflict degree of a phase: 1.0 = conflict-free, 32.0 = fully serialized."""
        return self.wavefronts / self.phases if self.phases else 1.0

    @property
    def bank_conflicts(self) -> int:
        """Extra wavefronts caused by bank conflicts (Nsight Compute's count)."""
        return self.wavefronts - self.phases


@dataclass
class LaunchReport:
    """Summary of one simulated launch. With ``profile=True``: ``by_category`` and ``by_class``
    (thread-instructions per instruction class and per opcode class), ``global_memory`` and
    ``shared_memory`` (one row per memory instruction, with its PTX line)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    batches: int = 0
    ctas_per_batch: int = 0
    steps: int = 0  # instructions issued (one per distinct PC per step, any number of threads)
    thread_instructions: int = 0  # instructions times the threads that executed them
    barriers: int = 0  # steps that executed a barrier instruction
    barrier_releases: int = 0  # summed over CTAs: times a barrier released its waiting threads
    seconds: float = 0.0
    profiled: bool = False
    by_class: Counter[str] = field(default_factory=Counter)
    by_category: Counter[str] = field(default_factory=Counter)
    warp_instructions: int = 0  # profile: warp-level instruction executions
    global_memory: list[GlobalMemoryRow] = field(default_factory=list)
    shared_memory: list[SharedMemoryRow] = field(default_factory=list)

    @property
    def threads(self) -> int:
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]

    @property
    def thread_instructions_per_second(self) -> float:
        return self.thread_instructions / self.seconds if self.seconds > 0 else 0.0

    # --- totals ---------------------------------------------------------------------------

    @property
    def global_requests(self) -> int:
        return sum(r.requests for r in self.global_memory)

    @property
    def global_sectors(self) -> int:
        return sum(r.sectors for r in self.global_memory)

    @property
    def global_efficiency(self) -> float:
        """Useful bytes / sector bytes over every global request of the launch."""
        sectors = self.global_sectors
        return sum(r.bytes for r in self.global_memory) / (32 * sectors) if sectors else 1.0

    def shared_totals(self, access: str | None = None) -> SharedMemoryRow:
        """The shared rows of one access kind (None: all) summed into one row."""
        rows = [r for r in self.shared_memory if access is None or r.access == access]
        return SharedMemoryRow(
            0,
            "(total)",
            access or "all",
            sum(r.requests for r in rows),
            sum(r.wavefronts for r in rows),
            sum(r.phases for r in rows),
            max((r.max_ways for r in rows), default=0),
        )

    # --- printing -------------------------------------------------------------------------

    def __str__(self) -> str:
        lines = [
            f"kernel {self.kernel}: grid {self.grid}, block {self.block}, {self.threads} threads, "
            f"shared {self.shared_bytes} B/CTA",
            f"  {self.batches} batch(es) of up to {self.ctas_per_batch} CTAs; {self.steps} steps, "
            f"{self.thread_instructions} thread-instructions, {self.barrier_releases} barrier releases, "
            f"{self.seconds * 1e3:.1f} ms ({self.thread_instructions_per_second / 1e6:.1f} M thread-instr/s)",
        ]
        if self.profiled:
            lines += self._mix_table() + self._global_table() + self._shared_table()
        return "\n".join(lines)

    def _mix_table(self) -> list[str]:
        total = max(self.thread_instructions, 1)
        out = ["", f"  {'class':<12} {'thread-instr':>14} {'share':>7}"]
        for name, count in sorted(self.by_category.items(), key=lambda kv: (-kv[1], kv[0])):
            out.append(f"  {name:<12} {count:>14} {100 * count / total:>6.1f}%")
        return out

    def _global_table(self) -> list[str]:
        if not self.global_memory:
            return []
        out = ["", f"  global memory {'line':>6} {'requests':>9} {'sectors/req':>11} {'efficiency':>10}  instruction"]
        for r in self.global_memory:
            out.append(f"  {'':<13} {r.line:>6} {r.requests:>9} {r.sectors_per_request:>11.2f} {100 * r.efficiency:>9.1f}%  {r.text}")
        requests = max(self.global_requests, 1)
        out.append(f"  {'total':<13} {'':>6} {self.global_requests:>9} {self.global_sectors / requests:>11.2f} {100 * self.global_efficiency:>9.1f}%")
        return out

    def _shared_table(self) -> list[str]:
        if not self.shared_memory:
            return []
        out = ["", f"  shared memory {'line':>6} {'access':<14} {'requests':>9} {'wavefronts':>10} {'ways':>6} {'max':>4} {'conflicts':>9}  instruction"]
        for r in self.shared_memory:
            out.append(f"  {'':<13} {r.line:>6} {r.access:<14} {r.requests:>9} {r.wavefronts:>10} {r.ways:>6.2f} {r.max_ways:>4} {r.bank_conflicts:>9}  {r.text}")
        for access in sorted({r.access for r in self.shared_memory}):
            t = self.shared_totals(access)
            out.append(f"  {'total':<13} {'':>6} {access:<14} {t.requests:>9} {t.wavefronts:>10} {t.ways:>6.2f} {t.max_ways:>4} {t.bank_conflicts:>9}")
        return out


ProfileReport = LaunchReport
