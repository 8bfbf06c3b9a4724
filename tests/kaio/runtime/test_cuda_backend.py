"""The CUDA backend against a fake driver module, so the driver code path runs on a CPU box.

The fake speaks cuda-python's calling convention (``(CUresult, *values)`` tuples, the real enums
from ``cuda.bindings.driver``) and uses host memory as "device memory", so copies are real and a
launch can be decoded byte by byte from the ``kernelParams`` pointer array kaio builds.
"""

from __future__ import annotations

import ctypes
import itertools
import random
import re
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from acceptance_kernels import saxpy, vector_add

import kaio
from kaio import KaioDriverError, KaioLaunchError, KaioTypeError
from kaio.runtime import bench as bench_module
from kaio.runtime import cuda_backend, dlpack, driver
from kaio.runtime import device as device_module

real = pytest.importorskip("cuda.bindings.driver")
R = real.CUresult

_SIZES = {
    "u64": 8,
    "b64": 8,
    "s64": 8,
    "f64": 8,
    "u32": 4,
    "s32": 4,
    "b32": 4,
    "f32": 4,
    "b16": 2,
    "u16": 2,
    "s16": 2,
    "u8": 1,
    "tmap": 128,  # .param .align 64 .b8 name[128]: a CUtensorMap by value
}


