"""DLPack capsules read and written with ctypes (no compiled extension).

A DLPack capsule is a ``PyCapsule`` named ``"dltensor"`` (or ``"dltensor_versioned"``, DLPack
1.x) holding a ``DLManagedTensor*``. Consuming one means renaming the capsule to
``"used_dltensor..."`` (so its destructor leaves the tensor alone) and calling the tensor's
``deleter`` when done with the memory. Producing one means keeping the described memory alive
until the consumer calls our deleter, or until the capsule dies unconsumed.

The struct layouts are DLPack's ``dlpack.h`` (v1.0).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1

_LEGACY = b"dltensor"
_LEGACY_USED = b"used_dltensor"
_VERSIONED = b"dltensor_versioned"
_VERSIONED_USED = b"used_dltensor_versioned"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# The C API on capsules. Prototypes of our own (not ctypes.pythonapi's shared attributes, whose
# argtypes other code may set). The *_raw variants take a bare PyObject* for use inside a capsule
# destructor, where the object is being deallocated and must not be reference-counted.
_api = ctypes.pythonapi
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api)
)
_new_capsule = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", _api))
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


# --- dtypes -----------------------------------------------------------------------------------

_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
_BFLOAT = 4
# DLPack 1.1's OCP FP8 codes (kDLFloat8_e4m3fn, kDLFloat8_e5m2) <-> ml_dtypes' names
_FP8 = {10: "float8_e4m3fn", 12: "float8_e5m2"}
_FP8_CODES = {name: code for code, name in _FP8.items()}


def dtype_code(dtype: np.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a numpy dtype (``ml_dtypes.bfloat16`` is kDLBfloat)."""
    if dtype.name == "bfloat16":
        return _BFLOAT, 16
    if dtype.name in _FP8_CODES:
        return _FP8_CODES[dtype.name], 8
    if dtype.kind not in _CODES:
        raise TypeError(f"dtype {dtype} has no DLPack code")
    return _CODES[dtype.kind], dtype.itemsize * 8


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype | None:
    """The numpy dtype of a DLPack type, or None when kaio has none for it."""
    if lanes != 1:
        return None
    if code == _BFLOAT and bits == 16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)  # type: ignore[no-any-return]
    if code in _FP8 and bits == 8:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, _FP8[code]))
    kind = {0: "i", 1: "u", 2: "f", 6: "b"}.get(code)
    if kind is None or bits % 8:
        return None
    try:
        return np.dtype(f"{kind}{bits // 8}") if kind != "b" else np.dtype(np.bool_)
    except TypeError:
        return None


# --- consuming -----------------------------------------------------------------------------------


@dataclass
class DLPackView:
    """What a consumed capsule describes. ``release()`` hands the tensor back to its producer
    (call it once, when the memory is no longer needed)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None: C-contiguous
    dtype: np.dtype | None
    type_text: str  # for messages when dtype is None
    device: tuple[int, int]
    readonly: bool
    release: Callable[[], None]

    @property
    def c_contiguous(self) -> bool:
        return self.strides is None or self.strides == c_strides(self.shape, skip_unit=self.strides)


def c_strides(shape: tuple[int, ...], skip_unit: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Row-major strides in elements. With ``skip_unit`` (the actual strides), dimensions of
    extent 1 take the actual value: any stride is contiguous along them."""
    out = [0] * len(shape)
    step = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = skip_unit[i] if skip_unit is not None and shape[i] == 1 else step
        step *= shape[i]
    return tuple(out)


