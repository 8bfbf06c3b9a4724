"""The simulator backend: kaio's CPU simulator of PTX (``kaio.targets.sim``) as a device.

Everything is synchronous: a launch returns when the kernel has run, so streams are markers and
events read the wall clock when recorded. The simulator checks every access, so a kernel bug
surfaces as ``KaioMemoryError``/``KaioSimError`` at the launch that caused it.

Threads: one lock serializes every touch of the simulator (allocation table, arena, launches).
It has to cover launches too: an allocation may grow the arena, which replaces the numpy array a
running launch reads and writes. A free that arrives while the lock is held (the garbage
collector finalizing a buffer inside a locked section, or another thread) is queued and done by
the holder before it lets go, so a finalizer never edits the allocation table halfway through an
allocation.
"""

from __future__ import annotations

import collections
import contextlib
import os
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from kaio.compiled import KernelParam
from kaio.dtypes import ScalarType
from kaio.errors import KaioDriverError, KaioError, KaioLaunchError
from kaio.runtime.args import apply_each, struct_code
from kaio.runtime.backend import Backend, DeviceInfo, LaunchFn
from kaio.targets.ptx.arch import get_arch

# Shared memory a block may opt into, per architecture (CUDA programming guide, "compute
# capabilities"); the simulator itself allows up to sm_90's 227 KiB.
_SHARED_OPTIN = {70: 96, 72: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227}
# The simulator answers %nsmid with 108 (an A100); report the same count.
_SIM_SM_COUNT = 108