class FakeDriver:
    """Just enough of cuda.bindings.driver for kaio's CUDA backend."""

    CUresult = real.CUresult
    CUjit_option = real.CUjit_option
    CUdevice_attribute = real.CUdevice_attribute
    CUfunction_attribute = real.CUfunction_attribute
    CUevent_flags = real.CUevent_flags
    CUstream_flags = real.CUstream_flags
    CUstream = real.CUstream

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
    }

    def __init__(self) -> None:
        self.memory: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.launches: list[dict[str, Any]] = []
        self.loads: list[tuple[list[Any], list[Any]]] = []
        self.fail_next: dict[str, Any] = {}  # call name -> CUresult to return once
        self.limit = 1 << 30
        self._ids = itertools.count(1)
        self._clock = 0.0

    def _result(self, name: str, *values: Any) -> tuple[Any, ...]:
        self.calls.append((name, values))
        err = self.fail_next.pop(name, None)
        if err is not None:
            return (err,) + (None,) * len(values)
        return (R.CUDA_SUCCESS, *values)

    # errors
    def cuGetErrorName(self, err: Any) -> tuple[Any, bytes]:
        return (R.CUDA_SUCCESS, err.name.encode())

    def cuGetErrorString(self, err: Any) -> tuple[Any, bytes]:
        return (R.CUDA_SUCCESS, f"description of {err.name.lower()}".encode())

    # device and context
    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return self._result("cuDeviceGetCount", 1)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return self._result("cuDeviceGet", ordinal)

    def cuDeviceGetAttribute(self, attr: Any, dev: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, self.ATTRIBUTES[attr.name.removeprefix("CU_DEVICE_ATTRIBUTE_")])

    def cuDeviceGetName(self, length: int, dev: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, b"Fake H100".ljust(length, b"\0"))

    def cuDeviceTotalMem(self, dev: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, self.limit)

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, ...]:
        return self._result("cuDevicePrimaryCtxRetain", "ctx0")

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        return self._result("cuCtxSetCurrent")

    def cuCtxSynchronize(self) -> tuple[Any, ...]:
        return self._result("cuCtxSynchronize")

    # memory: host memory stands in for device memory
    def cuMemAlloc(self, nbytes: int) -> tuple[Any, ...]:
        if nbytes > self.limit - sum(len(b) for b in self.memory.values()):
            return (R.CUDA_ERROR_OUT_OF_MEMORY, None)
        block = ctypes.create_string_buffer(nbytes)
        self.memory[ctypes.addressof(block)] = block
        return self._result("cuMemAlloc", ctypes.addressof(block))

    def cuMemFree(self, ptr: int) -> tuple[Any, ...]:
        if self.memory.pop(int(ptr), None) is None:
            return (R.CUDA_ERROR_INVALID_VALUE,)
        return self._result("cuMemFree")

    def cuMemGetInfo(self) -> tuple[Any, ...]:
        used = sum(len(b) for b in self.memory.values())
        return (R.CUDA_SUCCESS, self.limit - used, self.limit)

    def cuMemcpyHtoD(self, dst: int, src: int, n: int) -> tuple[Any, ...]:
        ctypes.memmove(dst, src, n)
        return self._result("cuMemcpyHtoD")

    def cuMemcpyDtoH(self, dst: int, src: int, n: int) -> tuple[Any, ...]:
        ctypes.memmove(dst, src, n)
        return self._result("cuMemcpyDtoH")

    def cuMemcpyDtoD(self, dst: int, src: int, n: int) -> tuple[Any, ...]:
        ctypes.memmove(dst, src, n)
        return self._result("cuMemcpyDtoD")

    def cuMemsetD8(self, ptr: int, value: int, n: int) -> tuple[Any, ...]:
        ctypes.memset(ptr, value, n)
        return self._result("cuMemsetD8")

    # modules
    def cuModuleLoadDataEx(
        self, image: bytes, n: int, options: list[Any], values: list[Any]
    ) -> tuple[Any, ...]:
        self.loads.append((options, values))
        assert image.endswith(b"\0") and n == len(options) == len(values)
        if b"frobnicate" in image:
            values[0][:60] = b"ptxas application ptx input, line 7; error: frobnicate\0".ljust(
                60, b"\0"
            )
            values[2][:20] = b"info: 0 bytes stack\0"
            return (R.CUDA_ERROR_INVALID_PTX, None)
        values[2][:28] = b"info: used 12 registers\0".ljust(28, b"\0")
        return self._result("cuModuleLoadDataEx", {"ptx": image[:-1].decode()})

    def cuModuleGetFunction(self, module: dict[str, Any], name: bytes) -> tuple[Any, ...]:
        text = module["ptx"]
        entry = text[text.index(f".entry {name.decode()}(") :]
        decls = re.findall(r"\.param (?:\.align 64 )?\.(\w+) \w+(\[128\])?", entry[: entry.index(")")])
        params = ["tmap" if array else t for t, array in decls]
        return self._result("cuModuleGetFunction", {"name": name.decode(), "params": params})

    def cuModuleUnload(self, module: Any) -> tuple[Any, ...]:
        return self._result("cuModuleUnload")

    def cuFuncSetAttribute(self, function: Any, attr: Any, value: int) -> tuple[Any, ...]:
        function["max_shared"] = value
        time.sleep(random.random() * 1e-3)  # a real call releases the GIL, for varying times
        return self._result("cuFuncSetAttribute", attr.name, value)

    def cuLaunchKernel(
        self,
        f: dict[str, Any],
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: Any,
        params: int,
        extra: int,
    ) -> tuple[Any, ...]:
        err = self.fail_next.pop("cuLaunchKernel", None)
        if err is not None:
            return (err,)
        if shared > f.get("max_shared", 48 * 1024):  # as the driver: above the opt-in, refused
            return (R.CUDA_ERROR_INVALID_VALUE,)
        types = f["params"]
        pointers = (ctypes.c_void_p * len(types)).from_address(params)
        raw = [ctypes.string_at(pointers[i] or 0, _SIZES[t]) for i, t in enumerate(types)]
        self.launches.append(
            {
                "name": f["name"],
                "grid": (gx, gy, gz),
                "block": (bx, by, bz),
                "shared": shared,
                "stream": int(stream),
                "raw": raw,
            }
        )
        return (R.CUDA_SUCCESS,)

    # TMA tensor maps: the arguments are recorded, the opaque words number the map
    CUtensorMapDataType = real.CUtensorMapDataType
    CUtensorMapInterleave = real.CUtensorMapInterleave
    CUtensorMapSwizzle = real.CUtensorMapSwizzle
    CUtensorMapL2promotion = real.CUtensorMapL2promotion
    CUtensorMapFloatOOBfill = real.CUtensorMapFloatOOBfill

    def cuTensorMapEncodeTiled(self, *args: Any) -> tuple[Any, ...]:
        tmap = real.CUtensorMap()
        tmap.opaque = [len(self.calls)] * 16
        return self._result("cuTensorMapEncodeTiled", tmap) if args[0] is not None else (R.CUDA_ERROR_INVALID_VALUE, None)

    # streams and events
    def cuStreamCreate(self, flags: Any) -> tuple[Any, ...]:
        return self._result("cuStreamCreate", real.CUstream(0x1000 + next(self._ids)))

    def cuStreamDestroy(self, stream: Any) -> tuple[Any, ...]:
        return self._result("cuStreamDestroy")

    def cuStreamSynchronize(self, stream: Any) -> tuple[Any, ...]:
        return self._result("cuStreamSynchronize", int(stream))

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[Any, ...]:
        return self._result("cuStreamWaitEvent", int(stream))

    def cuEventCreate(self, flags: Any) -> tuple[Any, ...]:
        return self._result("cuEventCreate", {"id": next(self._ids), "time": None})

    def cuEventDestroy(self, event: Any) -> tuple[Any, ...]:
        return self._result("cuEventDestroy")

    def cuEventRecord(self, event: dict[str, Any], stream: Any) -> tuple[Any, ...]:
        self._clock += 0.25
        event["time"] = self._clock
        return self._result("cuEventRecord", int(stream))

    def cuEventSynchronize(self, event: Any) -> tuple[Any, ...]:
        return self._result("cuEventSynchronize")

    def cuEventQuery(self, event: Any) -> tuple[Any, ...]:
        return self._result("cuEventQuery")

    def cuEventElapsedTime(self, start: dict[str, Any], end: dict[str, Any]) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, end["time"] - start["time"])

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDriver]:
    fake = FakeDriver()
    monkeypatch.setattr(device_module, "_devices", {})  # a fresh registry: Device(0) is the fake
    monkeypatch.setattr(cuda_backend, "_current", threading.local())
    with driver.use_driver(fake):
        yield fake


