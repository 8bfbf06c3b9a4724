"""The state of one batch of CTAs while it runs: registers, memories, thread coordinates.

Threads are numbered CTA-major inside a batch (``index = cta * cta_threads + linear_tid``) and
a CTA's threads are linearized x-fastest, so warp ``w`` of a CTA is its threads
``32w .. 32w+31``. Coordinate arrays are built on first use: most kernels read only a few.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from .memory import GlobalMemory
from .program import EntryInfo
from .async_proxy import AsyncProxy, uses_async_proxy
from .race import RaceChecker

if TYPE_CHECKING:
    from .metrics import Profiler
    from .ops_async_copy import AsyncCopies
    from .ops_mbarrier import Mbarriers
    from .ops_wgmma import WgmmaQueue
    from .register_pool import RegisterPool

WARP = 32


@dataclass(frozen=True)
class LaunchGeometry:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def cta_threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def n_ctas(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def block_coords(self, cta: int) -> tuple[int, int, int]:
        gx, gy, _ = self.grid
        return (cta % gx, (cta // gx) % gy, cta // (gx * gy))

    def thread_coords(self, ltid: int) -> tuple[int, int, int]:
        bx, by, _ = self.block
        return (ltid % bx, (ltid // bx) % by, ltid // (bx * by))


class ExecContext:
    def __init__(
        self,
        entry: EntryInfo,
        geometry: LaunchGeometry,
        first_cta: int,
        n_ctas: int,
        memory: GlobalMemory,
        param: np.ndarray,
        shared_bytes: int,
        check_shared_init: bool,
        profiler: Profiler | None = None,
        race_check: bool = False,
    ):
        self.entry = entry
        self.geometry = geometry
        self.first_cta = first_cta
        self.n_ctas = n_ctas
        self.cta_threads = geometry.cta_threads
        self.n = n_ctas * self.cta_threads
        self.memory = memory
        self.regs: list[np.ndarray] = [np.zeros(self.n, dtype=dt) for dt in entry.register_types]
        self.shared_bytes = shared_bytes
        self.shared_stride = max(16, (shared_bytes + 15) // 16 * 16)
        self.shared = np.zeros(n_ctas * self.shared_stride, dtype=np.uint8)
        self.shared_written = np.zeros_like(self.shared) if check_shared_init else None
        self.local_bytes = entry.local_bytes
        self.local_stride = max(16, (entry.local_bytes + 15) // 16 * 16)
        self.local = np.zeros(self.n * self.local_stride if entry.local_bytes else 16, dtype=np.uint8)
        self.param = param
        self.clock = 0  # instructions issued so far: what %clock reads
        self.pc = 0  # the op running now (its index in entry.ops), set by the executor
        self.async_copies: AsyncCopies | None = None  # cp.async queues, made by the first cp.async
        self.mbarriers: Mbarriers | None = None  # made by the first mbarrier instruction
        self.wgmma: WgmmaQueue | None = None  # wgmma.mma_async results in flight
        self.spinning: np.ndarray | None = None  # threads whose spin-wait just failed (executor backs them off)
        self.stalled = False  # the wait just run failed for all its threads and changed nothing
        # setmaxnreg: the registers per thread at entry (set by the launch when the kernel has a
        # setmaxnreg), its CTA register pools (made by that launch), and the threads an .inc
        # parks (held) or lets go (resumed) in this step, for the executor
        self.entry_registers = 0
        self.register_pool: RegisterPool | None = None
        self.held: np.ndarray | None = None
        self.resumed: np.ndarray | None = None
        # the seeded adversarial schedule's generator (None: lockstep, lowest PC first); other
        # modules may draw from it to reorder what the ISA leaves unordered (async completions)
        self.rng: np.random.Generator | None = None
        self.profiler = profiler  # memory metrics (profile=True), else None
        self._views: dict[tuple[str, int], np.ndarray] = {}
        # race_check=True, for kernels that have shared memory
        self.race: RaceChecker | None = RaceChecker(self) if race_check and shared_bytes else None
        # bulk copies, wgmma and TMA stores: late landing, late reads, proxy fences (async_proxy.py)
        self.async_proxy: AsyncProxy | None = AsyncProxy(self) if shared_bytes and uses_async_proxy(entry) else None

    # --- memory views ---------------------------------------------------------------------------

    def view(self, space: str, itemsize: int) -> np.ndarray:
        """The bytes of a state space as unsigned integers of ``itemsize`` bytes."""
        if space in ("global", "const"):
            return self.memory.view(itemsize)
        key = (space, itemsize)
        v = self._views.get(key)
        if v is None:
            buf = {"shared": self.shared, "local": self.local, "param": self.param, "shared_written": self.shared_written}[space]
            assert buf is not None
            v = buf.view(np.dtype(f"<u{itemsize}"))
            self._views[key] = v
        return v

    # --- thread coordinates (batch-wide arrays, built lazily) ----------------------------------

    @cached_property
    def thread_index(self) -> np.ndarray:
        return np.arange(self.n, dtype=np.int64)

    @cached_property
    def ltid(self) -> np.ndarray:
        return np.tile(np.arange(self.cta_threads, dtype=np.int64), self.n_ctas)

    @cached_property
    def cta(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_ctas, dtype=np.int64), self.cta_threads)

    @cached_property
    def shared_base(self) -> np.ndarray:
        return self.cta * self.shared_stride

    @cached_property
    def local_base(self) -> np.ndarray:
        return self.thread_index * self.local_stride

    @cached_property
    def lane(self) -> np.ndarray:
        return (self.ltid % WARP).astype(np.uint32)

    @cached_property
    def warps_per_cta(self) -> int:
        return (self.cta_threads + WARP - 1) // WARP

    @cached_property
    def warp(self) -> np.ndarray:
        """Batch-wide warp number of each thread."""
        return self.cta * self.warps_per_cta + self.ltid // WARP

    @cached_property
    def warp_first_thread(self) -> np.ndarray:
        """Batch index of lane 0 of each thread's warp."""
        return self.thread_index - (self.ltid % WARP)

    @cached_property
    def warp_existing_lanes(self) -> np.ndarray:
        """Per batch warp: bitmask of the lanes that exist (the last warp of a CTA whose size
        is not a multiple of 32 is partial)."""
        per_cta = np.full(self.warps_per_cta, 0xFFFFFFFF, dtype=np.uint64)
        tail = self.cta_threads % WARP
        if tail:
            per_cta[-1] = (1 << tail) - 1
        return np.tile(per_cta, self.n_ctas)

    def _coord(self, values: np.ndarray) -> np.ndarray:
        return values.astype(np.uint32)

    @cached_property
    def tid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bx, by, _ = self.geometry.block
        t = self.ltid
        return (self._coord(t % bx), self._coord((t // bx) % by), self._coord(t // (bx * by)))

    @cached_property
    def ctaid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        gx, gy, _ = self.geometry.grid
        linear = self.cta + self.first_cta
        return (self._coord(linear % gx), self._coord((linear // gx) % gy), self._coord(linear // (gx * gy)))

    def coordinates(self, thread: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(thread, block) coordinates of a batch-local thread, for error messages."""
        cta, ltid = divmod(thread, self.cta_threads)
        return self.geometry.thread_coords(ltid), self.geometry.block_coords(self.first_cta + cta)