def _host_memory() -> int:
    """Physical memory of the host: the simulated device's memory is host memory."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 << 30


class _Event:
    __slots__ = ("time",)

    def __init__(self) -> None:
        self.time: float | None = None


class SimBackend(Backend):
    def __init__(self, arch: str) -> None:
        from kaio.targets.sim import Simulator
        from kaio.targets.sim.simulator import MAX_BLOCK, MAX_GRID, MAX_SHARED_BYTES

        target = get_arch(arch)
        self.simulator = Simulator()
        self.last_report: Any = None  # the LaunchReport of the latest launch
        self.profile = False  # collect the full metrics (instruction mix, sectors, bank conflicts)
        self._lock = threading.Lock()
        self._pending_frees: collections.deque[int] = collections.deque()
        optin = min(_SHARED_OPTIN.get(target.sm, 48) * 1024, MAX_SHARED_BYTES)
        self.info = DeviceInfo(
            name=f"kaio CPU simulator ({target.name})",
            arch=target.name,
            sm=target.sm,
            sm_count=_SIM_SM_COUNT,
            total_memory=_host_memory(),
            shared_memory_per_block=48 * 1024,
            shared_memory_per_block_optin=max(optin, 48 * 1024),
            max_threads_per_block=1024,
            max_block=MAX_BLOCK,
            max_grid=MAX_GRID,
            is_simulator=True,
            ordinal=None,
        )

    # --- memory ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Any]:
        """The simulator, held by this thread; queued frees are done before the lock is let go."""
        with self._lock:
            try:
                yield self.simulator
            finally:
                self._drain_frees()

    def _drain_frees(self) -> None:
        pending = self._pending_frees
        while pending:
            self.simulator.memory.free(pending.popleft())

    def alloc(self, nbytes: int) -> int:
        try:
            with self._locked() as sim:
                return int(sim.memory.alloc(nbytes))
        except MemoryError:
            raise KaioDriverError(
                "alloc",
                "CUDA_ERROR_OUT_OF_MEMORY",
                f"out of memory: the simulator could not allocate {nbytes} bytes of host memory",
            ) from None

    def free(self, ptr: int) -> None:
        self._pending_frees.append(ptr)  # deque.append is atomic: safe from a finalizer
        if self._lock.acquire(blocking=False):  # else the holder frees it on its way out
            try:
                self._drain_frees()
            finally:
                self._lock.release()

    def upload(self, ptr: int, host: np.ndarray) -> None:
        with self._locked() as sim:
            sim.memory.write(ptr, host.reshape(-1).view(np.uint8))

    def download(self, ptr: int, host: np.ndarray) -> None:
        raw = host.reshape(-1).view(np.uint8)
        with self._locked() as sim:
            raw[:] = sim.memory.read(ptr, raw.size)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        with self._locked() as sim:
            sim.memory.write(dst, sim.memory.read(src, nbytes))

    def zero(self, ptr: int, nbytes: int) -> None:
        with self._locked() as sim:
            sim.memory.write(ptr, np.zeros(nbytes, dtype=np.uint8))

    def memory_info(self) -> tuple[int, int]:
        total = self.info.total_memory
        with self._locked() as sim:
            return max(total - sim.memory.bytes_allocated, 0), total

    def owns(self, ptr: int, nbytes: int) -> bool:
        with self._locked() as sim:
            found = sim.memory.allocation_of(ptr)
        return found is not None and ptr + nbytes <= found[0] + found[1]

    # --- modules and launches --------------------------------------------------------------------

    def load_module(self, ptx: str) -> Any:
        try:
            with self._locked() as sim:  # loading places module variables in global memory
                return sim.load(ptx)
        except KaioError:
            raise
        except Exception as exc:  # a simulator bug while loading: still a load failure, not a crash
            raise KaioLaunchError(
                "the simulator could not load the PTX", log=f"{type(exc).__name__}: {exc}"
            ) from exc

    def unload_module(self, module: Any) -> None:
        return None  # a parsed module holds no device memory besides its variables

    def get_function(self, module: Any, name: str) -> Any:
        if name not in module.entries:
            raise KaioLaunchError(f"the PTX has no kernel named {name!r}")
        return (module, name)

    def launcher(self, function: Any, params: tuple[KernelParam, ...], name: str) -> LaunchFn:
        module, entry = function
        pack_all = apply_each([struct.Struct("<" + struct_code(p)).pack for p in params])
        launch = module.launch

        def run(
            grid: tuple[int, int, int],
            block: tuple[int, int, int],
            shared_bytes: int,
            stream: Any,
            values: Sequence[Any],
        ) -> None:
            packed = pack_all(values)
            with self._locked():
                self.last_report = launch(entry, grid, block, packed, shared_bytes, profile=self.profile)

        return run

    def encode_tensor_map(self, dtype: ScalarType, base: int, dims: tuple[int, ...], strides: tuple[int, ...],
                          box: tuple[int, ...], swizzle: int) -> bytes:  # fmt: skip
        """kaio's own 128-byte format (``kaio.targets.sim.tensor_map``): the simulator cannot
        read NVIDIA's opaque encoding."""
        from kaio.targets.sim.tensor_map import SWIZZLE_SPANS, TensorMapError, encode_tensor_map

        try:
            return encode_tensor_map(base, dtype.nbytes, dims, strides, box, SWIZZLE_SPANS.index(swizzle))
        except TensorMapError as exc:
            raise KaioLaunchError(str(exc)) from None

    def synchronize(self) -> None:
        return None  # every operation already ran to completion

    # --- streams and events ----------------------------------------------------------------------

    def create_stream(self) -> Any:
        return object()  # a marker: work on it runs at once, like everything here

    def destroy_stream(self, stream: Any) -> None:
        return None

    def synchronize_stream(self, stream: Any) -> None:
        return None

    def create_event(self, timing: bool) -> Any:
        return _Event()

    def destroy_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any, stream: Any) -> None:
        event.time = time.perf_counter()

    def synchronize_event(self, event: Any) -> None:
        return None

    def query_event(self, event: Any) -> bool:
        return True

    def elapsed_ms(self, start: Any, end: Any) -> float:
        if start.time is None or end.time is None:
            raise KaioError("elapsed_ms needs two recorded events")
        return float(end.time - start.time) * 1e3