@pytest.fixture
def gpu(fake: FakeDriver) -> kaio.Device:
    return kaio.Device(0)


def test_device_properties_come_from_the_driver(gpu: kaio.Device, fake: FakeDriver) -> None:
    assert gpu is kaio.Device("cuda:0") and not gpu.is_simulator and repr(gpu) == "Device(0)"
    assert (gpu.name, gpu.arch, gpu.sm, gpu.sm_count, gpu.ordinal) == (
        "Fake H100",
        "sm_90",
        90,
        132,
        0,
    )
    assert gpu.shared_memory_per_block_optin == 227 * 1024
    assert gpu.compile_arch == "sm_90", "a Hopper GPU compiles for HOPPER_DEFAULT (test_device_arch.py)"
    assert "cuDevicePrimaryCtxRetain" in fake.names()
    fake.ATTRIBUTES = {**FakeDriver.ATTRIBUTES, "COMPUTE_CAPABILITY_MAJOR": 12}
    device_module._devices.clear()  # (the fixture's own registry) Device(0) is now an sm_120
    newer = kaio.Device(0)
    assert newer.arch == "sm_120" and newer.compile_arch == "sm_90", "newer GPUs get the newest portable arch kaio knows"


def test_buffers_round_trip_through_driver_copies(
    gpu: kaio.Device, fake: FakeDriver, rng: np.random.Generator
) -> None:
    host = rng.standard_normal((3, 7)).astype(np.float32)
    buf = gpu.alloc_from(host)
    assert buf.ptr in fake.memory
    np.testing.assert_array_equal(buf.to_host(), host)
    assert (gpu.zeros(5, np.int32).to_host() == 0).all()
    copy = gpu.alloc_from(buf)
    np.testing.assert_array_equal(copy.to_host(), host)
    ptr = copy.ptr
    copy.free()
    assert ptr not in fake.memory and fake.names()[-1] == "cuMemFree"


def test_a_launch_packs_every_parameter_and_makes_one_driver_call(
    gpu: kaio.Device, fake: FakeDriver
) -> None:
    n = 1000
    x, y = gpu.alloc_from(np.ones(n, np.float32)), gpu.zeros(n, np.float32)
    saxpy[kaio.cdiv(n, 256)](x, y, 2.5, n)
    (launch,) = fake.launches
    assert (
        launch["name"] == "saxpy" and launch["grid"] == (4, 1, 1) and launch["block"] == (256, 1, 1)
    )
    assert launch["raw"] == [
        struct.pack("<Q", x.ptr),
        struct.pack("<Q", y.ptr),
        struct.pack("<f", 2.5),
        struct.pack("<I", n),
    ]
    assert launch["stream"] == 0 and launch["shared"] == 0
    options, values = fake.loads[0]
    assert [o.name for o in options] == [
        "CU_JIT_ERROR_LOG_BUFFER",
        "CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES",
        "CU_JIT_INFO_LOG_BUFFER",
        "CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES",
        "CU_JIT_LOG_VERBOSE",
    ]
    assert isinstance(values[0], bytearray) and values[1] == len(values[0])
    jit_log = getattr(gpu._backend, "last_jit_log", None)
    assert jit_log == "info: used 12 registers"
    calls_before = len(fake.calls)
    saxpy[kaio.cdiv(n, 256)](x, y, -1.0, 7)  # the hot path: no driver call besides the launch
    assert len(fake.calls) == calls_before and len(fake.launches) == 2
    assert fake.launches[1]["raw"][2:] == [struct.pack("<f", -1.0), struct.pack("<I", 7)]


