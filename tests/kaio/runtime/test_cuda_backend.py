"""The CUDA backend against the validating fake driver (``validating_driver.py``), so the driver
code path runs on a CPU box: every call kaio makes goes through cuda-python's real argument
conversion first, and the fake answers with the binding's own handle types, host memory standing
in for device memory (copies are real; a launch is decoded byte by byte from the
``kernelParams`` pointer array kaio builds).
"""

from __future__ import annotations

import re
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from acceptance_kernels import saxpy, vector_add

import kaio
from kaio import KaioDriverError, KaioLaunchError, KaioTypeError
from kaio.runtime import bench as bench_module
from kaio.runtime import device as device_module
from kaio.runtime import dlpack, driver

from . import validating_driver as vd
from .validating_driver import ValidatingDriver

fake, gpu = vd.fake, vd.gpu  # the fixtures
real, R = vd.real, vd.R


def test_device_properties_come_from_the_driver(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    assert gpu is kaio.Device("cuda:0") and not gpu.is_simulator and repr(gpu) == "Device(0)"
    assert (gpu.name, gpu.arch, gpu.sm, gpu.sm_count, gpu.ordinal) == (
        "Fake H100",
        "sm_90",
        90,
        132,
        0,
    )
    assert gpu.shared_memory_per_block_optin == 227 * 1024
    assert gpu.compile_arch == "sm_90a", "a Hopper GPU compiles for HOPPER_DEFAULT (test_device_arch.py)"
    assert "cuDevicePrimaryCtxRetain" in fake.names()
    fake.ATTRIBUTES = {**ValidatingDriver.ATTRIBUTES, "COMPUTE_CAPABILITY_MAJOR": 12}
    device_module._devices.clear()  # (the fixture's own registry) Device(0) is now an sm_120
    newer = kaio.Device(0)
    assert newer.arch == "sm_120" and newer.compile_arch == "sm_90", "newer GPUs get the newest portable arch kaio knows"


def test_buffers_round_trip_through_driver_copies(
    gpu: kaio.Device, fake: ValidatingDriver, rng: np.random.Generator
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
    gpu: kaio.Device, fake: ValidatingDriver
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
    assert fake.names()[calls_before:] == ["cuLaunchKernel"] and len(fake.launches) == 2
    assert fake.launches[1]["raw"][2:] == [struct.pack("<f", -1.0), struct.pack("<I", 7)]


def test_half_and_bfloat_scalars_and_streams(
    gpu: kaio.Device, fake: ValidatingDriver, load_kernels: Any
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
    assert [int(s) for (s,) in fake.args_of("cuStreamSynchronize")] == [int(stream.handle)]
    assert isinstance(stream.handle, real.CUstream), "the binding's handle, passed back as is"


def test_large_dynamic_shared_memory_opts_in_once(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    x = gpu.zeros(4, np.float32)
    for _ in range(2):
        saxpy.launch(gpu, x, x, 1.0, 4, grid=1, shared_bytes=100_000)
    assert [(attr.name, value) for _, attr, value in fake.args_of("cuFuncSetAttribute")] == [
        ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 100_000)
    ]
    assert fake.launches[-1]["shared"] == 100_000


def test_threads_raising_the_shared_memory_limit_never_lower_it(
    gpu: kaio.Device, fake: ValidatingDriver
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
    gpu: kaio.Device, fake: ValidatingDriver
) -> None:
    x = gpu.zeros(4, np.float32)
    saxpy[1](x, x, 1.0, 4)
    sets = fake.names().count("cuCtxSetCurrent")
    fake.fail_next["cuLaunchKernel"] = R.CUDA_ERROR_INVALID_CONTEXT
    saxpy[1](x, x, 1.0, 4)
    assert fake.names().count("cuCtxSetCurrent") == sets + 1 and len(fake.launches) == 2


def test_a_failed_launch_is_a_driver_error(gpu: kaio.Device, fake: ValidatingDriver) -> None:
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


def test_out_of_memory_says_how_much_is_free(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    keep = gpu.zeros(1 << 20, np.uint8)
    with pytest.raises(
        KaioDriverError,
        match=r"out of memory: cannot allocate 1023.50 MiB on Fake H100; 1023.00 MiB of 1.00 GiB free",
    ) as info:  # less than the device holds (more is refused before the driver), more than is free
        gpu.empty((1 << 30) - (1 << 19), np.uint8)
    assert info.value.error_name == "CUDA_ERROR_OUT_OF_MEMORY" and info.value.call == "cuMemAlloc"
    keep.free()


def test_a_kernel_fault_points_to_the_simulator(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    fake.fail_next["cuCtxSynchronize"] = R.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(KaioDriverError, match=r"CUDA_ERROR_ILLEGAL_ADDRESS.*Device\('sim'\)"):
        gpu.synchronize()


def test_events_and_bench_use_the_gpu_clock(
    gpu: kaio.Device, fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch
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


def test_dlpack_tensors_are_kernel_arguments(gpu: kaio.Device, fake: ValidatingDriver) -> None:
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


def test_cai_stream_is_waited_for(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    a = gpu.zeros(8, np.float32)

    class OnStream:
        __cuda_array_interface__ = {**a.__cuda_array_interface__, "stream": 0x777}

    fake.adopt_stream(0x777)  # the producer's stream
    vector_add[1](OnStream(), a, a, 8)
    (recorded,) = fake.args_of("cuEventRecord")
    ((waiter, event, flags),) = fake.args_of("cuStreamWaitEvent")
    assert int(recorded[1]) == 0x777 and int(recorded[0]) == int(event)
    assert int(waiter) == 0, "kaio's stream (the legacy one) waits for the producer's"


def test_check_names_the_call_and_the_error(fake: ValidatingDriver) -> None:
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
    # cuda-python 13: DynamicLibNotFoundError; 12.x: RuntimeError("Failed to dlopen libcuda.so.1")
    assert str(info.value) == "no CUDA driver found"
    assert re.match(r"(DynamicLibNotFoundError|RuntimeError): ", info.value.detail)


def test_a_tma_kernel_gets_its_tensor_maps_from_the_driver(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    """On a Hopper GPU the sm_90a matmul's K loop runs on TMA and C leaves by TMA: each launch
    passes the CUtensorMaps cuTensorMapEncodeTiled built from the arguments (C's, then A's and
    B's), after the user's parameters (remembered: the same arguments encode nothing new)."""
    from kaio.ops_library import matmul

    gpu = kaio.Device(0, arch="sm_90a")  # (the default on Hopper too: HOPPER_DEFAULT)
    m, n, k = 128, 96, 64
    a, b = gpu.zeros((m, k), np.float16), gpu.zeros((k, n), np.float16)
    c = gpu.zeros((m, n), np.float32)
    for _ in range(2):
        matmul(a, b, c)
    assert len(fake.args_of("cuTensorMapEncodeTiled")) == 3 and len(fake.launches) == 2
    raw = fake.launches[-1]["raw"]
    assert raw[:3] == [struct.pack("<Q", x.ptr) for x in (a, b, c)] and len(raw) == 9 + 3
    maps = [struct.unpack("<16Q", blob) for blob in raw[9:]]  # each the words the driver returned
    assert [words[0] for words in maps] == [1, 2, 3] and all(len(set(w)) == 1 for w in maps)
    assert [fake.tensor_maps[w[0]]["address"] for w in maps] == [c.ptr, a.ptr, b.ptr]


def test_a_tile_of_whole_panels_gets_a_paneled_tensor_map(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    """n a multiple of 64: B's 64 x 256 tiles are one box of a rank-3 map (64 elements, k rows
    n * 2 bytes apart, n / 64 panels 128 bytes apart), through the real binding's conversions
    and the driver's documented requirements."""
    from kaio.ops_library import matmul

    gpu = kaio.Device(0, arch="sm_90a")
    m, n, k = 128, 320, 72
    a, b = gpu.zeros((m, k), np.float16), gpu.zeros((k, n), np.float16)
    matmul(a, b, gpu.zeros((m, n), np.float32))
    (b_map,) = [t for t in fake.tensor_maps.values() if t["address"] == b.ptr]
    assert (b_map["dims"], b_map["strides"], b_map["box"]) == ([64, k, n // 64], [n * 2, 128], [64, 64, 4])
    assert b_map["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B" and b_map["oob"] == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"


def _tensor_map_arguments(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """cuTensorMapEncodeTiled's arguments as Python values (enums by name, arrays as ints)."""
    kind, rank, base, dims, strides, box, steps, interleave, swizzle, l2, oob = args
    ints = lambda items: [int(i) for i in items]  # noqa: E731
    return (kind.name, int(rank), int(base), ints(dims), ints(strides), ints(box), ints(steps),
            interleave.name, swizzle.name, l2.name, oob.name)  # fmt: skip


def test_tensor_maps_are_encoded_as_the_driver_documents(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    blob = gpu._backend.encode_tensor_map(kaio.dtypes.bf16, 0x10000, (72, 100), (176,), (64, 128), 128)
    assert len(blob) == 128
    (args,) = fake.args_of("cuTensorMapEncodeTiled")
    assert _tensor_map_arguments(args) == (
        "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2, 0x10000, [72, 100], [176], [64, 128], [1, 1],
        "CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_SWIZZLE_128B",
        "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
    )  # fmt: skip
    # the arrays in the binding's own element types: what its conversion accepts
    assert [type(x).__name__ for x in (*args[3], *args[4], *args[5], *args[6])] == ["cuuint64_t"] * 3 + ["cuuint32_t"] * 4
    gpu._backend.encode_tensor_map(kaio.dtypes.f32, 0x10000, (8,), (), (8,), 0)
    second = _tensor_map_arguments(fake.args_of("cuTensorMapEncodeTiled")[1])
    assert second[0] == "CU_TENSOR_MAP_DATA_TYPE_FLOAT32" and second[8] == "CU_TENSOR_MAP_SWIZZLE_NONE"


needs_validation = pytest.mark.skipif(
    not vd.VALIDATES, reason="a CUDA driver library loads here: the real call would run"
)


@needs_validation
def test_the_validating_driver_rejects_the_old_tensor_map_call(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    """The call kaio made before: the arrays as lists of Python ints. cuda-python refuses it
    (TypeError) before it looks for the driver; the old fake accepted it and every test passed."""
    gpu._backend.activate()  # a current context, as kaio's own calls have
    kind = real.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    rest = (
        real.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        real.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        real.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        real.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    with pytest.raises(vd.DriverCallRejected, match=r"refuses cuTensorMapEncodeTiled\(.*TypeError"):
        fake.cuTensorMapEncodeTiled(kind, 2, 0x10000, [72, 100], [176], [64, 128], [1, 1], *rest)
    u64, u32 = real.cuuint64_t, real.cuuint32_t
    err, tmap = fake.cuTensorMapEncodeTiled(
        kind, 2, 0x10000, [u64(72), u64(100)], [u64(176)], [u32(64), u32(128)], [u32(1)] * 2, *rest
    )
    assert err == R.CUDA_SUCCESS and isinstance(tmap, real.CUtensorMap)
    # Handles of the wrong kind are refused the same way (the old fake handed out strings).
    with pytest.raises(vd.DriverCallRejected, match="cuCtxSetCurrent"):
        fake.cuCtxSetCurrent("ctx0")
    with pytest.raises(vd.DriverCallRejected, match="cuModuleLoadDataEx.*List is too small"):
        fake.cuModuleLoadDataEx(b"\0", 1, [], [])
    assert len(fake.rejected) == 3
    fake.rejected.clear()  # seen: the fixture checks that nothing else was refused


def _driver_calls_in(folder: Path) -> set[str]:
    """Every ``<module>.cuX`` the sources under ``folder`` name: the driver calls they can make."""
    return {m for path in folder.rglob("*.py") for m in re.findall(r"\.(cu[A-Z]\w*)\b", path.read_text())}


def test_the_validating_driver_answers_every_call_kaio_makes() -> None:
    """A call kaio makes that the fake does not answer could not be validated: none may exist."""
    missing = {name for name in _driver_calls_in(Path(kaio.__file__).parent) if name not in dir(ValidatingDriver)}
    assert not missing, f"add these to validating_driver.ValidatingDriver: {sorted(missing)}"


def test_every_driver_call_kaio_makes_goes_through_the_binding(
    fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """Each backend operation once, on the validating driver (cuInit through driver.load());
    together they make every driver call kaio's runtime contains, so a new call with arguments
    the binding refuses fails here."""
    # not monkeypatch: its undo runs after the fake fixture restored the state, and would put the
    # fake back as the loaded driver for every later test; the fixture restores this itself
    driver._driver = None
    monkeypatch.setattr(driver, "binding", lambda: fake)
    assert driver.load() is fake
    gpu = kaio.Device(0, arch="sm_90a")
    backend = gpu._backend
    host = rng.standard_normal(64).astype(np.float32)
    x = gpu.alloc_from(host)  # cuMemAlloc, cuMemcpyHtoD
    y = gpu.alloc_from(x)  # cuMemcpyDtoD
    z = gpu.zeros(64, np.float32)  # cuMemsetD8
    np.testing.assert_array_equal(y.to_host(), host)  # cuMemcpyDtoH
    assert backend.memory_info()[1] == fake.limit
    saxpy.launch(gpu, x, z, 2.0, 64, grid=1, shared_bytes=64 * 1024)  # cuFuncSetAttribute
    stream, start, end = gpu.stream(), gpu.event(), gpu.event()
    start.record(stream)
    vector_add.launch(gpu, x, y, z, 64, grid=1, stream=stream)
    end.record(stream)
    assert start.elapsed_ms(end) > 0 and end.query()  # cuEventSynchronize, cuEventQuery
    backend.wait_stream(None, stream.handle)  # cuStreamWaitEvent
    stream.synchronize()
    with gpu.capture() as graph:
        vector_add[1](x, y, z, 64)
    graph.replay(stream)
    graph.close()
    from kaio.ops_library import matmul

    a, b = gpu.zeros((64, 32), np.float16), gpu.zeros((32, 64), np.float16)
    matmul(a, b, gpu.zeros((64, 64), np.float32))  # cuTensorMapEncodeTiled
    from kaio.runtime.workspace import workspace

    # cuMemPoolCreate, cuMemPoolSetAttribute, cuMemAllocFromPoolAsync, cuMemsetD8Async, cuMemFreeAsync
    with workspace(gpu, (64,), np.float32, zero=True) as scratch:
        vector_add.launch(gpu, x, y, scratch, 64, grid=1)
    fake.fail_next["cuMemAlloc"] = R.CUDA_ERROR_OUT_OF_MEMORY
    gpu.empty(4, np.float32).free()  # cuMemPoolTrimTo, then the allocation again
    fake.fail_next["cuCtxSynchronize"] = R.CUDA_ERROR_UNKNOWN
    with pytest.raises(KaioDriverError, match="CUDA_ERROR_UNKNOWN: description"):
        gpu.synchronize()  # cuGetErrorName, cuGetErrorString
    gpu.synchronize()
    gpu._modules.clear()  # cuModuleUnload
    pointers = [buf.ptr for buf in (x, y, z)]
    for buf in (x, y, z):
        buf.free()
    stream.close()
    missing = _driver_calls_in(Path(driver.__file__).parent) - set(fake.names())
    assert not missing, f"driver calls kaio makes that no test here ran: {sorted(missing)}"
    assert not fake.modules and not set(pointers) & set(fake.memory) and int(stream.handle) not in fake.streams


def test_the_driver_refuses_what_it_documents(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    """The fake is as strict as the driver: a tensor map of a misaligned base, a destroyed stream,
    a launch above the function's shared-memory opt-in are driver errors, not silent successes."""
    backend = gpu._backend
    with pytest.raises(KaioDriverError, match="cuTensorMapEncodeTiled failed with CUDA_ERROR_INVALID_VALUE"):
        backend.encode_tensor_map(kaio.dtypes.f16, 0x10008, (64, 64), (128,), (64, 64), 128)
    with pytest.raises(KaioDriverError, match="CUDA_ERROR_INVALID_VALUE"):  # 64 f32: 256 B > 128 B
        backend.encode_tensor_map(kaio.dtypes.f32, 0x10000, (64, 64), (256,), (64, 64), 128)
    stream = gpu.stream()
    handle = stream.handle
    stream.close()
    with pytest.raises(KaioDriverError, match="cuStreamSynchronize failed with CUDA_ERROR_INVALID_HANDLE"):
        backend.synchronize_stream(handle)
    x = gpu.zeros(4, np.float32)
    saxpy[1](x, x, 1.0, 4)
    (function,) = fake.functions.values()
    function["max_shared"] = 0  # as if kaio had forgotten the opt-in: the driver refuses
    with pytest.raises(KaioDriverError, match="cuLaunchKernel failed with CUDA_ERROR_INVALID_VALUE"):
        saxpy.launch(gpu, x, x, 1.0, 4, grid=1, shared_bytes=1024)
    assert x.ptr % vd.ALLOCATION_ALIGNMENT == 0, "allocations are aligned as cuMemAlloc's are"


@pytest.mark.skipif(not vd.VALIDATES, reason="a driver library loads here: the binding's check is off")
def test_a_call_made_inside_a_validated_call_is_not_validated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A garbage-collected Buffer frees itself from inside whatever binding call is running;
    validating that free would re-enter the binding's library lookup (a lock that is not
    reentrant) and hang the test run."""
    inner: list[str] = []
    real_init = vd.real.cuInit

    def init_that_collects_garbage(flags: int) -> Any:
        vd.conforms("cuMemFree", (vd.real.CUdeviceptr(0x1000),))  # a finalizer, mid-call
        inner.append("returned")
        return real_init(flags)

    monkeypatch.setattr(vd.real, "cuInit", init_that_collects_garbage)
    vd.conforms("cuInit", (0,))
    assert inner == ["returned"]
