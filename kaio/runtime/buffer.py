"""Device buffers: ``dev.alloc_from(x)``, ``dev.zeros(...)``, ``dev.empty(...)``.

A ``Buffer`` is a C-contiguous typed array in one device's global memory. Its memory is freed
deterministically: at the end of a ``with`` block, by ``buf.free()``, or when the last Python
reference (the buffer and its views) goes away. ``buf.readonly()`` is a view that kernels may read
but cannot receive as a ``MutArray``.

Buffers speak both interop protocols. ``__cuda_array_interface__`` (v3) is zero-copy everywhere
(on the simulator its pointer is a simulator address, meaningful to kaio only). ``__dlpack__`` is
zero-copy on a GPU; on the simulator it exports a *copy* in host memory (device type kDLCPU), for
two reasons: the simulator's memory is a numpy arena that is reallocated when it grows, so a
zero-copy view would silently go stale, and a consumer that sees kDLCPU expects to read the
memory directly, which only a host copy allows. ``copy=False`` is refused there (BufferError).
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from kaio.dtypes import ScalarType, from_numpy, is_int_value
from kaio.errors import KaioError, KaioTypeError, KaioValueError
from kaio.runtime import dlpack

if TYPE_CHECKING:
    from kaio.runtime.backend import Backend
    from kaio.runtime.device import Device


def resolve_dtype(dtype: Any) -> tuple[np.dtype, ScalarType]:
    """A numpy dtype, a dtype name, ``ml_dtypes.bfloat16`` or a kaio type -> both views of it."""
    if isinstance(dtype, ScalarType):
        return dtype.np_dtype, dtype
    try:
        dt = np.dtype(dtype)
        return dt, from_numpy(dt)
    except TypeError:
        raise KaioTypeError(
            f"{dtype!r} is not a kaio element type (f16 bf16 f32 f64 f8e4m3 f8e5m2 i8..i64 u8..u64 bool)"
        ) from None


def resolve_shape(shape: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """An int or a tuple/list of ints (numpy ints too), each >= 0 -> the tuple of dims."""
    dims = (shape,) if is_int_value(shape) else None
    if isinstance(shape, (tuple, list)):
        dims = tuple(shape)
    if dims is None or not all(is_int_value(d) and d >= 0 for d in dims):
        raise KaioTypeError(
            f"`shape` must be a non-negative int or a tuple of non-negative ints, got {shape!r}"
        )
    return tuple(int(d) for d in dims)


def host_array(data: Any, what: str) -> np.ndarray:
    """``data`` (anything numpy converts) as a host array; a ragged nested list, or an object
    numpy cannot read, is a kaio error naming ``what`` instead of numpy's."""
    if isinstance(data, np.ndarray):
        return data
    try:
        return np.asarray(data)
    except ValueError as exc:  # "inhomogeneous shape": a ragged nested sequence
        raise KaioValueError(f"{what} is not a rectangular array ({exc})") from None
    except TypeError as exc:
        raise KaioTypeError(f"{what} cannot be read as an array ({exc})") from None


_PLAIN = object()  # an allocation made and freed by the plain (synchronous) calls


class _Allocation:
    """One device allocation, shared by a buffer and its views; freed once. ``stream``: made and
    freed in that stream's order (a workspace: kaio.runtime.workspace), else plainly."""

    __slots__ = ("ptr", "nbytes", "live", "_finalizer", "__weakref__")

    def __init__(self, backend: Backend, nbytes: int, stream: Any = _PLAIN) -> None:
        self.nbytes = nbytes
        # Zero bytes: no allocation at all (cuMemAlloc refuses 0); the pointer is null.
        if not nbytes:
            self.ptr = 0
        else:
            self.ptr = backend.alloc(nbytes) if stream is _PLAIN else backend.alloc_on(stream, nbytes)
        self.live = True
        self._finalizer = (
            weakref.finalize(self, _release_quietly, backend, self.ptr, stream) if self.ptr else None
        )

    def free(self) -> None:
        if not self.live:
            return
        self.live = False
        if self._finalizer is not None and self._finalizer.alive:
            detached = self._finalizer.detach()
            if detached is not None:
                _, _, (backend, ptr, stream), _ = detached
                _release(backend, ptr, stream)


def _release(backend: Backend, ptr: int, stream: Any) -> None:
    if stream is _PLAIN:
        backend.free(ptr)
    else:
        backend.free_on(stream, ptr)


def _release_quietly(backend: Backend, ptr: int, stream: Any) -> None:
    # Garbage collection or interpreter exit: there is no caller to raise to, and at exit the
    # driver may already be shutting down.
    try:
        _release(backend, ptr, stream)
    except Exception:
        pass