def test_half_and_bfloat_scalars_and_streams(
    gpu: kaio.Device, fake: FakeDriver, load_kernels: Any
) -> None:
    k = load_kernels("""
@kaio.gpu_kernel(block_size=32)
def mixed(out: MutArray[bf16], a: f16, b: bf16, c: i8, d: u64):
    out[0] = b
""").mixed
    out = gpu.zeros(1, "bfloat16")
    stream = gpu.stream()
    k.launch(gpu, out, 1.5, 3.0, -2, 2**64 - 1, grid=1, stream=stream)
    raw = fake.launches[0]["raw"]
    assert raw[1:] == [
        struct.pack("<e", 1.5),
        struct.pack("<H", 0x4040),
        struct.pack("<b", -2),
        struct.pack("<Q", 2**64 - 1),
    ]
    assert fake.launches[0]["stream"] == int(stream.handle) != 0
    stream.synchronize()
    assert ("cuStreamSynchronize", (int(stream.handle),)) in fake.calls


def test_large_dynamic_shared_memory_opts_in_once(gpu: kaio.Device, fake: FakeDriver) -> None:
    x = gpu.zeros(4, np.float32)
    for _ in range(2):
        saxpy.launch(gpu, x, x, 1.0, 4, grid=1, shared_bytes=100_000)
    assert fake.names().count("cuFuncSetAttribute") == 1
    assert (
        "cuFuncSetAttribute",
        ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 100_000),
    ) in fake.calls
    assert fake.launches[-1]["shared"] == 100_000


def test_threads_raising_the_shared_memory_limit_never_lower_it(
    gpu: kaio.Device, fake: FakeDriver
) -> None:
    # Each thread raises the function's limit to its own size, all at once: the driver must end
    # with the largest, or a later launch of the largest size is refused.
    x = gpu.zeros(4, np.float32)
    sizes = [60_000 + 10_000 * t for t in range(8)]
    # Two kernels, each raised by all threads at once: a race shows in one of them at least.
    launches = [
        lambda size: saxpy.launch(gpu, x, x, 1.0, 4, grid=1, shared_bytes=size),
        lambda size: vector_add.launch(gpu, x, x, x, 4, grid=1, shared_bytes=size),
    ]
    for launch in launches:
        launch(0)
    start = threading.Barrier(len(sizes))
    errors: list[BaseException] = []

    def work(size: int) -> None:
        start.wait()
        try:
            for _ in range(3):
                for launch in launches:
                    launch(size)
        except BaseException as exc:  # collected: an exception in a thread is lost otherwise
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in sizes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    for launch in launches:
        launch(max(sizes))


def test_a_switched_context_is_restored_and_the_launch_retried(
    gpu: kaio.Device, fake: FakeDriver
) -> None:
    x = gpu.zeros(4, np.float32)
    saxpy[1](x, x, 1.0, 4)
    sets = fake.names().count("cuCtxSetCurrent")
    fake.fail_next["cuLaunchKernel"] = R.CUDA_ERROR_INVALID_CONTEXT
    saxpy[1](x, x, 1.0, 4)
    assert fake.names().count("cuCtxSetCurrent") == sets + 1 and len(fake.launches) == 2


def test_a_failed_launch_is_a_driver_error(gpu: kaio.Device, fake: FakeDriver) -> None:
    x = gpu.zeros(4, np.float32)
    saxpy[1](x, x, 1.0, 4)
    fake.fail_next["cuLaunchKernel"] = R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    with pytest.raises(
        KaioDriverError,
        match=r"cuLaunchKernel failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: "
        r"description of .*kernel saxpy, grid \(1, 1, 1\)",
    ) as info:
        saxpy[1](x, x, 1.0, 4)
    assert (
        info.value.error_name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
        and info.value.call == "cuLaunchKernel"
    )


