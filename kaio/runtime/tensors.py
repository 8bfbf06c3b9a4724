"""PyTorch tensors as kernel arguments, read directly: no ``__cuda_array_interface__`` dict.

Building a tensor's CAI dict costs several microseconds (and its typestr for bfloat16 is the
ambiguous ``<V2``); ``data_ptr()``, ``dtype``, ``get_device()`` and ``is_contiguous()`` cost about
0.1 us each. So a torch tensor gets its own checker per kernel parameter (built once, on the
first tensor seen there) that reads exactly those.

This module never imports torch: a value is a tensor only when torch is already imported
(``sys.modules``) and ``isinstance(value, torch.Tensor)``; nobody holds a tensor otherwise.

Where tensors run:

* a CUDA tensor on ``cuda:i`` runs on ``kaio.Device(i)``; without ``stream=`` the launch goes to
  torch's current stream of that device (as Triton does), so it is ordered with torch's work
  and captured by ``torch.cuda.graph``;
* a CPU tensor runs on the simulator, which is kaio's CPU device: each torch storage a launch
  touches is copied into simulator memory once per launch (so aliased and overlapping views stay
  aliased) and copied back after it when a ``MutArray`` parameter writes it. A CPU tensor given
  to a GPU launch is a ``KaioTypeError``.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kaio import dtypes
from kaio.dtypes import ScalarType
from kaio.errors import KaioTypeError
from kaio.runtime import device_lookup

if TYPE_CHECKING:
    from kaio.runtime.backend import Backend
    from kaio.runtime.device import Device

# torch dtype name -> kaio type. Names, not objects, so the table exists without torch.
_BY_NAME = {
    "float16": dtypes.f16,
    "bfloat16": dtypes.bf16,
    "float32": dtypes.f32,
    "float64": dtypes.f64,
    "int8": dtypes.i8,
    "uint8": dtypes.u8,
    "int16": dtypes.i16,
    "uint16": dtypes.u16,
    "int32": dtypes.i32,
    "uint32": dtypes.u32,
    "int64": dtypes.i64,
    "uint64": dtypes.u64,
    "bool": dtypes.bool_,
    "float8_e4m3fn": dtypes.f8e4m3,
    "float8_e5m2": dtypes.f8e5m2,
}
_to_kaio: dict[Any, ScalarType] = {}  # torch.dtype -> kaio type, filled on first use
_to_torch: dict[ScalarType, Any] = {}


def torch_module() -> Any:
    """torch if something already imported it, else None (kaio never imports it here)."""
    return sys.modules.get("torch")


def is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def any_tensor(values: Sequence[Any]) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    tensor = torch.Tensor
    return any(isinstance(v, tensor) for v in values)


def _tables() -> None:
    torch = sys.modules["torch"]
    for name, ktype in _BY_NAME.items():
        tdtype = getattr(torch, name, None)
        if tdtype is not None:  # uint16/32/64 exist from torch 2.3
            _to_kaio[tdtype] = ktype
            _to_torch[ktype] = tdtype


def kaio_type(torch_dtype: Any) -> ScalarType | None:
    """The kaio type of a torch dtype, None when kaio has none (complex, float8...)."""
    if not _to_kaio:
        _tables()
    return _to_kaio.get(torch_dtype)


def torch_dtype(ktype: ScalarType) -> Any:
    """The torch dtype of a kaio type."""
    if not _to_torch:
        _tables()
    return _to_torch[ktype]


# --- devices and streams -------------------------------------------------------------------------

_cuda_devices: dict[int, Device] = {}


def device_of(tensor: Any) -> Device:
    """The kaio device a tensor runs on: ``Device(i)`` for ``cuda:i``, else the default device
    (the simulator on a machine without a GPU; a GPU launch then refuses the CPU tensor)."""
    index = tensor.get_device()
    if index >= 0:
        device = _cuda_devices.get(index)
        if device is None:
            device = _cuda_devices[index] = device_lookup.device(index)
        return device
    return device_lookup.device()


def where(tensor: Any) -> str:
    """``cpu``, ``cuda:0``, ``meta``...: for messages."""
    return str(tensor.device)


_raw_stream: Callable[[int], int] | None = None


def current_stream(ordinal: int) -> int:
    """The raw handle of torch's current stream on GPU ``ordinal``."""
    global _raw_stream
    if _raw_stream is None:
        torch = sys.modules["torch"]
        # Triton's choice: one C call, where torch.cuda.current_stream() builds a Python object.
        fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _raw_stream = fast or (lambda i: int(torch.cuda.current_stream(i).cuda_stream))
    return _raw_stream(ordinal)


