"""The simulated device's global memory and the layout of its address space.

Global memory is one growable numpy byte arena; an allocation is a 256-byte-aligned range of
it followed by an unmapped guard gap, so running off the end of a buffer lands in no allocation
and is reported instead of silently reading a neighbour. Freed ranges leave the table at once,
so a use after free is an out-of-bounds access too.

Generic addresses: global addresses are generic addresses (cvta.to.global is the identity).
Shared, local and param state-space addresses are small offsets that generic addressing maps
into fixed windows far below the global arena; cvta adds or subtracts the window base.
"""

from __future__ import annotations

import bisect

import numpy as np

GLOBAL_BASE = 0x0000_7000_0000_0000
SHARED_WINDOW = 0x0000_1000_0000_0000
LOCAL_WINDOW = 0x0000_2000_0000_0000
PARAM_WINDOW = 0x0000_3000_0000_0000
WINDOW_SIZE = 1 << 32
ALLOC_ALIGN = 256


def _round_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


class GlobalMemory:
    """Device global memory: ``alloc``/``free``/``write``/``read``/``reset`` for the host, plus
    the arena, typed views and a vectorized bounds check for the executor."""

    def __init__(self, guard_bytes: int = ALLOC_ALIGN):
        self.guard_bytes = guard_bytes
        self.reset()

    # --- host API ---------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        """Reserve ``nbytes`` (zero-filled); returns a 256-byte-aligned address, never 0."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        span = _round_up(max(nbytes, 1), ALLOC_ALIGN) + _round_up(self.guard_bytes, ALLOC_ALIGN)
        offset = self._first_fit(span)
        self._ensure_capacity(offset + span)
        self._arena[offset : offset + span] = 0
        addr = GLOBAL_BASE + offset
        i = bisect.bisect_left(self._start_list, addr)
        self._start_list.insert(i, addr)
        self._sizes.insert(i, nbytes)
        self._spans.insert(i, span)
        self._rebuild_index()
        return addr

    def free(self, addr: int) -> None:
        i = bisect.bisect_left(self._start_list, addr)
        if i == len(self._start_list) or self._start_list[i] != addr:
            raise ValueError(f"free of {addr:#x}, which is not the start of a live allocation")
        del self._start_list[i], self._sizes[i], self._spans[i]
        self._rebuild_index()

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        if isinstance(data, np.ndarray):
            raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        else:
            raw = np.frombuffer(data, dtype=np.uint8)
        offset = self._host_range(addr, raw.size, "write")
        self._arena[offset : offset + raw.size] = raw

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        offset = self._host_range(addr, nbytes, "read")
        return self._arena[offset : offset + nbytes].copy()

    def reset(self) -> None:
        """Free every allocation (module variables included) and release the arena."""
        self._arena = np.zeros(0, dtype=np.uint8)
        self._views: dict[int, np.ndarray] = {}
        self._start_list: list[int] = []
        self._sizes: list[int] = []
        self._spans: list[int] = []
        self.generation = getattr(self, "generation", 0) + 1
        self._rebuild_index()

    @property
    def bytes_allocated(self) -> int:
        return sum(self._sizes)

    @property
    def capacity(self) -> int:
        return int(self._arena.size)

    def allocation_of(self, addr: int) -> tuple[int, int] | None:
        """(start, size) of the live allocation holding ``addr``, if any."""
        i = bisect.bisect_right(self._start_list, addr) - 1
        if i >= 0 and addr < self._start_list[i] + self._sizes[i]:
            return self._start_list[i], self._sizes[i]
        return None

    # --- executor API -------------------------------------------------------------------------

    def view(self, itemsize: int) -> np.ndarray:
        """The arena as unsigned integers of ``itemsize`` bytes (cached until it grows)."""
        v = self._views.get(itemsize)
        if v is None:
            v = self._arena.view(np.dtype(f"<u{itemsize}"))
            self._views[itemsize] = v
        return v

    def out_of_bounds(self, addr: np.ndarray, nbytes: int) -> np.ndarray | None:
        """None when every access [addr, addr+nbytes) lies inside one live allocation, else a
        mask of the accesses that do not. ``addr`` is uint64."""
        if addr.size == 0:
            return None
        if self._starts.size == 0:
            return np.ones(addr.shape, dtype=bool)
        lo = int(addr.min())
        hi = int(addr.max())
        i = bisect.bisect_right(self._start_list, lo) - 1
        if i >= 0 and hi + nbytes <= self._start_list[i] + self._sizes[i]:
            return None  # the common case: the whole warp-batch hits one buffer
        k = np.searchsorted(self._starts, addr, side="right").astype(np.int64) - 1
        inside = (k >= 0) & (addr <= self._ends[np.maximum(k, 0)] - np.uint64(nbytes))
        return ~inside

    # --- internals ----------------------------------------------------------------------------

    def _rebuild_index(self) -> None:
        self._starts = np.array(self._start_list, dtype=np.uint64)
        self._ends = np.array([s + n for s, n in zip(self._start_list, self._sizes)], dtype=np.uint64)

    def _first_fit(self, span: int) -> int:
        cursor = 0
        for start, reserved in zip(self._start_list, self._spans):
            offset = start - GLOBAL_BASE
            if offset - cursor >= span:
                return cursor
            cursor = offset + reserved
        return cursor

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= self._arena.size:
            return
        grown = np.zeros(max(needed, 2 * self._arena.size, 1 << 16), dtype=np.uint8)
        grown[: self._arena.size] = self._arena
        self._arena = grown
        self._views = {}

    def _host_range(self, addr: int, nbytes: int, what: str) -> int:
        found = self.allocation_of(addr)
        if found is None or addr + nbytes > found[0] + found[1]:
            raise ValueError(
                f"host {what} of {nbytes} bytes at {addr:#x} does not lie inside one allocation"
            )
        return addr - GLOBAL_BASE