def test_jit_failure_carries_the_driver_log_and_the_ptx_path(
    gpu: kaio.Device, kaio_cache: Path
) -> None:
    ptx = ".version 8.0\n.target sm_90\n.address_size 64\n"
    ptx += ".visible .entry bad()\n{\n\tfrobnicate;\n}\n"
    with pytest.raises(KaioLaunchError) as info:
        gpu._modules.function(ptx, "bad")
    err = info.value
    assert "CUDA_ERROR_INVALID_PTX" in str(err) and "line 7; error: frobnicate" in err.log
    assert "0 bytes stack" in err.log, "the info log is kept too"
    assert err.ptx_path is not None and Path(err.ptx_path).read_text() == ptx
    assert Path(err.ptx_path).is_relative_to(kaio_cache)


def test_out_of_memory_says_how_much_is_free(gpu: kaio.Device, fake: FakeDriver) -> None:
    keep = gpu.zeros(1 << 20, np.uint8)
    with pytest.raises(
        KaioDriverError,
        match=r"out of memory: cannot allocate 2.00 GiB on Fake H100; 1023.00 MiB of 1.00 GiB free",
    ) as info:
        gpu.empty(2 << 30, np.uint8)
    assert info.value.error_name == "CUDA_ERROR_OUT_OF_MEMORY" and info.value.call == "cuMemAlloc"
    keep.free()


def test_a_kernel_fault_points_to_the_simulator(gpu: kaio.Device, fake: FakeDriver) -> None:
    fake.fail_next["cuCtxSynchronize"] = R.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(KaioDriverError, match=r"CUDA_ERROR_ILLEGAL_ADDRESS.*Device\('sim'\)"):
        gpu.synchronize()


