"""Streams and events.

On a GPU a ``Stream`` is a CUDA stream created with default (blocking) flags, so its work is
ordered with the legacy default stream that kaio uses when no stream is given, as in PyTorch.
Events mark points in a stream; ``start.elapsed_ms(end)`` is the GPU time between them.

On the simulator everything runs synchronously, in call order: a stream is only a label, a launch
returns when the kernel has finished, and an event records the host clock when ``record`` is
called, so ``elapsed_ms`` is wall time on the CPU.

Foreign streams are accepted wherever a stream is: a PyTorch stream (``.cuda_stream``), a CuPy
stream (``.ptr``), any object with ``__cuda_stream__`` (the CUDA stream protocol), or a raw
handle (int).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from kaio.errors import KaioError, KaioTypeError
from kaio.runtime import device_lookup

if TYPE_CHECKING:
    from kaio.runtime.device import Device


def _destroy_quietly(destroy: Any, handle: Any) -> None:
    try:
        destroy(handle)
    except Exception:  # garbage collection / interpreter exit: nobody to report to
        pass


class Stream:
    """A queue of work on one device: ``dev.stream()`` or ``kaio.Stream(dev)``."""

    def __init__(self, device: Device | None = None) -> None:
        self.device = device if device is not None else device_lookup.device()
        backend = self.device._backend
        self.handle: Any = backend.create_stream()
        self._finalizer = weakref.finalize(
            self, _destroy_quietly, backend.destroy_stream, self.handle
        )

    def synchronize(self) -> None:
        """Wait until everything queued on this stream has finished."""
        self.device._backend.synchronize_stream(self.handle)

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
        event = event if event is not None else Event(self.device)
        event.record(self)
        return event

    def close(self) -> None:
        """Destroy the stream now (after its queued work, as the driver does)."""
        if self._finalizer.alive:
            self._finalizer.detach()
            self.device._backend.destroy_stream(self.handle)

    def __repr__(self) -> str:
        return f"<kaio.Stream on {self.device!r}>"


def stream_handle(device: Device, stream: Any) -> Any:
    """The backend handle for a ``stream`` argument: None (the default stream), a kaio Stream of
    this device, or (on a GPU) a foreign stream."""
    if stream is None:
        return None
    if isinstance(stream, Stream):
        if stream.device is not device:
            raise KaioTypeError(
                f"the stream belongs to {stream.device!r}, the launch runs on {device!r}"
            )
        return stream.handle
    if device.is_simulator:
        raise KaioTypeError(
            f"the simulator takes kaio streams only (dev.stream()), got {type(stream).__name__}"
        )
    return device._backend.stream_handle(foreign_stream_handle(stream))


def foreign_stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` value of another library's stream object."""
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        _, handle = protocol() if callable(protocol) else protocol
        return int(handle)
    for attr in ("cuda_stream", "ptr", "handle"):  # PyTorch, CuPy, Numba/cuda-python
        value = getattr(stream, attr, None)
        if value is not None:
            return int(value)
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    try:
        return int(stream)  # cuda-python's CUstream converts with int()
    except (TypeError, ValueError):
        raise KaioTypeError(f"{stream!r} is not a stream kaio knows how to use") from None


class Event:
    """A point in a stream's work: ``record()``, ``synchronize()``, ``elapsed_ms(end)``."""

    def __init__(self, device: Device | None = None, *, timing: bool = True) -> None:
        self.device = device if device is not None else device_lookup.device()
        self.timing = timing
        self._recorded = False
        backend = self.device._backend
        self.handle: Any = backend.create_event(timing)
        self._finalizer = weakref.finalize(
            self, _destroy_quietly, backend.destroy_event, self.handle
        )

    def record(self, stream: Stream | Any = None) -> Event:
        """Mark this point of ``stream`` (default: the default stream); returns self."""
        self.device._backend.record_event(self.handle, stream_handle(self.device, stream))
        self._recorded = True
        return self

    def synchronize(self) -> None:
        """Wait until the work before the recorded point has finished."""
        self._check_recorded("synchronize")
        self.device._backend.synchronize_event(self.handle)

    def query(self) -> bool:
        """Whether the work before the recorded point has finished (never blocks)."""
        self._check_recorded("query")
        return bool(self.device._backend.query_event(self.handle))

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (waits for ``end``)."""
        if not (self.timing and end.timing):
            raise KaioError("elapsed_ms needs events created with timing=True")
        self._check_recorded("elapsed_ms")
        end._check_recorded("elapsed_ms")
        end.synchronize()
        return float(self.device._backend.elapsed_ms(self.handle, end.handle))

    def _check_recorded(self, what: str) -> None:
        if not self._recorded:
            raise KaioError(f"{what}: the event was never recorded")

    def __repr__(self) -> str:
        return f"<kaio.Event on {self.device!r}{'' if self._recorded else ' (not recorded)'}>"
