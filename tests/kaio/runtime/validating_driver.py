"""A fake CUDA driver that runs every call through cuda-python's real argument conversion.

kaio's CUDA backend is tested on machines without a GPU. A fake that accepts any argument let a
call the real binding refuses (``cuTensorMapEncodeTiled`` given lists of Python ints where it
wants ``cuuint64_t``/``cuuint32_t``) pass every test and fail at the first launch on a GPU. So
each call kaio makes here goes first to the real function of ``cuda.bindings.driver`` with the
same arguments. The binding converts and type-checks every argument before it looks for the
driver library; without one, a well-typed call ends in the "no driver library" RuntimeError
(``DynamicLibNotFoundError`` in cuda-python 13, "Failed to dlopen libcuda.so.1" or
'Function "cuX" not found' in 12.x), and that is the only answer accepted: anything else (a
TypeError, "List is too small", ...) is a ``DriverCallRejected`` naming the call. Then the fake
answers as the driver would, with host memory standing in for device memory.

What it hands back are the binding's own handle types (``CUcontext``, ``CUdeviceptr``,
``CUstream``, ``CUevent``, ``CUmodule``, ``CUfunction``, ``CUgraph``, ``CUgraphExec``,
``CUtensorMap``), so the handles kaio passes back later are validated too; and it refuses what
the driver documents as refused (unknown or destroyed handles, pointers outside an allocation,
calls without a current context, launches above the shared-memory opt-in, tensor maps that break
``cuTensorMapEncodeTiled``'s requirements, synchronising or touching the legacy stream while
this thread captures).

On a machine where a driver library loads, the real call would *run* (on made-up handles), so
validation is off there (``VALIDATES`` is False; the tests that show a rejection skip): the fake
still answers, and ``pytest -m gpu`` checks the real driver directly.
"""

from __future__ import annotations

import ctypes
import itertools
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import kaio
from kaio.runtime import cuda_backend, driver, tensors
from kaio.runtime import device as device_module

try:
    real = driver.binding()
except ImportError:
    pytest.skip("cuda-python is not installed", allow_module_level=True)
R = real.CUresult

_FUNCTION = re.compile(r"cu[A-Z]\w*")
# What a call without a driver library raises once its arguments have converted.
_NO_LIBRARY = re.compile(r'Failed to dlopen \S+|Function "cu\w+" not found')


class DriverCallRejected(AssertionError):
    """cuda-python refused the arguments kaio passed: on a GPU this call raises."""