class Buffer:
    """A C-contiguous array in device memory (see the module doc)."""

    __slots__ = ("_device", "_ptr", "_shape", "_dtype", "_type", "_nbytes", "_readonly", "_alloc")

    def __init__(
        self,
        device: Device,
        alloc: _Allocation,
        shape: tuple[int, ...],
        dtype: np.dtype,
        ktype: ScalarType,
        readonly: bool = False,
    ) -> None:
        self._device = device
        self._alloc = alloc
        self._ptr = alloc.ptr
        self._shape = shape
        self._dtype = dtype
        self._type = ktype
        self._nbytes = math.prod(shape) * dtype.itemsize
        self._readonly = readonly

    @classmethod
    def allocate(cls, device: Device, shape: Any, dtype: Any, stream: Any = _PLAIN) -> Buffer:
        """A new buffer; ``stream``: allocated and freed in that stream's order (workspaces)."""
        dims = resolve_shape(shape)
        dt, kt = resolve_dtype(dtype)
        nbytes = math.prod(dims) * dt.itemsize
        total = device._backend.info.total_memory
        if nbytes > total:  # never fits (and past 2**64 bytes no driver call can even take it)
            raise KaioValueError(
                f"`shape` {dims} of {kt.name} is {nbytes} bytes, more than the {total} bytes of "
                f"{device!r}"
            )
        return cls(device, _Allocation(device._backend, nbytes, stream), dims, dt, kt)

    # --- what it is ------------------------------------------------------------------------------

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ptr(self) -> int:
        """The device address (a simulator address on the simulator)."""
        self._check_live()
        return self._ptr

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def kaio_type(self) -> ScalarType:
        return self._type

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def is_readonly(self) -> bool:
        return self._readonly

    @property
    def is_freed(self) -> bool:
        return not self._alloc.live

    def __len__(self) -> int:
        if not self._shape:
            raise KaioTypeError("len() of a 0-d buffer")
        return self._shape[0]

    def __repr__(self) -> str:
        state = " freed" if not self._alloc.live else (" read-only" if self._readonly else "")
        return f"<kaio.Buffer {self._type.name}{list(self._shape)} on {self._device!r}{state}>"

    # --- views -----------------------------------------------------------------------------------

    def readonly(self) -> Buffer:
        """The same memory, refused as a ``MutArray`` argument (and by ``copy_from``)."""
        return Buffer(self._device, self._alloc, self._shape, self._dtype, self._type, True)

    def reshape(self, *shape: Any) -> Buffer:
        """The same memory with another shape of the same size (a view)."""
        dims = resolve_shape(
            shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        )
        if -1 in dims or math.prod(dims) != self.size:
            raise KaioTypeError(f"cannot reshape a buffer of {self.size} elements to {dims}")
        return Buffer(self._device, self._alloc, dims, self._dtype, self._type, self._readonly)

    # --- data movement ---------------------------------------------------------------------------

    def to_host(self) -> np.ndarray:
        """A new host array with the buffer's contents (waits for the work queued before it)."""
        self._check_live()
        out = np.empty(self._shape, dtype=self._dtype)
        if self._nbytes:
            self._device._activate()
            self._device._backend.download(self._ptr, out)
        return out

    def copy_from(self, source: Any) -> Buffer:
        """Overwrite the contents from a host array or another buffer of the same shape and
        dtype (no implicit conversion: a mismatch is a KaioTypeError)."""
        self._check_live()
        if self._readonly:
            raise KaioTypeError("copy_from into a read-only buffer view")
        if isinstance(source, Buffer):
            source._check_live()
            self._check_same(source.shape, source.dtype, "buffer")
            if source._nbytes:
                if source._device is self._device:
                    self._device._activate()
                    self._device._backend.copy(self._ptr, source._ptr, self._nbytes)
                else:
                    self.copy_from(source.to_host())
            return self
        host = host_array(source, "copy_from: the source")
        self._check_same(host.shape, host.dtype, "array")
        if self._nbytes:
            self._device._activate()
            self._device._backend.upload(self._ptr, np.ascontiguousarray(host))
        return self

    def free(self) -> None:
        """Release the memory now (every view of it becomes unusable). Idempotent."""
        self._alloc.free()

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """Refused, as CuPy and torch refuse it for device arrays: ``np.asarray(buf)`` would
        otherwise make a 0-d object array holding the buffer, and an implicit download hides a
        device-to-host copy (and a synchronisation) in innocent-looking numpy code."""
        raise KaioTypeError(
            f"a kaio Buffer ({self._type.name}{list(self._shape)}) is device memory: numpy cannot "
            "read it in place; copy it to the host with buf.to_host()"
        )

    # --- interop ---------------------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._check_live()
        return {
            "shape": self._shape,
            "typestr": self._dtype.str,
            "data": (self._ptr, self._readonly),
            "strides": None,
            "version": 3,
            # kaio's work goes to the legacy default stream unless told otherwise: a consumer on
            # another stream must wait for it (protocol value 1). The simulator is synchronous.
            "stream": None if self._device.is_simulator else 1,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._device.is_simulator:
            return (dlpack.KDL_CPU, 0)
        return (dlpack.KDL_CUDA, self._device.ordinal or 0)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        self._check_live()
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"kaio buffers export to {self.__dlpack_device__()} only")
        versioned = max_version is not None and max_version[0] >= 1
        if self._device.is_simulator:
            if copy is False:
                raise BufferError(
                    "a simulator buffer cannot be shared in place (its memory moves when it "
                    "grows); "
                    "DLPack export makes a host copy"
                )
            host = self.to_host()
            return dlpack.export(
                host.ctypes.data,
                self._shape,
                self._dtype,
                (dlpack.KDL_CPU, 0),
                host,
                readonly=self._readonly,
                versioned=versioned,
                copied=True,
            )
        if copy:
            raise BufferError("kaio exports device buffers without copying (copy=True refused)")
        if self._readonly and not versioned:
            raise BufferError("a read-only buffer needs DLPack >= 1.0 (max_version) to export")
        if stream is not None and stream != -1:
            self._device._sync_consumer_stream(stream)
        return dlpack.export(
            self._ptr,
            self._shape,
            self._dtype,
            self.__dlpack_device__(),
            self,
            readonly=self._readonly,
            versioned=versioned,
        )

    # --- internals -------------------------------------------------------------------------------

    def _check_live(self) -> None:
        if not self._alloc.live:
            raise KaioError(f"use of a freed buffer ({self._type.name}{list(self._shape)})")

    def _check_same(self, shape: tuple[int, ...], dtype: np.dtype, what: str) -> None:
        if tuple(shape) != self._shape or dtype != self._dtype:
            raise KaioTypeError(
                f"copy_from: the {what} is {np.dtype(dtype).name}{list(shape)}, the buffer is "
                f"{self._dtype.name}{list(self._shape)}"
            )
