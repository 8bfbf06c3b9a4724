"""The GPU side of the torch integration and of ``dev.capture()``, on a CPU box: the validating
fake CUDA driver (``validating_driver.py``: every call through cuda-python's real argument
conversion; stream capture and graphs included) and torch tensors that say they live on a GPU
(a Tensor subclass over the fake driver's host memory)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from acceptance_kernels import saxpy, vector_add

import kaio
from kaio import KaioTypeError
from kaio.runtime import tensors

from . import validating_driver as _vd
from .validating_driver import ValidatingDriver

torch = pytest.importorskip("torch")
fake, gpu = _vd.fake, _vd.gpu  # the fixtures


def _torch_streams(fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch, *handles: int) -> None:
    """torch's current stream of cuda:i is ``handles[0] + i``; all are streams the driver knows."""
    for handle in handles:
        fake.adopt_stream(handle)
    monkeypatch.setattr(tensors, "_raw_stream", lambda index: handles[0] + index)


class FakeCudaTensor(torch.Tensor):
    """A tensor that says it lives on ``cuda:<index>`` at a fake-driver address."""

    @staticmethod
    def over(buf: kaio.Buffer, index: int = 0) -> FakeCudaTensor:
        t = torch.Tensor._make_subclass(FakeCudaTensor, torch.zeros(buf.shape))
        t._buf, t._index = buf, index
        return t  # type: ignore[no-any-return]

    def get_device(self) -> int:  # type: ignore[override]
        return self._index  # type: ignore[no-any-return]

    def data_ptr(self) -> int:  # type: ignore[override]
        return self._buf.ptr  # type: ignore[no-any-return]

    @property
    def device(self) -> Any:  # type: ignore[override]
        return torch.device("cuda", self._index)


def test_cuda_tensors_run_on_their_gpu_and_torch_current_stream(
    gpu: kaio.Device, fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    _torch_streams(fake, monkeypatch, 0x5000, 0x6000, 0x7000)
    x, y = gpu.zeros(8, np.float32), gpu.zeros(8, np.float32)
    tx, ty = FakeCudaTensor.over(x), FakeCudaTensor.over(y)
    saxpy[1](tx, ty, 2.0, 8)  # no Buffer, no device: the tensors' GPU
    launch = fake.launches[-1]
    assert launch["raw"][:2] == [struct.pack("<Q", x.ptr), struct.pack("<Q", y.ptr)]
    assert launch["stream"] == 0x5000, "torch's current stream of cuda:0"
    saxpy[1](x, y, 2.0, 8)
    assert fake.launches[-1]["stream"] == 0, "kaio Buffers alone: the legacy default stream"
    saxpy.launch(gpu, tx, y, 2.0, 8, grid=1, stream=gpu.stream())
    assert fake.launches[-1]["stream"] not in (0, 0x5000), "an explicit stream= wins"

    class TorchStream:  # what torch.cuda.Stream offers
        cuda_stream = 0x6000

    saxpy.launch(gpu, tx, y, 2.0, 8, grid=1, stream=TorchStream())
    assert fake.launches[-1]["stream"] == 0x6000
    saxpy.launch(gpu, tx, y, 2.0, 8, grid=1, stream=0x7000)  # a raw handle
    assert fake.launches[-1]["stream"] == 0x7000
    calls = len(fake.calls)
    saxpy[1](tx, ty, 2.0, 8)
    assert fake.names()[calls:] == ["cuLaunchKernel"], "the tensor hot path: the launch alone"


def test_cuda_tensor_refusals(
    gpu: kaio.Device, fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    _torch_streams(fake, monkeypatch, 0x5000)  # a CPU-only torch has none
    x = gpu.zeros(8, np.float32)
    with pytest.raises(KaioTypeError, match=r"`x: Array\[f32\]`: the tensor is on the CPU, but the "
                       r"launch runs on Device\(0\) \(a GPU\); move it with .cuda\(\)"):  # fmt: skip
        saxpy.launch(gpu, torch.ones(8), x, 1.0, 8, grid=1)
    with pytest.raises(KaioTypeError, match=r"the tensor is on cuda:1, but the launch runs on "
                       r"Device\(0\) \(cuda:0\)"):  # fmt: skip
        saxpy.launch(gpu, FakeCudaTensor.over(x, 1), x, 1.0, 8, grid=1)
    assert fake.launches == []


def test_gpu_capture_records_100_launches_and_replays_them(
    gpu: kaio.Device, fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = (gpu.zeros(256, np.float32) for _ in range(3))
    vector_add[1](a, b, c, 256)  # compile and load before capturing
    fake.launches.clear()

    def no_compile(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a compiled kernel's launch compiled (or read the disk cache)")

    monkeypatch.setattr("kaio.compiler.compile", no_compile)
    calls = len(fake.calls)
    with gpu.capture() as graph:
        for i in range(100):
            vector_add[1](a, b, c, i)
    names = fake.names()[calls:]
    assert graph.launches == 100 and fake.launches == [], "captured, not run"
    assert names[0] == "cuStreamCreate" and names[1] == "cuStreamBeginCapture"
    assert names[2:-3] == ["cuLaunchKernel"] * 100 and names[-3:] == [
        "cuStreamEndCapture", "cuGraphInstantiate", "cuStreamDestroy"
    ], "no allocation, synchronisation or other driver call on the launch path"  # fmt: skip
    (flags,) = fake.args_of("cuStreamCreate")[-1]
    assert flags.name == "CU_STREAM_NON_BLOCKING", "no implicit legacy-stream sync"
    assert fake.args_of("cuStreamBeginCapture")[-1][1].name == "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL"
    graph.replay()
    graph.replay(gpu.stream())
    assert len(fake.launches) == 200 and all(launch["replayed"] for launch in fake.launches)
    assert [launch["raw"][3] for launch in fake.launches[:100]] == [
        struct.pack("<I", i) for i in range(100)
    ]
    assert fake.launches[0]["stream"] == 0 and fake.launches[100]["stream"] != 0
    graph.close()
    assert fake.names()[-2:] == ["cuGraphExecDestroy", "cuGraphDestroy"]


def test_gpu_capture_wins_over_torch_stream_and_ends_on_error(
    gpu: kaio.Device, fake: ValidatingDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    _torch_streams(fake, monkeypatch, 0x5000)
    x = gpu.zeros(8, np.float32)
    tx = FakeCudaTensor.over(x)
    saxpy[1](tx, tx, 1.0, 8)
    with gpu.capture() as graph:
        saxpy[1](tx, tx, 1.0, 8)
    graph.replay()
    assert fake.launches[-1]["replayed"] and len(fake.launches) == 2
    with pytest.raises(KaioTypeError), gpu.capture():
        saxpy[1](tx, tx, 1.0, -1)
    assert fake.capturing == {}, "the failed capture was ended"
    assert fake.names()[-2:] == ["cuGraphDestroy", "cuStreamDestroy"]
