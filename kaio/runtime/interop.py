"""Arrays from other libraries: ``__cuda_array_interface__`` (CuPy, Numba, PyTorch, JAX) and
DLPack (``__dlpack__``/``__dlpack_device__``), read without copying.

An :class:`ExternalArray` is the common description: a device pointer, shape, dtype, whether it
may be written, and which device holds it. Only C-contiguous arrays are accepted: a kernel
indexes ``x[i]`` as ``base + i * itemsize``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kaio.dtypes import is_int_value
from kaio.runtime import dlpack

CAI_VERSIONS = (2, 3)


class InteropError(ValueError):
    """An interop object that cannot be used as it is; the message says why. Callers name the
    kernel parameter and re-raise it as KaioTypeError."""


class AmbiguousTypestr(InteropError):
    """A CAI typestr of raw bytes (``<V2``): PyTorch and JAX write it for bfloat16, but it could be
    any 2-byte type. DLPack, when the producer has it, says which."""


@dataclass
class ExternalArray:
    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    readonly: bool
    device: tuple[int, int] | None  # (DLPack device type, id) when the producer says; CAI: None
    stream: int | None = None  # CAI v3: the stream to synchronize with before using the data
    release: Callable[[], None] | None = None  # DLPack: give the tensor back when done
    source: str = "__cuda_array_interface__"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def done(self) -> None:
        if self.release is not None:
            self.release()
            self.release = None


def _c_contiguous_bytes(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    if 0 in shape:
        return True
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def _dims(shape: Any) -> tuple[int, ...]:
    """A producer's shape: a tuple of ints >= 0 (a negative extent would make a negative size
    that passes every bounds check; 2.5 would silently become 2)."""
    if not isinstance(shape, (tuple, list)) or not all(is_int_value(d) and d >= 0 for d in shape):
        raise InteropError(f"the shape {shape!r} is not a tuple of non-negative ints")
    return tuple(int(d) for d in shape)


def from_cuda_array_interface(cai: Any) -> ExternalArray:
    """Validate a ``__cuda_array_interface__`` dict (v2 or v3)."""
    if not isinstance(cai, dict):
        raise InteropError(f"__cuda_array_interface__ must be a dict, got {type(cai).__name__}")
    version = cai.get("version")
    if version not in CAI_VERSIONS:
        raise InteropError(
            f"__cuda_array_interface__ version {version!r} is not supported (2 or 3)"
        )
    try:
        shape = _dims(cai["shape"])
        ptr, readonly = cai["data"]
        dtype = np.dtype(cai["typestr"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InteropError(f"malformed __cuda_array_interface__ ({exc})") from None
    if ptr is not None and not (is_int_value(ptr) and ptr >= 0):
        raise InteropError(f"__cuda_array_interface__ 'data' pointer {ptr!r} is not an address")
    if dtype.kind == "V":
        raise AmbiguousTypestr(
            f"__cuda_array_interface__ typestr {cai['typestr']!r} is raw bytes (PyTorch and JAX "
            "write it for bfloat16); kaio reads such arrays through DLPack, which this object "
            "does not offer"
        )
    if dtype.kind not in "iufb" or dtype.byteorder == ">":
        raise InteropError(
            f"__cuda_array_interface__ typestr {cai['typestr']!r} is not a kaio type"
        )
    if cai.get("mask") is not None:
        raise InteropError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    strides = cai.get("strides")
    if strides is not None and len(tuple(strides)) != len(shape):
        raise InteropError(
            f"__cuda_array_interface__ strides {strides!r} do not match shape {shape}"
        )
    if strides is not None and not _c_contiguous_bytes(shape, tuple(strides), dtype.itemsize):
        raise InteropError(
            f"the array is not C-contiguous (shape {shape}, strides {tuple(strides)}); "
            "pass a contiguous copy"
        )
    stream = cai.get("stream")
    if stream == 0:
        raise InteropError("__cuda_array_interface__ 'stream' 0 is disallowed by the protocol")
    return ExternalArray(
        ptr=int(ptr or 0),
        shape=shape,
        dtype=dtype,
        readonly=bool(readonly),
        device=None,
        stream=int(stream) if stream is not None else None,
    )


def dlpack_device(obj: Any) -> tuple[int, int]:
    try:
        kind, index = obj.__dlpack_device__()
    except Exception as exc:
        raise InteropError(f"__dlpack_device__() failed ({type(exc).__name__}: {exc})") from None
    return int(kind), int(index)


def from_dlpack(obj: Any, stream: int | None) -> ExternalArray:
    """Consume ``obj.__dlpack__`` (``stream``: where the consumer will use the data, per the
    DLPack protocol; None for CPU data). The caller must call ``.done()`` afterwards."""
    try:
        view = dlpack.consume(dlpack.request(obj, stream))
    except BufferError as exc:
        raise InteropError(f"__dlpack__() failed: {exc}") from None
    if any(d < 0 for d in view.shape):
        view.release()
        raise InteropError(f"the DLPack shape {view.shape} has a negative extent")
    if view.dtype is None:
        view.release()
        raise InteropError(f"DLPack dtype ({view.type_text}) has no kaio type")
    if not view.c_contiguous:
        view.release()
        raise InteropError(
            f"the array is not C-contiguous (shape {view.shape}, strides {view.strides} "
            "elements); pass a contiguous copy"
        )
    return ExternalArray(
        ptr=view.ptr,
        shape=view.shape,
        dtype=view.dtype,
        readonly=view.readonly,
        device=view.device,
        release=view.release,
        source="__dlpack__",
    )


def external_array(obj: Any, dlpack_stream: int | None) -> ExternalArray | None:
    """The device array ``obj`` describes through CAI or DLPack (CAI first: cheaper, and it has
    no ownership to hand back; DLPack when the CAI typestr is raw bytes, as bfloat16 is), or None
    if it speaks neither protocol. Host (CPU) DLPack data
    raises InteropError: kernels need device memory."""
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception:  # e.g. a PyTorch tensor that requires grad: try DLPack instead
        cai = None
    if cai is not None:
        try:
            return from_cuda_array_interface(cai)
        except AmbiguousTypestr:
            if not hasattr(obj, "__dlpack__"):
                raise
    if not hasattr(obj, "__dlpack__"):
        return None
    kind, _ = dlpack_device(obj) if hasattr(obj, "__dlpack_device__") else (dlpack.KDL_CPU, 0)
    if kind == dlpack.KDL_CPU:
        raise InteropError(
            f"{type(obj).__name__} is host memory (DLPack device kDLCPU); copy it to the device "
            "with dev.alloc_from(x)"
        )
    return from_dlpack(obj, dlpack_stream)
