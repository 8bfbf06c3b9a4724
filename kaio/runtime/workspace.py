"""Workspaces: scratch memory an op needs only while the kernels it queues run (split-K partial
sums, flash-decoding's partial outputs, a backward's row statistics).

    with workspace(device, (splits * m, n), "float32", like=(a, b)) as partial:
        kernel.launch(device, a, b, partial, ...)   # writes it
        reduce.launch(device, partial, c, ...)      # reads it
    # given back here, in stream order: the launches above still see it

The memory comes from, and goes back to, the stream the launches use, so neither step waits for
the device (``cuMemFree`` synchronises the whole device: on an H200 one per split-K matmul cost
more than the matmul). The stream follows the launch's own rule (:mod:`kaio.runtime.launch`):

* inside ``dev.capture()``: the capture's stream (the graph owns the memory, one per replay);
* a CUDA torch tensor in ``like``: torch's caching allocator, on torch's current stream (the one
  the launch follows, and what ``torch.cuda.graph`` captures);
* otherwise: kaio's memory pool, on the legacy default stream.

On the simulator, whose work runs in call order, it is a plain allocation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kaio.runtime import graphs, tensors
from kaio.runtime.buffer import Buffer, resolve_dtype

if TYPE_CHECKING:
    from kaio.runtime.device import Device


@contextmanager
def workspace(
    device: Device, shape: Any, dtype: Any, *, like: Sequence[Any] = (), zero: bool = False
) -> Iterator[Any]:
    """Scratch memory for the kernels queued inside the block (see the module doc): a kaio
    Buffer, or a torch tensor when ``like`` holds a CUDA tensor; zero-filled when ``zero``."""
    capture = graphs.capture_for(device) if graphs.active else None
    tensor = None if capture is not None else _cuda_tensor(like)
    if tensor is not None:
        make = tensor.new_zeros if zero else tensor.new_empty
        yield make(shape, dtype=tensors.torch_dtype(resolve_dtype(dtype)[1]))
        return
    stream = capture.stream if capture is not None else None
    buf = Buffer.allocate(device, shape, dtype, stream=stream)
    try:
        if zero and buf.nbytes:
            device._activate()
            device._backend.zero_on(stream, buf.ptr, buf.nbytes)
        yield buf
    finally:
        buf.free()


def _cuda_tensor(values: Sequence[Any]) -> Any:
    for value in values:
        if tensors.is_tensor(value) and value.is_cuda:
            return value
    return None