def torch_stream(values: Sequence[Any], positions: Sequence[int], ordinal: int) -> int | None:
    """torch's current stream on ``ordinal`` when any array argument is a CUDA torch tensor (a
    CPU tensor is refused by its checker; asking a CPU-only torch for a stream would fail)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tensor = torch.Tensor
    for i in positions:
        value = values[i]
        if isinstance(value, tensor) and value.get_device() >= 0:
            return current_stream(ordinal)
    return None


# --- checking a tensor argument --------------------------------------------------------------------


def tensor_checker(
    where_: str,
    ktype: ScalarType,
    mutable: bool,
    device: Device,
    align: int,
    aligned: Callable[[int], int],
) -> Callable[[Any, Any, list[Callable[[], None]]], int]:
    """The checker of one array parameter for torch tensors: ``(tensor, stream, cleanups) ->
    address``. ``align``: the bytes the address must be a multiple of; ``aligned(ptr)``: the
    parameter's alignment check, which explains a refusal."""
    want = torch_dtype(ktype)
    if device.is_simulator:
        backend = device._backend

        def staged(t: Any, stream: Any, cleanups: list[Callable[[], None]]) -> int:
            if t.dtype is want and t.is_cpu and t.is_contiguous():
                return aligned(_staging(cleanups, backend).address(t, mutable))
            raise _refusal(where_, t, want, ktype, device)

        return staged

    ordinal = device.ordinal

    def direct(t: Any, stream: Any, cleanups: list[Callable[[], None]]) -> int:
        if t.dtype is want and t.get_device() == ordinal and t.is_contiguous():
            ptr: int = t.data_ptr()
            return ptr if not ptr % align else aligned(ptr)  # aligned() raises, naming it
        raise _refusal(where_, t, want, ktype, device)

    return direct


def _refusal(where_: str, t: Any, want: Any, ktype: ScalarType, device: Device) -> KaioTypeError:
    if t.dtype is not want:
        have = kaio_type(t.dtype)
        if have is None:
            return KaioTypeError(f"{where_}: got a {t.dtype} tensor, which kaio has no type for")
        return KaioTypeError(
            f"{where_}: got a {t.dtype} tensor ({have.name}); expected {ktype.name}"
        )
    kind = t.device.type
    if device.is_simulator and kind != "cpu":
        return KaioTypeError(
            f"{where_}: the tensor is on {where(t)}, but the launch runs on the simulator "
            f"{device!r}, which takes CPU tensors"
        )
    if not device.is_simulator and kind == "cpu":
        return KaioTypeError(
            f"{where_}: the tensor is on the CPU, but the launch runs on {device!r} (a GPU); "
            "move it with .cuda(), or launch on kaio.Device('sim') to run on the CPU simulator"
        )
    if not device.is_simulator and (kind != "cuda" or t.get_device() != device.ordinal):
        return KaioTypeError(
            f"{where_}: the tensor is on {where(t)}, but the launch runs on {device!r} "
            f"(cuda:{device.ordinal})"
        )
    if not t.is_contiguous():
        return KaioTypeError(
            f"{where_}: the tensor is not contiguous (shape {tuple(t.shape)}, strides "
            f"{tuple(t.stride())}); kernels index it as base + i * itemsize: pass x.contiguous()"
        )
    return KaioTypeError(f"{where_}: cannot use this tensor ({t.device}, {t.dtype})")


# --- CPU tensors on the simulator --------------------------------------------------------------------


class SimStaging:
    """The CPU torch storages one simulator launch uses, copied into simulator memory. Called
    after the launch (it sits in the launch's cleanups): copies written storages back, frees.
    Each copy keeps its storage's host address modulo 256 (the simulator's allocation
    granule), so a tensor whose address is misaligned for the kernel faults on the simulator as
    it would on a GPU instead of being realigned by the copy."""

    __slots__ = ("backend", "storages")

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        # host address of a storage -> [simulator allocation, host bytes, written by the kernel,
        # the copy's address in it]
        self.storages: dict[int, list[Any]] = {}

    def address(self, t: Any, writes: bool) -> int:
        from kaio.targets.sim.memory import ALLOC_ALIGN  # what simulator allocations are aligned to

        storage = t.untyped_storage()
        base = storage.data_ptr()
        entry = self.storages.get(base)
        if entry is None:
            nbytes = storage.nbytes()
            host = (
                np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(base))
                if nbytes
                else np.empty(0, np.uint8)
            )
            skew = base % ALLOC_ALIGN
            ptr = self.backend.alloc(nbytes + skew) if nbytes else 0
            if nbytes:
                self.backend.upload(ptr + skew, host)
            entry = self.storages[base] = [ptr, host, False, ptr + skew]
        entry[2] = entry[2] or writes
        return int(entry[3]) + t.data_ptr() - base

    def __call__(self) -> None:
        storages, self.storages = self.storages, {}
        for ptr, host, written, copy in storages.values():
            if ptr:
                if written:
                    self.backend.download(copy, host)
                self.backend.free(ptr)


def _staging(cleanups: list[Callable[[], None]], backend: Backend) -> SimStaging:
    for c in cleanups:
        if c.__class__ is SimStaging:
            return c  # type: ignore[return-value]
    staging = SimStaging(backend)
    cleanups.append(staging)
    return staging