def consume(capsule: Any) -> DLPackView:
    """Take ownership of the tensor in a DLPack capsule (legacy or versioned)."""
    if _is_valid(capsule, _VERSIONED):
        address = _get_pointer(capsule, _VERSIONED)
        versioned = DLManagedTensorVersioned.from_address(address)
        if versioned.version.major > 1:
            raise BufferError(
                f"DLPack version {versioned.version.major} is newer than kaio reads (1)"
            )
        _set_name(capsule, _VERSIONED_USED)
        tensor, deleter = versioned.dl_tensor, versioned.deleter
        readonly = bool(versioned.flags & FLAG_READ_ONLY)
    elif _is_valid(capsule, _LEGACY):
        address = _get_pointer(capsule, _LEGACY)
        managed = DLManagedTensor.from_address(address)
        _set_name(capsule, _LEGACY_USED)
        tensor, deleter = managed.dl_tensor, managed.deleter
        readonly = False  # the legacy format cannot say; producers refuse to export read-only data
    else:
        raise BufferError("not an unconsumed DLPack capsule")
    ndim = tensor.ndim
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(ndim)) if tensor.strides else None
    dt = tensor.dtype
    released = False

    def release() -> None:
        nonlocal released
        if not released and deleter:
            released = True
            _Deleter(deleter)(address)

    return DLPackView(
        ptr=int(tensor.data or 0) + int(tensor.byte_offset),
        shape=shape,
        strides=strides,
        dtype=numpy_dtype(dt.code, dt.bits, dt.lanes),
        type_text=f"code {dt.code}, {dt.bits} bits, {dt.lanes} lanes",
        device=(int(tensor.device.device_type), int(tensor.device.device_id)),
        readonly=readonly,
        release=release,
    )


def request(obj: Any, stream: int | None) -> Any:
    """``obj.__dlpack__`` asking for DLPack 1.x (read-only flag) and falling back to the legacy
    signature for older producers."""
    try:
        return obj.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:
        pass
    try:
        return obj.__dlpack__(stream=stream)
    except TypeError:
        return obj.__dlpack__()


# --- producing -----------------------------------------------------------------------------------

_exports: dict[int, tuple[Any, ...]] = {}  # struct address -> what must live until the deleter
_exports_lock = threading.Lock()


def _forget(address: int) -> None:
    with _exports_lock:
        _exports.pop(address, None)


def _on_delete(address: int | None) -> None:  # the consumer is done with an exported tensor
    if address:
        _forget(address)


def _on_capsule_death(capsule: int | None) -> None:
    # Runs while the capsule is being deallocated: only the raw-pointer API may touch it.
    if not capsule:
        return
    for name in (_LEGACY, _VERSIONED):
        if _is_valid_raw(capsule, name):  # never consumed: nobody else will call the deleter
            _forget(_get_pointer_raw(capsule, name) or 0)


# C callbacks; module globals, so they live as long as any capsule that points at them.
_deleter = _Deleter(_on_delete)
_capsule_destructor = _Deleter(_on_capsule_death)  # same C signature: void (*)(void*)
_DELETER_ADDRESS = ctypes.cast(_deleter, ctypes.c_void_p).value
_DESTRUCTOR_ADDRESS = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def export(
    ptr: int,
    shape: tuple[int, ...],
    dtype: np.dtype,
    device: tuple[int, int],
    owner: Any,
    *,
    readonly: bool = False,
    versioned: bool = False,
    copied: bool = False,
) -> Any:
    """A capsule describing ``shape``/``dtype`` C-contiguous memory at ``ptr`` on ``device``.
    ``owner`` is kept alive until the consumer releases the tensor. ``versioned``: a DLPack 1.0
    capsule, which can carry the read-only and is-copied flags."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*c_strides(shape))
    managed: DLManagedTensor | DLManagedTensorVersioned
    if versioned:
        managed = DLManagedTensorVersioned()
        managed.version = DLPackVersion(1, 0)
        managed.flags = (FLAG_READ_ONLY if readonly else 0) | (FLAG_IS_COPIED if copied else 0)
    else:
        managed = DLManagedTensor()
    code, bits = dtype_code(dtype)
    t = managed.dl_tensor
    t.data = ptr or None
    t.device = DLDevice(*device)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    address = ctypes.addressof(managed)
    managed.manager_ctx = address
    managed.deleter = _DELETER_ADDRESS
    with _exports_lock:
        _exports[address] = (managed, shape_arr, strides_arr, owner)
    return _new_capsule(address, _VERSIONED if versioned else _LEGACY, _DESTRUCTOR_ADDRESS)


def live_exports() -> int:
    """How many exported tensors are still held by a consumer (tests check for leaks)."""
    with _exports_lock:
        return len(_exports)
