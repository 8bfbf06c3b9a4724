"""The CUDA backend: one GPU through the driver API (cuda-python's ``cuda.bindings.driver``).

Context: the device's *primary* context, retained once (it is the context the CUDA runtime,
PyTorch and CuPy use, so buffers and streams interoperate) and made current on the calling thread
before each operation. Which context kaio last made current is remembered per thread, so the
check costs no driver call; if another library switched contexts behind kaio's back, the
resulting INVALID_CONTEXT/INVALID_HANDLE makes kaio set it again and retry once.

Launch: parameters are packed with one ``struct.pack_into`` into a buffer laid out once per
function, and ``cuLaunchKernel`` gets the address of a prebuilt array of pointers into it: a
launch is that pack and one driver call. The driver copies parameters at launch time, so the
buffer is reused; a lock per function keeps two threads from packing into it at once, and from
racing each other when they raise its dynamic shared-memory limit.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from kaio.compiled import KernelParam
from kaio.dtypes import ScalarType
from kaio.errors import KaioDriverError, KaioLaunchError
from kaio.runtime import driver
from kaio.runtime.args import struct_code
from kaio.runtime.backend import Backend, DeviceInfo, LaunchFn
from kaio.runtime.driver import check

JIT_LOG_BYTES = 64 * 1024
DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory above this needs an opt-in attribute
_RETRY_ERRORS = (
    "CUDA_ERROR_INVALID_CONTEXT",
    "CUDA_ERROR_INVALID_HANDLE",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
)

# element types TMA moves, by kaio name -> CU_TENSOR_MAP_DATA_TYPE_* (16-bit floats keep their
# type so the map reads as what it is; integers by width)
TMA_DATA_TYPES = {
    "f16": "FLOAT16", "bf16": "BFLOAT16", "f32": "FLOAT32", "f64": "FLOAT64",
    "i8": "UINT8", "u8": "UINT8", "bool": "UINT8", "i16": "UINT16", "u16": "UINT16",
    "i32": "INT32", "u32": "UINT32", "i64": "INT64", "u64": "UINT64",
    "f8e4m3": "UINT8", "f8e5m2": "UINT8",  # TMA has no fp8 type: bytes are bytes
}  # fmt: skip

_current = threading.local()  # .ctx: the context kaio last made current on this thread


def _text(log: bytearray) -> str:
    return bytes(log).split(b"\0", 1)[0].decode(errors="replace").strip()


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


class CudaBackend(Backend):
    def __init__(self, ordinal: int) -> None:
        drv = driver.load()  # DriverUnavailable when there is no driver
        self._drv = drv
        count = check("cuDeviceGetCount", drv.cuDeviceGetCount())
        if count == 0:
            raise driver.DriverUnavailable("no CUDA device found")
        if not 0 <= ordinal < count:
            raise KaioDriverError(
                "cuDeviceGet",
                "CUDA_ERROR_INVALID_DEVICE",
                f"no CUDA device {ordinal}: there are {count}",
            )
        self._device = check("cuDeviceGet", drv.cuDeviceGet(ordinal))
        major = self._attribute("COMPUTE_CAPABILITY_MAJOR")
        minor = self._attribute("COMPUTE_CAPABILITY_MINOR")
        raw_name = check("cuDeviceGetName", drv.cuDeviceGetName(256, self._device))
        name = bytes(raw_name).split(b"\0", 1)[0].decode(errors="replace")
        per_block = self._attribute("MAX_SHARED_MEMORY_PER_BLOCK")
        self.info = DeviceInfo(
            name=name,
            arch=f"sm_{major}{minor}",
            sm=major * 10 + minor,
            sm_count=self._attribute("MULTIPROCESSOR_COUNT"),
            total_memory=int(check("cuDeviceTotalMem", drv.cuDeviceTotalMem(self._device))),
            shared_memory_per_block=per_block,
            shared_memory_per_block_optin=max(
                per_block, self._attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
            ),
            max_threads_per_block=self._attribute("MAX_THREADS_PER_BLOCK"),
            max_block=(
                self._attribute("MAX_BLOCK_DIM_X"),
                self._attribute("MAX_BLOCK_DIM_Y"),
                self._attribute("MAX_BLOCK_DIM_Z"),
            ),
            max_grid=(
                self._attribute("MAX_GRID_DIM_X"),
                self._attribute("MAX_GRID_DIM_Y"),
                self._attribute("MAX_GRID_DIM_Z"),
            ),
            is_simulator=False,
            ordinal=ordinal,
        )
        self._ctx = check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(self._device))
        self._null_stream = drv.CUstream(0)
        self._pool: Any = None  # kaio's stream-ordered memory pool, made at the first workspace
        self._pool_lock = threading.Lock()
        self.last_jit_log = ""  # the JIT's info log of the latest module load

    def _attribute(self, name: str) -> int:
        attr = getattr(self._drv.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
        return int(
            check("cuDeviceGetAttribute", self._drv.cuDeviceGetAttribute(attr, self._device))
        )

    def activate(self, force: bool = False) -> None:
        """Make the primary context current on this thread (no driver call if kaio already did)."""
        if force or getattr(_current, "ctx", None) is not self._ctx:
            check("cuCtxSetCurrent", self._drv.cuCtxSetCurrent(self._ctx))
            _current.ctx = self._ctx

    def stream_handle(self, stream: Any) -> Any:
        """None -> the legacy default stream; an int (interop protocols) -> a CUstream."""
        if stream is None:
            return self._null_stream
        if isinstance(stream, int):
            return self._drv.CUstream(stream)
        return stream

    # --- memory ----------------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        self.activate()
        err, ptr = self._drv.cuMemAlloc(nbytes)
        if err and driver.is_error(err, "CUDA_ERROR_OUT_OF_MEMORY") and self._trim_pool():
            err, ptr = self._drv.cuMemAlloc(nbytes)  # the pool's cached memory was in the way
        if err:
            raise self._alloc_error("cuMemAlloc", err, nbytes)
        return int(ptr)

    def _alloc_error(self, call: str, err: Any, nbytes: int) -> KaioDriverError:
        if driver.is_error(err, "CUDA_ERROR_OUT_OF_MEMORY"):
            try:
                free, total = self.memory_info()
                have = f"; {_size(free)} of {_size(total)} free"
            except KaioDriverError:
                have = ""
            return driver.error(
                call, err, f"out of memory: cannot allocate {_size(nbytes)} on {self.info.name}{have}"
            )
        return driver.error(call, err, f"{nbytes} bytes")

    def free(self, ptr: int) -> None:
        self.activate()
        check("cuMemFree", self._drv.cuMemFree(ptr))

    # --- stream-ordered memory: kaio's own pool, so neither call waits for the device (cuMemFree
    # synchronises the whole device: one per split-K matmul cost more than the matmul). The pool
    # keeps what is freed (release threshold: everything) until an ordinary allocation runs out
    # of memory; it is kaio's own, so other libraries' use of the device's default pool is
    # untouched. A device without memory pools gets the plain calls.

    def _memory_pool(self) -> Any:
        with self._pool_lock:
            if self._pool is None:
                self._pool = self._create_pool() if self._attribute("MEMORY_POOLS_SUPPORTED") else False
            return self._pool

    def _create_pool(self) -> Any:
        drv = self._drv
        props = drv.CUmemPoolProps()
        props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = int(self.info.ordinal or 0)
        pool = check("cuMemPoolCreate", drv.cuMemPoolCreate(props))
        keep_all = drv.cuuint64_t(2**64 - 1)
        check("cuMemPoolSetAttribute", drv.cuMemPoolSetAttribute(
            pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, keep_all))  # fmt: skip
        return pool

    def _trim_pool(self) -> bool:
        """Hand the pool's cached memory back to the device (after a synchronisation, so no free
        is still pending); whether there was a pool to trim."""
        if not self._pool:
            return False
        self.synchronize()
        check("cuMemPoolTrimTo", self._drv.cuMemPoolTrimTo(self._pool, 0))
        return True

    def alloc_on(self, stream: Any, nbytes: int) -> int:
        self.activate()
        pool = self._memory_pool()
        if not pool:
            return self.alloc(nbytes)
        handle = self.stream_handle(stream)
        err, ptr = self._drv.cuMemAllocFromPoolAsync(nbytes, pool, handle)
        if err:
            raise self._alloc_error("cuMemAllocFromPoolAsync", err, nbytes)
        return int(ptr)

    def free_on(self, stream: Any, ptr: int) -> None:
        if not self._pool:
            return self.free(ptr)
        self.activate()
        check("cuMemFreeAsync", self._drv.cuMemFreeAsync(ptr, self.stream_handle(stream)))

    def zero_on(self, stream: Any, ptr: int, nbytes: int) -> None:
        self.activate()
        check("cuMemsetD8Async", self._drv.cuMemsetD8Async(ptr, 0, nbytes, self.stream_handle(stream)))

    def upload(self, ptr: int, host: np.ndarray) -> None:
        self.activate()
        check("cuMemcpyHtoD", self._drv.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes))

    def download(self, ptr: int, host: np.ndarray) -> None:
        self.activate()
        check("cuMemcpyDtoH", self._drv.cuMemcpyDtoH(host.ctypes.data, ptr, host.nbytes))

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        self.activate()
        check("cuMemcpyDtoD", self._drv.cuMemcpyDtoD(dst, src, nbytes))

    def zero(self, ptr: int, nbytes: int) -> None:
        self.activate()
        check("cuMemsetD8", self._drv.cuMemsetD8(ptr, 0, nbytes))

    def memory_info(self) -> tuple[int, int]:
        self.activate()
        free, total = check("cuMemGetInfo", self._drv.cuMemGetInfo())
        return int(free), int(total)

    # --- modules and launches --------------------------------------------------------------------

    def load_module(self, ptx: str) -> Any:
        self.activate()
        drv = self._drv
        opt = drv.CUjit_option
        errors, infos = bytearray(JIT_LOG_BYTES), bytearray(JIT_LOG_BYTES)
        options = [
            opt.CU_JIT_ERROR_LOG_BUFFER,
            opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            opt.CU_JIT_INFO_LOG_BUFFER,
            opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            opt.CU_JIT_LOG_VERBOSE,
        ]
        values: list[Any] = [errors, JIT_LOG_BYTES, infos, JIT_LOG_BYTES, 1]
        result = drv.cuModuleLoadDataEx(ptx.encode() + b"\0", len(options), options, values)
        if result[0]:
            failure = driver.error("cuModuleLoadDataEx", result[0])
            log = "\n".join(part for part in (_text(errors), _text(infos)) if part)
            raise KaioLaunchError(
                f"the CUDA driver could not load the PTX ({failure.error_name}"
                + (f": {failure.error_string})" if failure.error_string else ")"),
                log=log,
            )
        self.last_jit_log = _text(infos)
        return result[1]

    def unload_module(self, module: Any) -> None:
        self.activate()
        check("cuModuleUnload", self._drv.cuModuleUnload(module))

    def get_function(self, module: Any, name: str) -> Any:
        self.activate()
        return check("cuModuleGetFunction", self._drv.cuModuleGetFunction(module, name.encode()))

    def launcher(self, function: Any, params: tuple[KernelParam, ...], name: str) -> LaunchFn:
        drv = self._drv
        # One slot per parameter at its natural alignment; a pointer array into the slots.
        fmt, offsets, offset = "<", [], 0
        for p in params:
            size = p.nbytes
            pad = -offset % size
            fmt += "x" * pad + struct_code(p)
            offset += pad
            offsets.append(offset)
            offset += size
        storage = (ctypes.c_uint8 * max(offset, 1))()
        base = ctypes.addressof(storage)
        pointers = (ctypes.c_void_p * max(len(params), 1))(*[base + o for o in offsets])
        kernel_params = ctypes.addressof(pointers) if params else 0
        keep_alive = (storage, pointers)  # the driver reads them through raw addresses
        pack_into = struct.Struct(fmt).pack_into
        cu_launch = drv.cuLaunchKernel
        lock = threading.Lock()
        shared_optin = [DEFAULT_SHARED_LIMIT]  # dynamic shared memory this function allows so far
        activate = self.activate
        null_stream = self._null_stream

        def run(
            grid: tuple[int, int, int],
            block: tuple[int, int, int],
            shared_bytes: int,
            stream: Any,
            values: Sequence[Any],
        ) -> None:
            handle = null_stream if stream is None else stream
            activate()
            with lock:
                # Under the lock: two threads raising the limit at once must not leave the
                # smaller value in the driver while the larger one is remembered here.
                if shared_bytes > shared_optin[0]:
                    self._allow_shared(function, shared_bytes)
                    shared_optin[0] = shared_bytes
                pack_into(storage, 0, *values)
                (err,) = cu_launch(function, *grid, *block, shared_bytes, handle, kernel_params, 0)
                if err and any(driver.is_error(err, e) for e in _RETRY_ERRORS):
                    activate(force=True)  # another library switched the current context
                    (err,) = cu_launch(
                        function, *grid, *block, shared_bytes, handle, kernel_params, 0
                    )
            if err:
                raise driver.error(
                    "cuLaunchKernel",
                    err,
                    f"kernel {name}, grid {grid}, block {block}, {shared_bytes} B dynamic shared",
                )

        run.keep_alive = keep_alive  # type: ignore[attr-defined]
        return run

    def encode_tensor_map(self, dtype: ScalarType, base: int, dims: tuple[int, ...], strides: tuple[int, ...],
                          box: tuple[int, ...], swizzle: int) -> bytes:  # fmt: skip
        """``cuTensorMapEncodeTiled``: boxes outside the tensor read as zero (no NaN fill), L2
        lines fetched 128 bytes at a time, the opaque 128-byte CUtensorMap as bytes.

        The binding takes the arrays as lists of its own ``cuuint64_t`` (extents, byte strides)
        and ``cuuint32_t`` (box, element steps): a list of Python ints is a TypeError before the
        driver is even looked up."""
        self.activate()  # the driver documents CUDA_ERROR_INVALID_CONTEXT for this call
        drv = self._drv
        kinds = drv.CUtensorMapDataType
        try:
            kind = getattr(kinds, "CU_TENSOR_MAP_DATA_TYPE_" + TMA_DATA_TYPES[dtype.name])
        except KeyError:
            raise KaioLaunchError(f"TMA cannot move {dtype.name} elements") from None
        swizzles = drv.CUtensorMapSwizzle
        mode = getattr(swizzles, "CU_TENSOR_MAP_SWIZZLE_" + ({0: "NONE"}.get(swizzle) or f"{swizzle}B"))
        tmap = check(
            "cuTensorMapEncodeTiled",
            drv.cuTensorMapEncodeTiled(
                kind, len(dims), base,
                [drv.cuuint64_t(d) for d in dims], [drv.cuuint64_t(s) for s in strides],
                [drv.cuuint32_t(b) for b in box], [drv.cuuint32_t(1)] * len(dims),
                drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, mode,
                drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            ),
        )  # fmt: skip
        return struct.pack("<16Q", *(int(w) for w in tmap.opaque))

    def _allow_shared(self, function: Any, nbytes: int) -> None:
        attr = self._drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check("cuFuncSetAttribute", self._drv.cuFuncSetAttribute(function, attr, nbytes))

    def synchronize(self) -> None:
        self.activate()
        check("cuCtxSynchronize", self._drv.cuCtxSynchronize())

    # --- streams and events ----------------------------------------------------------------------

    def create_stream(self) -> Any:
        self.activate()
        flags = (
            self._drv.CUstream_flags.CU_STREAM_DEFAULT
        )  # blocking: orders with legacy stream work
        return check("cuStreamCreate", self._drv.cuStreamCreate(flags))

    def destroy_stream(self, stream: Any) -> None:
        self.activate()
        check("cuStreamDestroy", self._drv.cuStreamDestroy(stream))

    def synchronize_stream(self, stream: Any) -> None:
        self.activate()
        check("cuStreamSynchronize", self._drv.cuStreamSynchronize(self.stream_handle(stream)))

    def create_event(self, timing: bool) -> Any:
        self.activate()
        flags = self._drv.CUevent_flags
        flag = flags.CU_EVENT_DEFAULT if timing else flags.CU_EVENT_DISABLE_TIMING
        return check("cuEventCreate", self._drv.cuEventCreate(flag))

    def destroy_event(self, event: Any) -> None:
        self.activate()
        check("cuEventDestroy", self._drv.cuEventDestroy(event))

    def record_event(self, event: Any, stream: Any) -> None:
        self.activate()
        check("cuEventRecord", self._drv.cuEventRecord(event, self.stream_handle(stream)))

    def synchronize_event(self, event: Any) -> None:
        check("cuEventSynchronize", self._drv.cuEventSynchronize(event))

    def query_event(self, event: Any) -> bool:
        (err,) = self._drv.cuEventQuery(event)
        if err and driver.is_error(err, "CUDA_ERROR_NOT_READY"):
            return False
        if err:
            raise driver.error("cuEventQuery", err)
        return True

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(check("cuEventElapsedTime", self._drv.cuEventElapsedTime(start, end)))

    def wait_stream(self, waiter: Any, producer: Any) -> None:
        self.activate()
        event = self.create_event(timing=False)
        try:
            self.record_event(event, producer)
            check(
                "cuStreamWaitEvent",
                self._drv.cuStreamWaitEvent(self.stream_handle(waiter), event, 0),
            )
        finally:
            self.destroy_event(event)

    # --- graphs ----------------------------------------------------------------------------------

    def create_capture_stream(self) -> Any:
        self.activate()
        # Non-blocking, as torch's capture streams are: a blocking stream is implicitly ordered
        # with the legacy default stream, and that dependency is illegal during a capture.
        flags = self._drv.CUstream_flags.CU_STREAM_NON_BLOCKING
        return check("cuStreamCreate", self._drv.cuStreamCreate(flags))

    def begin_capture(self, stream: Any) -> None:
        self.activate()
        # Thread-local mode: only this thread's unsafe calls (a synchronize, a legacy-stream
        # launch) invalidate the capture; other threads keep working.
        mode = self._drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check("cuStreamBeginCapture", self._drv.cuStreamBeginCapture(stream, mode))

    def end_capture(self, stream: Any) -> Any:
        self.activate()
        return check("cuStreamEndCapture", self._drv.cuStreamEndCapture(stream))

    def instantiate_graph(self, graph: Any) -> Any:
        self.activate()
        return check("cuGraphInstantiate", self._drv.cuGraphInstantiate(graph, 0))

    def launch_graph(self, graph_exec: Any, stream: Any) -> None:
        self.activate()
        check("cuGraphLaunch", self._drv.cuGraphLaunch(graph_exec, self.stream_handle(stream)))

    def destroy_graph(self, graph: Any, graph_exec: Any) -> None:
        self.activate()
        if graph_exec is not None:
            check("cuGraphExecDestroy", self._drv.cuGraphExecDestroy(graph_exec))
        if graph is not None:
            check("cuGraphDestroy", self._drv.cuGraphDestroy(graph))
