"""Checking launch arguments against a kernel's parameters, before anything reaches a device.

Each parameter of a compiled kernel gets a *checker*, built once per specialization and device:
``check(value, stream, cleanups) -> packed`` returns what goes into the parameter buffer (an
address for arrays, a number for scalars) or raises ``KaioTypeError`` naming the kernel and the
parameter. The common case (a kaio Buffer of the right type, a Python int or float in range) is a
couple of attribute and comparison tests. A torch tensor gets a checker of its own
(``kaio.runtime.tensors``), found by its class after the first one; everything else takes a slow
path that converts or explains.

Rules: integers must fit their type (no wrap-around); a float for an integer parameter must be
integral; floats must be finite in the parameter's type unless they are inf/NaN already; a bool is
refused for numeric parameters (``True`` for ``n: u32`` is almost always a mistake); host arrays
are refused with a hint to copy them (``dev.alloc_from``); a read-only buffer view (or an interop
array marked read-only) is refused for a ``MutArray``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kaio.compiled import KernelParam, TensorMapParam
from kaio.dtypes import ScalarType
from kaio.errors import KaioTypeError
from kaio.runtime import dlpack, tensors
from kaio.runtime.interop import InteropError, external_array

if TYPE_CHECKING:
    from kaio.runtime.device import Device

Check = Callable[[Any, Any, list[Callable[[], None]]], Any]

_CODES = {
    "f16": "e",
    "bf16": "H",  # packed as its bit pattern: struct has no bfloat16
    "f32": "f",
    "f64": "d",
    "i8": "b",
    "u8": "B",
    "i16": "h",
    "u16": "H",
    "i32": "i",
    "u32": "I",
    "i64": "q",
    "u64": "Q",
    "bool": "B",
    "f8e4m3": "B",  # packed as its bit pattern, like bf16
    "f8e5m2": "B",
}

# |x| below this rounds to a finite value of the type (max finite + half an ulp, ties to even
# round up to infinity because the max finite significand is odd).
_FINITE_BELOW = {
    "f16": 65520.0,
    "bf16": 2.0**128 - 2.0**119,
    "f32": 2.0**128 - 2.0**103,
    "f64": math.inf,
    "f8e4m3": math.nextafter(464.0, math.inf),  # 464 is a tie that rounds down to even 448
    "f8e5m2": 61440.0,
}


def struct_code(param: KernelParam | TensorMapParam) -> str:
    """The ``struct`` format a parameter is packed with (little-endian assumed)."""
    if isinstance(param, TensorMapParam):
        return f"{param.nbytes}s"  # the map's bytes, as built at launch
    return "Q" if param.is_array else _CODES[param.dtype.name]


def int_range(t: ScalarType) -> tuple[int, int]:
    if t.kind == "uint":
        return 0, (1 << t.bits) - 1
    return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1


def bf16_bits(value: float) -> int:
    """The bfloat16 nearest ``value`` (ties to even), rounded once from the double (numpy's
    ml_dtypes cast goes through float32 and can round twice)."""
    sign = 0x8000 if math.copysign(1.0, value) < 0 else 0
    if value != value:
        return 0x7FC0 | sign
    a = abs(value)
    if a == math.inf:
        return sign | 0x7F80
    if a == 0.0:
        return sign
    _, e = math.frexp(a)  # a = f * 2**e, 0.5 <= f < 1
    quantum = max(e - 8, -133)  # 8 significant bits; subnormal spacing 2**-133
    rounded = math.ldexp(round(math.ldexp(a, -quantum)), quantum)  # exact scaling; round: ties even
    (bits,) = struct.unpack("<I", struct.pack("<f", rounded))  # exactly representable in f32
    return sign | (int(bits) >> 16)


def _where(kernel: str, p: KernelParam) -> str:
    return f"kernel `{kernel}`, parameter `{p!r}`"


def _kind_of(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a numpy array ({value.dtype}{list(value.shape)})"
    return f"a {type(value).__name__}"


def apply_each(
    funcs: Sequence[Callable[..., Any]], extra: tuple[str, ...] = ()
) -> Callable[..., tuple[Any, ...]]:
    """One function computing ``(funcs[0](args[0], *extra), funcs[1](args[1], *extra), ...)``,
    called as ``fused(args, *extra)``; ``args`` must have exactly ``len(funcs)`` items.

    Generated source (as dataclasses and Triton's launcher do), because the launch path is
    measured in microseconds and a loop over the functions costs as much as the functions.
    """
    names = [f"a{i}" for i in range(len(funcs))]
    tail = "".join(f", {e}" for e in extra)
    calls = "".join(f"f{i}({name}{tail}), " for i, name in enumerate(names))
    unpack = f"    {', '.join(names)}, = args\n" if funcs else ""
    source = f"def fused(args{tail}):\n{unpack}    return ({calls})\n"
    namespace: dict[str, Any] = {f"f{i}": f for i, f in enumerate(funcs)}
    exec(compile(source, f"<kaio apply_each ({len(funcs)})>", "exec"), namespace)
    return namespace["fused"]  # type: ignore[no-any-return]


# --- scalars -------------------------------------------------------------------------------------


def scalar_checker(kernel: str, p: KernelParam) -> Check:
    t = p.dtype
    where = _where(kernel, p)
    if t.is_bool:
        return _bool_checker(where)
    if t.is_int:
        return _int_checker(where, t)
    return _float_checker(where, t)


def _bool_checker(where: str) -> Check:
    def check(value: Any, stream: Any, cleanups: Any) -> Any:
        if isinstance(value, (bool, np.bool_)):
            return int(value)
        raise KaioTypeError(f"{where}: expected a bool, got {_kind_of(value)}")

    return check


def _int_checker(where: str, t: ScalarType) -> Check:
    lo, hi = int_range(t)

    def slow(value: Any) -> int:
        if isinstance(value, (bool, np.bool_)):
            raise KaioTypeError(f"{where}: got a bool; pass an int (e.g. int(flag))")
        if isinstance(value, (int, np.integer)):
            number = int(value)
        elif isinstance(value, (float, np.floating)):
            if not math.isfinite(value) or value != int(value):
                raise KaioTypeError(f"{where}: got the non-integral float {value!r}; pass an int")
            number = int(value)
        else:
            raise KaioTypeError(f"{where}: expected an int, got {_kind_of(value)}")
        if not lo <= number <= hi:
            raise KaioTypeError(f"{where}: {number} is out of range for {t.name} [{lo}, {hi}]")
        return number

    def check(value: Any, stream: Any, cleanups: Any) -> int:
        if value.__class__ is int and lo <= value <= hi:
            return value
        return slow(value)

    return check


def _float_checker(where: str, t: ScalarType) -> Check:
    limit = _FINITE_BELOW[t.name]
    to_bits: Callable[[float], int] | None = bf16_bits if t.name == "bf16" else None
    if t.is_fp8:
        fp8 = t.np_dtype

        def to_bits(value: float) -> int:  # numpy converts from f64 with one rounding
            return int(np.array([value], np.float64).astype(fp8).view(np.uint8)[0])

    def slow(value: Any) -> float:
        if isinstance(value, (bool, np.bool_)):
            raise KaioTypeError(f"{where}: got a bool; pass a number")
        if not isinstance(value, (int, float, np.integer, np.floating)):
            raise KaioTypeError(f"{where}: expected a number, got {_kind_of(value)}")
        try:
            number = float(value)
        except OverflowError:
            raise KaioTypeError(f"{where}: {value} is out of range for {t.name}") from None
        if math.isfinite(number) and not abs(number) < limit:
            raise KaioTypeError(f"{where}: {value!r} overflows {t.name}")
        return number

    if to_bits is not None:
        pack = to_bits

        def check_bits(value: Any, stream: Any, cleanups: Any) -> int:
            return pack(
                value if value.__class__ is float and -limit < value < limit else slow(value)
            )

        return check_bits

    def check(value: Any, stream: Any, cleanups: Any) -> float:
        if value.__class__ is float and -limit < value < limit:
            return value
        return slow(value)

    return check


# --- arrays --------------------------------------------------------------------------------------


def array_checker(kernel: str, p: KernelParam, device: Device) -> Check:
    from kaio.runtime.buffer import Buffer

    where = _where(kernel, p)
    ktype = p.dtype
    mutable = p.mutable
    align = p.align
    backend = device._backend

    def aligned(ptr: int) -> int:
        if ptr % align:
            raise KaioTypeError(
                f"{where}: the kernel reads it with {align}-byte vector loads, but the array "
                f"starts at address {ptr:#x}, not a multiple of {align}; pass an array allocated "
                "by kaio (256-byte aligned) or an aligned view"
            )
        return ptr

    # Checkers of other array classes met at this parameter (torch.Tensor and its subclasses),
    # built on the first value of the class: the next ones skip the slow path's tests.
    by_class: dict[type, Check] = {}

    def slow(value: Any, stream: Any, cleanups: list[Callable[[], None]]) -> int:
        if isinstance(value, Buffer):
            return aligned(_buffer_problem(where, p, device, value))
        if tensors.is_tensor(value):
            checker = tensors.tensor_checker(where, ktype, mutable, device, align, aligned)
            by_class[value.__class__] = checker
            return checker(value, stream, cleanups)  # type: ignore[no-any-return]
        if isinstance(value, np.ndarray):
            raise KaioTypeError(
                f"{where}: got a host numpy array ({value.dtype}{list(value.shape)}); kernels read "
                "device memory: copy it first with `dev.alloc_from(x)` (dev = kaio.Device())"
            )
        try:
            ext = external_array(value, dlpack_stream(device, stream))
        except InteropError as exc:
            raise KaioTypeError(f"{where}: {exc}") from None
        if ext is None:
            raise KaioTypeError(
                f"{where}: expected a device array (kaio Buffer, __cuda_array_interface__ or "
                f"DLPack), got {_kind_of(value)}"
            )
        if ext.release is not None:
            cleanups.append(ext.done)  # after the launch is queued (or the check fails)
        if ext.dtype != ktype.np_dtype:
            raise KaioTypeError(
                f"{where}: got a {ext.dtype} array ({ext.source}); expected {ktype.name}"
            )
        if mutable and ext.readonly:
            raise KaioTypeError(
                f"{where}: the array is read-only ({ext.source}) but the kernel writes it"
            )
        _check_external_device(where, device, ext.ptr, ext.nbytes, ext.device)
        if ext.stream is not None and not device.is_simulator:
            launch_stream = 1 if stream is None else int(stream)
            if ext.stream != launch_stream:
                backend.wait_stream(stream, ext.stream)
        return aligned(ext.ptr)

    def check(value: Any, stream: Any, cleanups: list[Callable[[], None]]) -> int:
        if (
            value.__class__ is Buffer
            and value._device is device
            and value._type is ktype
            and value._alloc.live
            and not (mutable and value._readonly)
            and not value._ptr % align
        ):
            return value._ptr
        other = by_class.get(value.__class__)
        if other is not None:
            return other(value, stream, cleanups)
        return slow(value, stream, cleanups)

    return check


def _buffer_problem(where: str, p: KernelParam, device: Device, value: Any) -> int:
    if value.is_freed:
        raise KaioTypeError(f"{where}: the buffer was freed")
    if value.device is not device:
        raise KaioTypeError(
            f"{where}: the buffer lives on {value.device!r} but the launch runs on {device!r}"
        )
    if value.kaio_type is not p.dtype:
        raise KaioTypeError(
            f"{where}: got a {value.kaio_type.name} buffer; expected {p.dtype.name} elements"
        )
    if p.mutable and value.is_readonly:
        raise KaioTypeError(
            f"{where}: got a read-only buffer view, but the kernel writes this parameter; pass a "
            "writable buffer"
        )
    raise AssertionError("unreachable: the fast path accepts this buffer")


def _check_external_device(
    where: str, device: Device, ptr: int, nbytes: int, dl_device: tuple[int, int] | None
) -> None:
    if device.is_simulator:
        if dl_device is not None and dl_device[0] != dlpack.KDL_CPU:
            raise KaioTypeError(
                f"{where}: the array lives on DLPack device {dl_device}, but the launch runs on "
                "the simulator"
            )
        if nbytes and not device._backend.owns(ptr, nbytes):
            raise KaioTypeError(
                f"{where}: the array's pointer {ptr:#x} (+{nbytes} bytes) is not simulator memory "
                f"of {device!r}"
            )
        return
    cuda_kinds = (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED, dlpack.KDL_CUDA_HOST)
    if dl_device is not None and (dl_device[0] not in cuda_kinds or dl_device[1] != device.ordinal):
        raise KaioTypeError(
            f"{where}: the array lives on DLPack device {dl_device}, but the launch runs on "
            f"{device!r}"
        )


def dlpack_stream(device: Device, stream: Any) -> int | None:
    """The stream number the DLPack protocol expects from a consumer: 1 for the legacy default
    stream, else the stream's handle; None for the simulator (host data carries no stream)."""
    if device.is_simulator:
        return None
    if stream is None:
        return 1
    return int(stream)