def test_events_and_bench_use_the_gpu_clock(
    gpu: kaio.Device, fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    start, end = gpu.event(), gpu.event()
    start.record()
    end.record(gpu.stream())
    assert start.elapsed_ms(end) == pytest.approx(0.25) and end.query()
    monkeypatch.setattr(bench_module, "L2_FLUSH_BYTES", 4096)
    result = kaio.bench(lambda: None, warmup=1, rep=2, device=gpu)
    assert result.method == "cuda events" and result.device == "Device(0)"
    # The estimate: 5 calls between two events 0.25 ms apart; 2 ms of repetitions at 0.05 ms.
    assert result.reps == 40 and all(t == pytest.approx(0.25) for t in result.times_ms)
    assert fake.names().count("cuMemsetD8") >= result.reps, "L2 flushed before every timed call"


def test_dlpack_and_cai_export_are_zero_copy(gpu: kaio.Device) -> None:
    buf = gpu.alloc_from(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert buf.__dlpack_device__() == (dlpack.KDL_CUDA, 0)
    view = dlpack.consume(buf.__dlpack__())
    assert view.ptr == buf.ptr and view.shape == (2, 3) and view.device == (dlpack.KDL_CUDA, 0)
    view.release()
    view = dlpack.consume(buf.readonly().__dlpack__(max_version=(1, 0)))
    assert view.readonly
    view.release()
    with pytest.raises(BufferError, match="DLPack >= 1.0"):
        buf.readonly().__dlpack__()
    assert buf.__cuda_array_interface__["stream"] == 1 and buf.__cuda_array_interface__["data"] == (
        buf.ptr,
        False,
    )


class _DeviceTensor:
    """A CUDA tensor of another library, visible through DLPack only."""

    def __init__(self, buf: kaio.Buffer, device: tuple[int, int] = (dlpack.KDL_CUDA, 0)) -> None:
        self.buf, self.device = buf, device
        self.streams: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, stream: Any = None, max_version: Any = None) -> Any:
        self.streams.append(stream)
        return dlpack.export(self.buf.ptr, self.buf.shape, self.buf.dtype, self.device, self.buf)


def test_dlpack_tensors_are_kernel_arguments(gpu: kaio.Device, fake: FakeDriver) -> None:
    a, b, c = (gpu.zeros(8, np.float32) for _ in range(3))
    before = dlpack.live_exports()
    ta = _DeviceTensor(a)
    vector_add[1](ta, _DeviceTensor(b), c, 8)
    assert fake.launches[-1]["raw"][0] == struct.pack("<Q", a.ptr)
    assert ta.streams == [1], "the consumer asks for the legacy default stream it launches on"
    assert dlpack.live_exports() == before, "tensors are handed back after the launch"
    with pytest.raises(KaioTypeError, match=r"DLPack device \(2, 1\)"):
        vector_add[1](_DeviceTensor(a, (dlpack.KDL_CUDA, 1)), b, c, 8)
    assert dlpack.live_exports() == before, "and after a refused check"


def test_cai_stream_is_waited_for(gpu: kaio.Device, fake: FakeDriver) -> None:
    a = gpu.zeros(8, np.float32)

    class OnStream:
        __cuda_array_interface__ = {**a.__cuda_array_interface__, "stream": 0x777}

    vector_add[1](OnStream(), a, a, 8)
    assert ("cuStreamWaitEvent", (0,)) in fake.calls, "kaio's stream waits for the producer's"


def test_check_names_the_call_and_the_error(fake: FakeDriver) -> None:
    assert driver.check("cuX", (R.CUDA_SUCCESS, 5)) == 5
    assert driver.check("cuX", (R.CUDA_SUCCESS, 5, 6)) == (5, 6)
    with pytest.raises(KaioDriverError) as info:
        driver.check("cuMemcpyHtoD", (R.CUDA_ERROR_INVALID_VALUE, None))
    assert (info.value.call, info.value.error_name) == ("cuMemcpyHtoD", "CUDA_ERROR_INVALID_VALUE")
    assert (
        str(info.value) == "cuMemcpyHtoD failed with CUDA_ERROR_INVALID_VALUE: "
        "description of cuda_error_invalid_value"
    )


@pytest.mark.skipif(driver.available(), reason="a CUDA driver is present")
def test_without_a_driver_loading_says_why() -> None:
    with pytest.raises(driver.DriverUnavailable) as info:
        driver.load()
    assert (
        str(info.value) == "no CUDA driver found" and "DynamicLibNotFoundError" in info.value.detail
    )


def test_a_tma_kernel_gets_its_tensor_maps_from_the_driver(gpu: kaio.Device, fake: FakeDriver) -> None:
    """On a Hopper GPU the sm_90a matmul's K loop runs on TMA and C leaves by TMA: each launch
    passes the CUtensorMaps cuTensorMapEncodeTiled built from the arguments (C's, then A's and
    B's), after the user's parameters (remembered: the same arguments encode nothing new)."""
    from kaio.ops_library import matmul

    gpu = kaio.Device(0, arch="sm_90a")  # the TMA paths are opt-in on Hopper (HOPPER_DEFAULT)
    m, n, k = 128, 96, 64
    a, b = gpu.zeros((m, k), np.float16), gpu.zeros((k, n), np.float16)
    c = gpu.zeros((m, n), np.float32)
    for _ in range(2):
        matmul(a, b, c)
    encodes = [args for name, args in fake.calls if name == "cuTensorMapEncodeTiled"]
    assert len(encodes) == 3 and len(fake.launches) == 2
    raw = fake.launches[-1]["raw"]
    assert raw[:3] == [struct.pack("<Q", x.ptr) for x in (a, b, c)] and len(raw) == 9 + 3
    assert [len(blob) for blob in raw[9:]] == [128] * 3 and len(set(raw[9:])) == 3
    for blob, (tmap,) in zip(raw[9:], encodes):  # each the opaque words the driver returned
        assert list(struct.unpack("<16Q", blob)) == [int(w) for w in tmap.opaque]


def test_tensor_maps_are_encoded_as_the_driver_documents(gpu: kaio.Device, fake: FakeDriver) -> None:
    seen: list[tuple[Any, ...]] = []
    encode = fake.cuTensorMapEncodeTiled

    def record(*args: Any) -> tuple[Any, ...]:
        seen.append(args)
        return encode(*args)

    fake.cuTensorMapEncodeTiled = record  # type: ignore[method-assign]
    blob = gpu._backend.encode_tensor_map(kaio.dtypes.bf16, 0x10000, (72, 100), (176,), (64, 128), 128)
    assert len(blob) == 128
    kind, rank, base, dims, strides, box, steps, interleave, swizzle, l2, oob = seen[0]
    assert (kind.name, rank, base, dims, strides, box, steps) == ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2, 0x10000, [72, 100], [176], [64, 128], [1, 1])
    assert (interleave.name, swizzle.name, oob.name) == ("CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_SWIZZLE_128B", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")
    gpu._backend.encode_tensor_map(kaio.dtypes.f32, 0x10000, (8,), (), (8,), 0)
    assert seen[1][8].name == "CU_TENSOR_MAP_SWIZZLE_NONE" and seen[1][0].name == "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"