def _no_library(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and (
        type(exc).__name__ == "DynamicLibNotFoundError" or bool(_NO_LIBRARY.fullmatch(str(exc)))
    )


def _probe() -> bool:
    """Whether no driver library loads here (then real calls convert and stop, harmlessly)."""
    try:
        real.cuDriverGetVersion()
    except RuntimeError as exc:
        return _no_library(exc)
    return False


VALIDATES = _probe()


_inside = threading.local()  # .busy: this thread is inside a real binding call


def conforms(name: str, args: tuple[Any, ...]) -> None:
    """Run ``real.<name>(*args)``; return if it stopped only for want of a driver library.

    A call made while this thread is already inside one is not validated: it is a garbage
    collector's finalizer (a Buffer freed) running in the middle of the binding's library
    lookup, whose lock is not reentrant; validating it would deadlock the test."""
    if getattr(_inside, "busy", False):
        return
    _inside.busy = True
    try:
        getattr(real, name)(*args)
    except Exception as exc:
        if _no_library(exc):
            return
        shown = ", ".join(_show(a) for a in args)
        raise DriverCallRejected(
            f"cuda-python refuses {name}({shown}): {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        _inside.busy = False
    raise DriverCallRejected(f"{name} reached a real driver: validation must be off here")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# Values each call returns after its CUresult (cuda-python's tuple), when not one.
_VALUES = {name: 0 for name in (
    "cuInit", "cuCtxSetCurrent", "cuCtxSynchronize", "cuMemFree", "cuMemcpyHtoD", "cuMemcpyDtoH",
    "cuMemcpyDtoD", "cuMemsetD8", "cuModuleUnload", "cuFuncSetAttribute", "cuLaunchKernel",
    "cuStreamDestroy", "cuStreamSynchronize", "cuStreamWaitEvent", "cuStreamBeginCapture",
    "cuEventDestroy", "cuEventRecord", "cuEventSynchronize", "cuEventQuery", "cuGraphLaunch",
    "cuGraphExecDestroy", "cuGraphDestroy", "cuMemFreeAsync", "cuMemsetD8Async", "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
)} | {"cuMemGetInfo": 2}  # fmt: skip
_NEEDS_CONTEXT = frozenset({
    "cuCtxSynchronize", "cuMemAlloc", "cuMemFree", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD",
    "cuMemsetD8", "cuMemGetInfo", "cuModuleLoadDataEx", "cuModuleUnload", "cuModuleGetFunction",
    "cuLaunchKernel", "cuStreamCreate", "cuEventCreate", "cuTensorMapEncodeTiled", "cuMemPoolCreate",
    "cuMemAllocFromPoolAsync", "cuMemFreeAsync", "cuMemsetD8Async", "cuMemPoolTrimTo",
})  # fmt: skip
_PARAM_BYTES = {"u64": 8, "b64": 8, "s64": 8, "f64": 8, "u32": 4, "s32": 4, "b32": 4, "f32": 4,
                "b16": 2, "u16": 2, "s16": 2, "f16": 2, "u8": 1, "s8": 1, "b8": 1,
                "tmap": 128}  # fmt: skip  # tmap: .param .align 64 .b8 name[128], a CUtensorMap
_TMA_ELEMENT_BYTES = {"UINT8": 1, "UINT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
                      "FLOAT16": 2, "FLOAT32": 4, "FLOAT64": 8, "BFLOAT16": 2}  # fmt: skip
_SWIZZLE_SPAN = {"NONE": None, "32B": 32, "64B": 64, "128B": 128}
_LEGACY_STREAMS = (0, 1)  # the NULL stream and CU_STREAM_LEGACY
_PER_THREAD_STREAM = 2
ALLOCATION_ALIGNMENT = 256  # cuMemAlloc's documented alignment


class ValidatingDriver:
    """Every ``cu*`` function kaio calls: validated (above), logged in ``calls`` as
    ``(name, args)``, failed once on request (``fail_next[name] = CUresult``), then answered.
    Types and enums (``CUresult``, ``CUstream``, ``cuuint64_t``...) are the real binding's."""

    ATTRIBUTES = {
        "COMPUTE_CAPABILITY_MAJOR": 9,
        "COMPUTE_CAPABILITY_MINOR": 0,
        "MULTIPROCESSOR_COUNT": 132,
        "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024,
        "MAX_THREADS_PER_BLOCK": 1024,
        "MAX_BLOCK_DIM_X": 1024,
        "MAX_BLOCK_DIM_Y": 1024,
        "MAX_BLOCK_DIM_Z": 64,
        "MAX_GRID_DIM_X": 2**31 - 1,
        "MAX_GRID_DIM_Y": 65535,
        "MAX_GRID_DIM_Z": 65535,
        "MEMORY_POOLS_SUPPORTED": 1,
    }
    DEVICES = 1
    DRIVER_VERSION = 12080  # CUDA 12.8
    CONTEXT = 0xC0DE00

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.rejected: list[DriverCallRejected] = []  # also those kaio swallowed (cleanup paths)
        self.fail_next: dict[str, Any] = {}
        self.limit = 1 << 30  # bytes of "device memory"
        self.memory: dict[int, tuple[ctypes.Array[ctypes.c_char], int]] = {}  # ptr -> (block, n)
        self.pools: dict[int, dict[str, Any]] = {}  # handle -> attributes set, trims
        self.pool_memory: dict[int, int] = {}  # ptr -> the pool of a stream-ordered allocation
        self.launches: list[dict[str, Any]] = []
        self.loads: list[tuple[list[Any], list[Any]]] = []
        self.modules: dict[int, str] = {}  # handle -> PTX
        self.functions: dict[int, dict[str, Any]] = {}
        self.streams: dict[int, Any] = {}  # handle -> CUstream_flags (foreign: None)
        self.events: dict[int, dict[str, Any]] = {}
        self.capturing: dict[int, list[dict[str, Any]]] = {}  # stream -> launches captured
        self.graphs: dict[int, list[dict[str, Any]]] = {}
        self.graph_execs: dict[int, list[dict[str, Any]]] = {}
        self.tensor_maps: dict[int, dict[str, Any]] = {}  # opaque[0] -> the decoded arguments
        self._ids = itertools.count(0x1000)
        self._clock = 0.0
        self._thread = threading.local()  # .ctx: the current context; .captures: open captures
        self._lock = threading.Lock()

    # --- the validating wrapper ------------------------------------------------------------------

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if _FUNCTION.fullmatch(name) and callable(value):
            return object.__getattribute__(self, "_validated")(name, value)
        return value

    def __getattr__(self, name: str) -> Any:
        if _FUNCTION.fullmatch(name):
            raise AttributeError(f"kaio called {name}, which the validating fake does not answer")
        return getattr(real, name)

    def _validated(self, name: str, answer: Callable[..., tuple[Any, ...]]) -> Callable[..., Any]:
        def call(*args: Any) -> tuple[Any, ...]:
            if VALIDATES:
                try:
                    conforms(name, args)
                except DriverCallRejected as exc:
                    self.rejected.append(exc)
                    raise
            with self._lock:
                self.calls.append((name, args))
            failure = self.fail_next.pop(name, None)
            if failure is None and name in _NEEDS_CONTEXT and self._current() is None:
                failure = R.CUDA_ERROR_INVALID_CONTEXT
            if failure is not None:
                return self._error(name, failure)
            return answer(*args)

        return call

    def _error(self, name: str, err: Any) -> tuple[Any, ...]:
        return (err,) + (None,) * _VALUES.get(name, 1)

    def _current(self) -> Any:
        return getattr(self._thread, "ctx", None)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def args_of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]

    def adopt_stream(self, handle: int) -> None:
        """A stream another library created (torch's current stream, a CAI producer's)."""
        self.streams[handle] = None

    # --- errors, device, context -----------------------------------------------------------------

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS,)

    def cuGetErrorName(self, err: Any) -> tuple[Any, bytes]:
        return (R.CUDA_SUCCESS, err.name.encode())

    def cuGetErrorString(self, err: Any) -> tuple[Any, bytes]:
        return (R.CUDA_SUCCESS, f"description of {err.name.lower()}".encode())

    def cuDriverGetVersion(self) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, self.DRIVER_VERSION)

    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, self.DEVICES)

    def _device(self, dev: Any) -> bool:
        return 0 <= int(dev) < self.DEVICES

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        if not self._device(ordinal):
            return (R.CUDA_ERROR_INVALID_DEVICE, None)
        return (R.CUDA_SUCCESS, real.CUdevice(ordinal))

    def cuDeviceGetAttribute(self, attr: Any, dev: Any) -> tuple[Any, ...]:
        if not self._device(dev):
            return (R.CUDA_ERROR_INVALID_DEVICE, None)
        return (R.CUDA_SUCCESS, self.ATTRIBUTES[attr.name.removeprefix("CU_DEVICE_ATTRIBUTE_")])

    def cuDeviceGetName(self, length: int, dev: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, b"Fake H100".ljust(length, b"\0"))

    def cuDeviceTotalMem(self, dev: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, self.limit)

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, ...]:
        if not self._device(dev):
            return (R.CUDA_ERROR_INVALID_DEVICE, None)
        return (R.CUDA_SUCCESS, real.CUcontext(self.CONTEXT))

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        if int(ctx) not in (0, self.CONTEXT):
            return (R.CUDA_ERROR_INVALID_CONTEXT,)
        self._thread.ctx = ctx if int(ctx) else None
        return (R.CUDA_SUCCESS,)

    def cuCtxSynchronize(self) -> tuple[Any, ...]:
        return self._outside_capture(R.CUDA_SUCCESS)

    # --- memory: host memory stands in for device memory ----------------------------------------

    def _inside(self, ptr: Any, nbytes: int) -> bool:
        """Whether [ptr, ptr + nbytes) lies in one allocation."""
        address = int(ptr)
        return any(
            base <= address and address + nbytes <= base + n for base, (_, n) in self.memory.items()
        )

    def cuMemAlloc(self, nbytes: int) -> tuple[Any, ...]:
        return self._allocate(nbytes)

    def _allocate(self, nbytes: int) -> tuple[Any, ...]:
        with self._lock:
            if nbytes == 0:
                return (R.CUDA_ERROR_INVALID_VALUE, None)
            if nbytes > self.limit - sum(n for _, n in self.memory.values()):
                return (R.CUDA_ERROR_OUT_OF_MEMORY, None)
            block = ctypes.create_string_buffer(nbytes + ALLOCATION_ALIGNMENT)
            ptr = -ctypes.addressof(block) % ALLOCATION_ALIGNMENT + ctypes.addressof(block)
            self.memory[ptr] = (block, nbytes)
        return (R.CUDA_SUCCESS, real.CUdeviceptr(ptr))

    def cuMemFree(self, ptr: Any) -> tuple[Any, ...]:
        with self._lock:
            if self.memory.pop(int(ptr), None) is None:
                return (R.CUDA_ERROR_INVALID_VALUE,)
        return (R.CUDA_SUCCESS,)

    # --- stream-ordered memory from a pool --------------------------------------------------------

    def _ordered(self, stream: Any) -> Any:
        """What a stream-ordered call on ``stream`` answers before doing anything: an unknown
        stream is refused, and so is the legacy stream while this thread captures (it would
        synchronise with the capturing stream)."""
        if not self._stream(stream):
            return R.CUDA_ERROR_INVALID_HANDLE
        if int(stream) in _LEGACY_STREAMS and self._capturing_here():
            return R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        return None

    def cuMemPoolCreate(self, props: Any) -> tuple[Any, ...]:
        location = props.location
        if (props.allocType.name != "CU_MEM_ALLOCATION_TYPE_PINNED"
                or location.type.name != "CU_MEM_LOCATION_TYPE_DEVICE" or not self._device(location.id)):  # fmt: skip
            return (R.CUDA_ERROR_INVALID_VALUE, None)
        handle = next(self._ids)
        self.pools[handle] = {"trims": 0}
        return (R.CUDA_SUCCESS, real.CUmemoryPool(handle))

    def cuMemPoolSetAttribute(self, pool: Any, attr: Any, value: Any) -> tuple[Any, ...]:
        if int(pool) not in self.pools:
            return (R.CUDA_ERROR_INVALID_VALUE,)
        self.pools[int(pool)][attr.name] = int(value)
        return (R.CUDA_SUCCESS,)

    def cuMemPoolTrimTo(self, pool: Any, keep: int) -> tuple[Any, ...]:
        if int(pool) not in self.pools:
            return (R.CUDA_ERROR_INVALID_VALUE,)
        self.pools[int(pool)]["trims"] += 1
        return (R.CUDA_SUCCESS,)

    def cuMemAllocFromPoolAsync(self, nbytes: int, pool: Any, stream: Any) -> tuple[Any, ...]:
        refused = self._ordered(stream) or (None if int(pool) in self.pools else R.CUDA_ERROR_INVALID_VALUE)
        if refused is not None:
            return (refused, None)
        err, ptr = self._allocate(nbytes)
        if not err:
            self.pool_memory[int(ptr)] = int(pool)
        return (err, ptr)

    def cuMemFreeAsync(self, ptr: Any, stream: Any) -> tuple[Any, ...]:
        refused = self._ordered(stream)
        if refused is not None:
            return (refused,)
        with self._lock:
            if self.memory.pop(int(ptr), None) is None:
                return (R.CUDA_ERROR_INVALID_VALUE,)
            self.pool_memory.pop(int(ptr), None)
        return (R.CUDA_SUCCESS,)

    def cuMemsetD8Async(self, ptr: Any, value: int, nbytes: int, stream: Any) -> tuple[Any, ...]:
        refused = self._ordered(stream)
        if refused is not None:
            return (refused,)
        return self._set(ptr, value, nbytes)

    def cuMemGetInfo(self) -> tuple[Any, ...]:
        used = sum(n for _, n in self.memory.values())
        return (R.CUDA_SUCCESS, self.limit - used, self.limit)

    def _copy(self, dst: Any, src: Any, nbytes: int, on_dst: bool, on_src: bool) -> tuple[Any, ...]:
        """``on_dst``/``on_src``: that side is device memory, which must lie in an allocation."""
        if (on_dst and not self._inside(dst, nbytes)) or (on_src and not self._inside(src, nbytes)):
            return (R.CUDA_ERROR_INVALID_VALUE,)
        ctypes.memmove(int(dst), int(src), nbytes)
        return (R.CUDA_SUCCESS,)

    def cuMemcpyHtoD(self, dst: Any, src: Any, nbytes: int) -> tuple[Any, ...]:
        return self._copy(dst, src, nbytes, True, False)

    def cuMemcpyDtoH(self, dst: Any, src: Any, nbytes: int) -> tuple[Any, ...]:
        return self._copy(dst, src, nbytes, False, True)

    def cuMemcpyDtoD(self, dst: Any, src: Any, nbytes: int) -> tuple[Any, ...]:
        return self._copy(dst, src, nbytes, True, True)

    def cuMemsetD8(self, ptr: Any, value: int, nbytes: int) -> tuple[Any, ...]:
        return self._set(ptr, value, nbytes)

    def _set(self, ptr: Any, value: int, nbytes: int) -> tuple[Any, ...]:
        if not self._inside(ptr, nbytes):
            return (R.CUDA_ERROR_INVALID_VALUE,)
        ctypes.memset(int(ptr), value, nbytes)
        return (R.CUDA_SUCCESS,)

    # --- modules and launches --------------------------------------------------------------------

    def cuModuleLoadDataEx(
        self, image: bytes, count: int, options: list[Any], values: list[Any]
    ) -> tuple[Any, ...]:
        self.loads.append((options, values))
        assert image.endswith(b"\0") and count == len(options) == len(values)
        logs = {o.name: v for o, v in zip(options, values)}
        if b"frobnicate" in image:
            error = b"ptxas application ptx input, line 7; error: frobnicate\0"
            logs["CU_JIT_ERROR_LOG_BUFFER"][: len(error)] = error
            logs["CU_JIT_INFO_LOG_BUFFER"][:20] = b"info: 0 bytes stack\0"
            return (R.CUDA_ERROR_INVALID_PTX, None)
        logs["CU_JIT_INFO_LOG_BUFFER"][:24] = b"info: used 12 registers\0"
        handle = next(self._ids)
        self.modules[handle] = image[:-1].decode()
        return (R.CUDA_SUCCESS, real.CUmodule(handle))

    def cuModuleUnload(self, module: Any) -> tuple[Any, ...]:
        if self.modules.pop(int(module), None) is None:
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        return (R.CUDA_SUCCESS,)

    def cuModuleGetFunction(self, module: Any, name: bytes) -> tuple[Any, ...]:
        text = self.modules.get(int(module))
        if text is None:
            return (R.CUDA_ERROR_INVALID_HANDLE, None)
        start = text.find(f".entry {name.decode()}(")
        if start < 0:
            return (R.CUDA_ERROR_NOT_FOUND, None)
        entry = text[start:]
        signature = entry[: entry.index(")")]
        decls = re.findall(r"\.param (?:\.align \d+ )?\.(\w+) \w+(\[128\])?", signature)
        handle = next(self._ids)
        self.functions[handle] = {
            "name": name.decode(),
            "params": ["tmap" if array else t for t, array in decls],
            "max_shared": cuda_backend.DEFAULT_SHARED_LIMIT,
        }
        return (R.CUDA_SUCCESS, real.CUfunction(handle))

    def cuFuncSetAttribute(self, function: Any, attr: Any, value: int) -> tuple[Any, ...]:
        f = self.functions.get(int(function))
        if f is None:
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        if attr.name == "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES":
            if value > self.ATTRIBUTES["MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"]:
                return (R.CUDA_ERROR_INVALID_VALUE,)
            f["max_shared"] = value
        return (R.CUDA_SUCCESS,)

    def cuLaunchKernel(self, function: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shared: int, stream: Any, params: Any, extra: Any) -> tuple[Any, ...]:  # fmt: skip
        f = self.functions.get(int(function))
        if f is None or not self._stream(stream):
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        a = self.ATTRIBUTES
        if (
            min(gx, gy, gz, bx, by, bz) < 1
            or bx * by * bz > a["MAX_THREADS_PER_BLOCK"]
            or bx > a["MAX_BLOCK_DIM_X"] or by > a["MAX_BLOCK_DIM_Y"] or bz > a["MAX_BLOCK_DIM_Z"]
            or gx > a["MAX_GRID_DIM_X"] or gy > a["MAX_GRID_DIM_Y"] or gz > a["MAX_GRID_DIM_Z"]
            or shared > f["max_shared"]  # above the function's opt-in: refused, as the driver does
            or (f["params"] and not int(params))
        ):  # fmt: skip
            return (R.CUDA_ERROR_INVALID_VALUE,)
        if int(stream) in _LEGACY_STREAMS and self._capturing_here():
            return (R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,)
        types = f["params"]
        pointers = (ctypes.c_void_p * max(len(types), 1)).from_address(int(params)) if types else []
        raw = [ctypes.string_at(pointers[i], _PARAM_BYTES[t]) for i, t in enumerate(types)]
        launch = {"name": f["name"], "grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared,
                  "stream": int(stream), "raw": raw}  # fmt: skip
        with self._lock:
            captured = self.capturing.get(int(stream))
            (captured if captured is not None else self.launches).append(launch)
        return (R.CUDA_SUCCESS,)

    # --- TMA tensor maps -------------------------------------------------------------------------

    def cuTensorMapEncodeTiled(self, kind: Any, rank: Any, address: Any, dims: Any, strides: Any, box: Any,
                               steps: Any, interleave: Any, swizzle: Any, l2: Any, oob: Any) -> tuple[Any, ...]:  # fmt: skip
        """The requirements the driver documents; the map's words number it (``tensor_maps``)."""
        rank, address = int(rank), int(address)
        dims, strides = [int(d) for d in dims], [int(s) for s in strides]
        box, steps = [int(b) for b in box], [int(e) for e in steps]
        element = _TMA_ELEMENT_BYTES.get(kind.name.removeprefix("CU_TENSOR_MAP_DATA_TYPE_"))
        span = _SWIZZLE_SPAN.get(swizzle.name.removeprefix("CU_TENSOR_MAP_SWIZZLE_"), -1)
        ok = (
            element is not None and 1 <= rank <= 5 and address % 16 == 0
            and len(dims) == len(box) == len(steps) == rank and len(strides) == rank - 1
            and all(0 < d <= 1 << 32 for d in dims)
            and all(s % 16 == 0 and 0 < s < 1 << 40 for s in strides)
            and all(0 < b <= 256 for b in box) and all(0 < e <= 8 for e in steps)
            and interleave.name == "CU_TENSOR_MAP_INTERLEAVE_NONE"
            and box[0] * element % 16 == 0
            and span != -1 and (span is None or box[0] * element <= span)
        )  # fmt: skip
        if not ok:
            return (R.CUDA_ERROR_INVALID_VALUE, None)
        number = len(self.tensor_maps) + 1
        self.tensor_maps[number] = {
            "kind": kind.name, "address": address, "dims": dims, "strides": strides, "box": box,
            "steps": steps, "swizzle": swizzle.name, "l2": l2.name, "oob": oob.name,
        }  # fmt: skip
        tmap = real.CUtensorMap()
        tmap.opaque = [number] * 16
        return (R.CUDA_SUCCESS, tmap)

    # --- streams and events ----------------------------------------------------------------------

    def _stream(self, stream: Any) -> bool:
        handle = int(stream)
        return handle in _LEGACY_STREAMS or handle == _PER_THREAD_STREAM or handle in self.streams

    def _capturing_here(self) -> bool:
        return bool(getattr(self._thread, "captures", None))

    def _outside_capture(self, answer: Any) -> tuple[Any, ...]:
        """Synchronising while this thread captures (thread-local mode) invalidates the capture."""
        return (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED if self._capturing_here() else answer,)

    def cuStreamCreate(self, flags: Any) -> tuple[Any, ...]:
        handle = next(self._ids)
        self.streams[handle] = flags
        return (R.CUDA_SUCCESS, real.CUstream(handle))

    def cuStreamDestroy(self, stream: Any) -> tuple[Any, ...]:
        if self.streams.get(int(stream), None) is None or int(stream) in self.capturing:
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        del self.streams[int(stream)]
        return (R.CUDA_SUCCESS,)

    def cuStreamSynchronize(self, stream: Any) -> tuple[Any, ...]:
        if not self._stream(stream):
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        return self._outside_capture(R.CUDA_SUCCESS)

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[Any, ...]:
        if not self._stream(stream) or int(event) not in self.events:
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        return (R.CUDA_SUCCESS,)

    def cuEventCreate(self, flags: Any) -> tuple[Any, ...]:
        handle = next(self._ids)
        self.events[handle] = {"timing": flags.name != "CU_EVENT_DISABLE_TIMING", "time": None}
        return (R.CUDA_SUCCESS, real.CUevent(handle))

    def cuEventDestroy(self, event: Any) -> tuple[Any, ...]:
        if self.events.pop(int(event), None) is None:
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        return (R.CUDA_SUCCESS,)

    def cuEventRecord(self, event: Any, stream: Any) -> tuple[Any, ...]:
        e = self.events.get(int(event))
        if e is None or not self._stream(stream):
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        self._clock += 0.25
        e["time"] = self._clock
        return (R.CUDA_SUCCESS,)

    def cuEventSynchronize(self, event: Any) -> tuple[Any, ...]:
        if int(event) not in self.events:
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        return self._outside_capture(R.CUDA_SUCCESS)

    def cuEventQuery(self, event: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS if int(event) in self.events else R.CUDA_ERROR_INVALID_HANDLE,)

    def cuEventElapsedTime(self, start: Any, end: Any) -> tuple[Any, ...]:
        a, b = self.events.get(int(start)), self.events.get(int(end))
        # The driver: either event unknown, unrecorded or without timing -> INVALID_HANDLE.
        if any(e is None or e["time"] is None or not e["timing"] for e in (a, b)):
            return (R.CUDA_ERROR_INVALID_HANDLE, None)
        return (R.CUDA_SUCCESS, b["time"] - a["time"])

    # --- stream capture and graphs ---------------------------------------------------------------

    def cuStreamBeginCapture(self, stream: Any, mode: Any) -> tuple[Any, ...]:
        handle = int(stream)
        if not self._stream(stream):
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        if handle not in self.streams:  # the legacy or per-thread stream cannot be captured
            return (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        if handle in self.capturing:
            return (R.CUDA_ERROR_ILLEGAL_STATE,)
        self.capturing[handle] = []
        if mode.name == "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL":
            self._thread.captures = getattr(self._thread, "captures", set()) | {handle}
        return (R.CUDA_SUCCESS,)

    def cuStreamEndCapture(self, stream: Any) -> tuple[Any, ...]:
        nodes = self.capturing.pop(int(stream), None)
        if nodes is None:
            return (R.CUDA_ERROR_ILLEGAL_STATE, None)
        self._thread.captures = getattr(self._thread, "captures", set()) - {int(stream)}
        handle = next(self._ids)
        self.graphs[handle] = nodes
        return (R.CUDA_SUCCESS, real.CUgraph(handle))

    def cuGraphInstantiate(self, graph: Any, flags: int) -> tuple[Any, ...]:
        nodes = self.graphs.get(int(graph))
        if nodes is None:
            return (R.CUDA_ERROR_INVALID_HANDLE, None)
        handle = next(self._ids)
        self.graph_execs[handle] = list(nodes)
        return (R.CUDA_SUCCESS, real.CUgraphExec(handle))

    def cuGraphLaunch(self, graph_exec: Any, stream: Any) -> tuple[Any, ...]:
        nodes = self.graph_execs.get(int(graph_exec))
        if nodes is None or not self._stream(stream):
            return (R.CUDA_ERROR_INVALID_HANDLE,)
        self.launches.extend({**node, "stream": int(stream), "replayed": True} for node in nodes)
        return (R.CUDA_SUCCESS,)

    def cuGraphExecDestroy(self, graph_exec: Any) -> tuple[Any, ...]:
        return (_status(self.graph_execs.pop(int(graph_exec), None) is not None),)

    def cuGraphDestroy(self, graph: Any) -> tuple[Any, ...]:
        return (_status(self.graphs.pop(int(graph), None) is not None),)


def _status(known: bool) -> Any:
    """Destroying a handle: success when it was live, else what the driver says."""
    return R.CUDA_SUCCESS if known else R.CUDA_ERROR_INVALID_HANDLE


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[ValidatingDriver]:
    """The validating driver installed as kaio's CUDA driver, with fresh device registries; at
    the end, no call may have been refused (kaio's cleanup paths swallow exceptions)."""
    fake = ValidatingDriver()
    monkeypatch.setattr(device_module, "_devices", {})  # a fresh registry: Device(0) is the fake
    monkeypatch.setattr(cuda_backend, "_current", threading.local())
    monkeypatch.setattr(tensors, "_cuda_devices", {})
    with driver.use_driver(fake):
        yield fake
    assert not fake.rejected, f"a driver call was refused: {fake.rejected[0]}"


@pytest.fixture
def gpu(fake: ValidatingDriver) -> kaio.Device:
    return kaio.Device(0)
