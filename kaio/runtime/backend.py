"""The small interface a device implements: memory, modules, launches, streams and events.

``Device``, ``Buffer``, argument checking and launching are written once against this interface;
``CudaBackend`` (the CUDA driver) and ``SimBackend`` (kaio's CPU simulator of PTX) implement it.
Handles (pointers, modules, functions, streams, events) are opaque to the shared code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kaio.compiled import KernelParam
from kaio.dtypes import ScalarType
from kaio.errors import KaioLaunchError

# A prepared launch of one function: ``run(grid, block, dynamic_shared_bytes, stream, values)``
# where ``values`` are the checked argument values (addresses for arrays) in parameter order.
LaunchFn = Callable[[tuple[int, int, int], tuple[int, int, int], int, Any, Sequence[Any]], None]


@dataclass(frozen=True)
class DeviceInfo:
    """What a device is and what it allows; the properties ``Device`` exposes."""

    name: str
    arch: str  # "sm_90": the device's own architecture
    sm: int  # 90
    sm_count: int
    total_memory: int  # bytes
    shared_memory_per_block: int  # bytes a block gets without opting in
    shared_memory_per_block_optin: int  # bytes a block may get after opting in (>= the above)
    max_threads_per_block: int
    max_block: tuple[int, int, int]
    max_grid: tuple[int, int, int]
    is_simulator: bool
    ordinal: int | None  # CUDA device number; None for the simulator


class Backend(ABC):
    """One device's primitive operations. Pointers are ints; every other handle is opaque."""

    info: DeviceInfo

    def activate(self, force: bool = False) -> None:
        """Make this device current on the calling thread (CUDA: its context)."""
        return None

    def stream_handle(self, stream: Any) -> Any:
        """The backend's handle for a kaio stream handle, an interop int, or None (default)."""
        return stream

    # --- memory (synchronous with respect to the host unless a stream is given) -----------------

    @abstractmethod
    def alloc(self, nbytes: int) -> int: ...

    @abstractmethod
    def free(self, ptr: int) -> None: ...

    @abstractmethod
    def upload(self, ptr: int, host: np.ndarray) -> None:
        """Copy a C-contiguous host array to ``ptr``."""

    @abstractmethod
    def download(self, ptr: int, host: np.ndarray) -> None:
        """Fill a C-contiguous host array from ``ptr``."""

    @abstractmethod
    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device to device."""

    @abstractmethod
    def zero(self, ptr: int, nbytes: int) -> None: ...

    # Stream-ordered memory (workspaces: kaio.runtime.workspace). The allocation is usable by work
    # queued on ``stream`` after it; the free returns the memory when ``stream`` gets there, with
    # no device synchronisation. A backend whose work runs in call order (the simulator) uses the
    # plain calls.

    def alloc_on(self, stream: Any, nbytes: int) -> int:
        return self.alloc(nbytes)

    def free_on(self, stream: Any, ptr: int) -> None:
        self.free(ptr)

    def zero_on(self, stream: Any, ptr: int, nbytes: int) -> None:
        self.zero(ptr, nbytes)

    @abstractmethod
    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes."""

    def owns(self, ptr: int, nbytes: int) -> bool | None:
        """Whether [ptr, ptr+nbytes) is memory of this device: True/False when the backend can
        tell cheaply, None when it cannot (the CUDA driver would need a call per argument)."""
        return None

    # --- modules and launches --------------------------------------------------------------------

    @abstractmethod
    def load_module(self, ptx: str) -> Any:
        """Load PTX text; a rejection raises KaioLaunchError(message, log=...) without a path."""

    @abstractmethod
    def unload_module(self, module: Any) -> None: ...

    @abstractmethod
    def get_function(self, module: Any, name: str) -> Any: ...

    @abstractmethod
    def launcher(self, function: Any, params: tuple[KernelParam, ...], name: str) -> LaunchFn:
        """A prepared launch of ``function``: its parameter packing is built once, here."""

    def encode_tensor_map(self, dtype: ScalarType, base: int, dims: tuple[int, ...], strides: tuple[int, ...],
                          box: tuple[int, ...], swizzle: int) -> bytes:  # fmt: skip
        """The 128-byte TMA tensor map of a tensor at ``base``: ``dims`` elements per dimension
        and ``strides`` bytes between the indices of the outer ones (innermost first), copied a
        ``box`` at a time into shared memory with the ``swizzle``-byte span (0: none)."""
        raise KaioLaunchError(f"{type(self).__name__} cannot build TMA tensor maps")

    @abstractmethod
    def synchronize(self) -> None: ...

    # --- streams and events ----------------------------------------------------------------------

    @abstractmethod
    def create_stream(self) -> Any: ...

    @abstractmethod
    def destroy_stream(self, stream: Any) -> None: ...

    @abstractmethod
    def synchronize_stream(self, stream: Any) -> None: ...

    @abstractmethod
    def create_event(self, timing: bool) -> Any: ...

    @abstractmethod
    def destroy_event(self, event: Any) -> None: ...

    @abstractmethod
    def record_event(self, event: Any, stream: Any) -> None: ...

    @abstractmethod
    def synchronize_event(self, event: Any) -> None: ...

    @abstractmethod
    def query_event(self, event: Any) -> bool: ...

    @abstractmethod
    def elapsed_ms(self, start: Any, end: Any) -> float: ...

    def wait_stream(self, waiter: Any, producer: Any) -> None:
        """Make ``waiter`` wait for the work queued so far on ``producer`` (an interop stream).
        The simulator runs everything synchronously, so the default does nothing."""
        return None

    # --- graphs (GPU stream capture; the simulator records launches itself) ---------------------

    def create_capture_stream(self) -> Any:
        """A stream to capture on (destroyed with ``destroy_stream``)."""
        return self.create_stream()

    def begin_capture(self, stream: Any) -> None:
        """Start recording the work queued on ``stream`` instead of running it."""
        raise NotImplementedError(f"{self.info.name} has no stream capture")

    def end_capture(self, stream: Any) -> Any:
        """Stop recording ``stream``; the recorded graph."""
        raise NotImplementedError(f"{self.info.name} has no stream capture")

    def instantiate_graph(self, graph: Any) -> Any:
        """An executable form of a recorded graph."""
        raise NotImplementedError(f"{self.info.name} has no stream capture")

    def launch_graph(self, graph_exec: Any, stream: Any) -> None:
        raise NotImplementedError(f"{self.info.name} has no stream capture")

    def destroy_graph(self, graph: Any, graph_exec: Any) -> None:
        raise NotImplementedError(f"{self.info.name} has no stream capture")
