"""Workspaces (kaio.runtime.workspace): an op's scratch memory is made and given back in stream
order from kaio's own pool, never with cuMemAlloc/cuMemFree (cuMemFree waits for the whole
device: on an H200 a split-K matmul of 1024^3 ran at 5.9 TFLOP/s because of it). Run through the
validating fake driver, so each call's arguments pass the real binding's conversion."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
from kaio.errors import KaioDriverError
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.runtime.workspace import workspace

from . import validating_driver as vd
from .validating_driver import VALIDATES, DriverCallRejected, ValidatingDriver, real

fake, gpu = vd.fake, vd.gpu  # the fixtures
R = real.CUresult


def split_config() -> MatmulConfig:
    return MatmulConfig((32, 64, 64), (2, 2), 3, split_k=4)


def memory_calls(fake: ValidatingDriver, since: int) -> list[tuple[str, tuple]]:
    names = {"cuMemAlloc", "cuMemFree", "cuMemAllocFromPoolAsync", "cuMemFreeAsync", "cuMemsetD8Async",
             "cuLaunchKernel", "cuCtxSynchronize", "cuStreamSynchronize"}  # fmt: skip
    return [(name, args) for name, args in fake.calls[since:] if name in names]


def split_k_matmul(gpu: kaio.Device) -> tuple[object, object, object]:
    a = gpu.alloc_from(np.ones((48, 256), np.float16))
    b = gpu.alloc_from(np.ones((256, 64), np.float16))
    return a, b, gpu.empty((48, 64), np.float32)


def test_a_split_k_matmul_takes_its_partial_sums_in_stream_order(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    a, b, c = split_k_matmul(gpu)
    matmul(a, b, c, config=split_config())  # compiles and loads
    start = len(fake.calls)
    matmul(a, b, c, config=split_config())
    calls = memory_calls(fake, start)
    assert [name for name, _ in calls] == [
        "cuMemAllocFromPoolAsync", "cuLaunchKernel", "cuLaunchKernel", "cuMemFreeAsync",
    ], "no cuMemAlloc/cuMemFree (a device synchronisation) per call; the free after both launches"
    (alloc_args, launch, reduce_launch, free_args) = (args for _, args in calls)
    legacy = int(gpu._backend.stream_handle(None))
    assert int(alloc_args[2]) == legacy == int(free_args[1]), "on the stream the launches use"
    assert int(launch[8]) == int(reduce_launch[8]) == legacy
    assert int(free_args[0]) not in fake.memory, "given back"
    (pool,) = fake.pools.values()
    assert pool["CU_MEMPOOL_ATTR_RELEASE_THRESHOLD"] == 2**64 - 1, "the pool keeps what is freed"


def test_inside_a_capture_the_workspace_is_the_captures(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    """The legacy stream may not be touched while a thread captures (the fake refuses it as the
    driver does), so a workspace there would break the capture: it goes to the capture's stream."""
    a, b, c = split_k_matmul(gpu)
    matmul(a, b, c, config=split_config())
    start = len(fake.calls)
    with gpu.capture() as graph:
        matmul(a, b, c, config=split_config())
    allocs = [args for name, args in fake.calls[start:] if name == "cuMemAllocFromPoolAsync"]
    frees = [args for name, args in fake.calls[start:] if name == "cuMemFreeAsync"]
    assert len(allocs) == len(frees) == 1 and graph.launches == 2
    assert int(allocs[0][2]) == int(frees[0][1]) != int(gpu._backend.stream_handle(None))
    graph.close()


def test_the_fake_refuses_the_legacy_stream_during_a_capture(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    with gpu.capture():
        with pytest.raises(KaioDriverError, match="STREAM_CAPTURE_IMPLICIT"):
            gpu._backend.alloc_on(None, 256)


def test_zero_filled_workspaces_and_their_free_on_error(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with workspace(gpu, (64,), np.float32, zero=True) as w:
            assert np.all(w.to_host() == 0)
            ptr = w.ptr
            raise RuntimeError("boom")
    assert ptr not in fake.memory and ("cuMemsetD8Async" in fake.names())


def test_without_memory_pools_a_workspace_is_a_plain_allocation(
    fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ValidatingDriver.ATTRIBUTES, "MEMORY_POOLS_SUPPORTED", 0)
    dev = kaio.Device(0)
    start = len(fake.calls)
    with workspace(dev, (64,), np.float32):
        pass
    assert [n for n, _ in memory_calls(fake, start)] == ["cuMemAlloc", "cuMemFree"] and not fake.pools


def test_an_allocation_out_of_memory_first_hands_the_pool_back(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    with workspace(gpu, (1024,), np.float32):
        pass
    fake.fail_next["cuMemAlloc"] = R.CUDA_ERROR_OUT_OF_MEMORY
    buf = gpu.empty((16,), np.float32)  # refused once, trimmed, retried
    (pool,) = fake.pools.values()
    assert pool["trims"] == 1 and buf.ptr in fake.memory


@pytest.mark.skipif(not VALIDATES, reason="a driver library loads here: the binding's check is off")
def test_the_binding_refuses_a_release_threshold_that_is_a_plain_int(gpu: kaio.Device, fake: ValidatingDriver) -> None:
    with workspace(gpu, (4,), np.float32):
        pass
    (handle,) = fake.pools
    attr = real.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    with pytest.raises(DriverCallRejected, match="cuMemPoolSetAttribute"):
        fake.cuMemPoolSetAttribute(real.CUmemoryPool(handle), attr, 2**64 - 1)
    fake.rejected.clear()


def test_on_the_simulator_a_workspace_is_ordinary_memory(rng: np.random.Generator) -> None:
    dev = kaio.Device("sim")
    with workspace(dev, (8,), np.float32, zero=True) as w:
        assert isinstance(w, kaio.Buffer) and np.all(w.to_host() == 0)
        w.copy_from(rng.standard_normal(8).astype(np.float32))
    with pytest.raises(kaio.KaioError):
        w.to_host()
