"""Recording launches once and replaying them: ``dev.capture()``.

    with dev.capture() as graph:        # launches inside are recorded, not run
        kernel[grid](a, b, c, n)
        other[grid](c, n)
    graph.replay()                       # runs them all, in order; as often as wanted

On a GPU this is CUDA stream capture: ``cuStreamBeginCapture`` on a non-blocking stream of kaio's
own (launches in the block without ``stream=`` go to it), ``cuStreamEndCapture`` gives a ``CUgraph``,
``cuGraphInstantiate`` an executable graph, and ``replay(stream=None)`` is one ``cuGraphLaunch``
(on the legacy default stream, or the stream given). Compile and load the kernels before
capturing (launch them once): module loading is not a stream operation and cannot be captured.

On the simulator the launches of the block are checked (a bad argument raises at capture, as on
a GPU) and recorded with their arguments; ``replay()`` launches them again in order. As with a
CUDA graph, a replay reuses the same memory and reads its contents at replay time.

``torch.cuda.graph(...)`` needs nothing from this module: inside it torch's current stream is
its capture stream, and kaio launches with torch tensors follow torch's current stream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kaio.errors import KaioError

if TYPE_CHECKING:
    from kaio.runtime.device import Device

# Captures open in any thread. The launch path reads only this global when it is 0.
active = 0
_count_lock = threading.Lock()
_local = threading.local()  # .captures: {Device: Graph} of the captures open on this thread


class Graph:
    """The launches recorded by one ``dev.capture()`` block; ``replay()`` runs them."""

    def __init__(self, device: Device, stream: Any) -> None:
        self.device = device
        self.stream = stream  # GPU, while capturing: the capture stream's handle
        self.launches = 0  # launches recorded
        self._recorded: list[Callable[[], None]] = []  # simulator: the launches to redo
        self._exec: Any = None  # GPU: the instantiated graph
        self._graph: Any = None
        self._capturing = True

    def record(self, launch: Callable[[], None]) -> None:
        """Simulator: remember a checked launch instead of running it."""
        self._recorded.append(launch)
        self.launches += 1

    def replay(self, stream: Any = None) -> None:
        """Run the recorded launches (GPU: on ``stream``, default the legacy default stream)."""
        if self._capturing:
            raise KaioError("replay() inside its own capture block: leave the block first")
        if self.device.is_simulator:
            for launch in self._recorded:
                launch()
            return
        from kaio.runtime.streams import stream_handle

        if self._exec is None:
            raise KaioError("the graph was closed")
        self.device._backend.launch_graph(self._exec, stream_handle(self.device, stream))

    def close(self) -> None:
        """Release the driver's graph objects now (else when the graph is collected)."""
        backend = self.device._backend
        if self._exec is not None or self._graph is not None:
            graph, exec_ = self._graph, self._exec
            self._exec = self._graph = None
            backend.destroy_graph(graph, exec_)
        self._recorded = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter exit: the driver may be gone
            pass

    def __repr__(self) -> str:
        return f"<kaio.Graph of {self.launches} launches on {self.device!r}>"


def capture_for(device: Device) -> Graph | None:
    """The capture open on this thread for ``device``, if any."""
    captures = getattr(_local, "captures", None)
    return captures.get(device) if captures else None


@contextmanager
def capture(device: Device) -> Iterator[Graph]:
    global active
    captures = getattr(_local, "captures", None)
    if captures is None:
        captures = _local.captures = {}
    if device in captures:
        raise KaioError(f"{device!r} is already capturing on this thread")
    backend = device._backend
    stream = None if device.is_simulator else backend.create_capture_stream()
    graph = Graph(device, stream)
    if stream is not None:
        try:
            backend.begin_capture(stream)
        except BaseException:
            backend.destroy_stream(stream)
            raise
    captures[device] = graph
    with _count_lock:
        active += 1
    try:
        yield graph
    except BaseException:
        if stream is not None:
            try:  # end the capture (a capturing stream cannot be destroyed); drop the graph
                backend.destroy_graph(backend.end_capture(stream), None)
            except Exception:
                pass
        raise
    else:
        if stream is not None:
            graph._graph = backend.end_capture(stream)
            graph._exec = backend.instantiate_graph(graph._graph)
    finally:
        del captures[device]
        with _count_lock:
            active -= 1
        graph._capturing = False
        if stream is not None:  # a replay goes to the stream it is given, not this one
            graph.stream = None
            backend.destroy_stream(stream)
