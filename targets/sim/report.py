"""What a launch returns: counts of what ran, printable as a table."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class LaunchReport:
    """Summary of one simulated launch. ``by_class`` (thread-instructions per instruction
    class, e.g. ``ld.global``, ``fma.f32``, ``bar.sync``) is filled when ``profile=True``."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    batches: int = 0
    ctas_per_batch: int = 0
    steps: int = 0  # instructions issued (one per distinct PC per step, any number of threads)
    thread_instructions: int = 0  # instructions times the threads that executed them
    barriers: int = 0
    seconds: float = 0.0
    profiled: bool = False
    by_class: Counter[str] = field(default_factory=Counter)

    @property
    def threads(self) -> int:
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]

    @property
    def thread_instructions_per_second(self) -> float:
        return self.thread_instructions / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        lines = [
            f"kernel {self.kernel}: grid {self.grid}, block {self.block}, {self.threads} threads, "
            f"shared {self.shared_bytes} B/CTA",
            f"  {self.batches} batch(es) of up to {self.ctas_per_batch} CTAs; {self.steps} steps, "
            f"{self.thread_instructions} thread-instructions, {self.barriers} barrier steps, "
            f"{self.seconds * 1e3:.1f} ms ({self.thread_instructions_per_second / 1e6:.1f} M thread-instr/s)",
        ]
        if self.profiled:
            width = max((len(k) for k in self.by_class), default=5)
            lines.append(f"  {'class':<{width}}  thread-instructions")
            for klass, count in sorted(self.by_class.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"  {klass:<{width}}  {count:>19}")
        return "\n".join(lines)


ProfileReport = LaunchReport
