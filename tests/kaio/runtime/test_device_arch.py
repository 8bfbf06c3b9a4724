"""Which architecture a GPU compiles for: an H100 (sm_90) gets ``HOPPER_DEFAULT`` (sm_90a, the
wgmma/TMA paths, since an H200 hwcheck report showed them passing); ``Device(0, arch=...)`` and
``KAIO_ARCH`` choose another target the GPU runs, and refuse one it cannot run. Run through the
validating fake CUDA driver (validating_driver.py), so the GPU code path runs on a CPU box."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import KaioTargetError
from kaio.ops_library import matmul
from kaio.runtime import cuda_backend, driver
from kaio.runtime import device as device_module

from .validating_driver import ValidatingDriver as FakeDriver


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDriver]:
    fake = FakeDriver()
    monkeypatch.setattr(device_module, "_devices", {})  # a fresh registry: Device(0) is the fake
    monkeypatch.setattr(cuda_backend, "_current", threading.local())
    monkeypatch.delenv("KAIO_ARCH", raising=False)
    with driver.use_driver(fake):
        yield fake


def loaded_ptx(dev: kaio.Device, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the PTX of every kernel the device loads from now on."""
    seen: list[str] = []
    original = dev._modules.function

    def record(ptx: str, name: str) -> Any:
        seen.append(ptx)
        return original(ptx, name)

    monkeypatch.setattr(dev._modules, "function", record)
    return seen


def launch_matmul(dev: kaio.Device) -> None:
    a = dev.alloc_from(np.ones((128, 64), ml_dtypes.bfloat16))
    b = dev.alloc_from(np.ones((64, 128), ml_dtypes.bfloat16))
    matmul(a, b, dev.empty((128, 128), np.float32))


def test_an_h100_compiles_for_sm_90a_by_default(fake: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = kaio.Device(0)
    assert gpu.arch == "sm_90" and device_module.HOPPER_DEFAULT == "sm_90a"
    assert gpu.compile_arch == "sm_90a", "proven by the H200 hwcheck report of 2026-12-04"
    assert "sm_90a" in gpu.compile_targets and "sm_80" in gpu.compile_targets
    ptx = loaded_ptx(gpu, monkeypatch)
    launch_matmul(gpu)
    assert any(".target sm_90a" in text and "wgmma" in text for text in ptx)


def test_arch_takes_a_gpu_back_to_the_portable_path(fake: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    portable = kaio.Device(0, arch="sm_90")
    assert portable is kaio.Device("cuda:0", arch="90") and portable is not kaio.Device(0)
    assert portable.compile_arch == "sm_90" and portable.arch == "sm_90"
    assert repr(portable) == 'Device(0, arch="sm_90")' and kaio.Device(0).compile_arch == "sm_90a"
    ptx = loaded_ptx(portable, monkeypatch)
    launch_matmul(portable)
    (text,) = ptx
    assert ".target sm_90\n" in text and "mma.sync" in text and "wgmma" not in text
    assert kaio.Device(0, arch="sm_80").compile_arch == "sm_80", "older portable targets run"


def test_kaio_arch_chooses_the_default_gpus_target(fake: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIO_ARCH", "sm_90")
    assert kaio.Device(0).compile_arch == "sm_90"
    assert kaio.Device(0, arch="sm_90a").compile_arch == "sm_90a", "arch= wins over KAIO_ARCH"


def test_a_target_the_gpu_cannot_run_is_refused(
    fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.ATTRIBUTES = {**FakeDriver.ATTRIBUTES, "COMPUTE_CAPABILITY_MAJOR": 8}  # an A100
    with pytest.raises(KaioTargetError, match=r"arch= sm_90a: Fake H100 \(sm_80\) cannot run"):
        kaio.Device(0, arch="sm_90a")
    with pytest.raises(KaioTargetError, match="unknown GPU architecture 'sm_91'"):
        kaio.Device(0, arch="sm_91")
    monkeypatch.setenv("KAIO_ARCH", "sm_86")
    with pytest.raises(KaioTargetError, match=r"KAIO_ARCH sm_86: .* it runs sm_70, sm_72, sm_75, sm_80$"):
        kaio.Device(0)
    monkeypatch.delenv("KAIO_ARCH")
    assert kaio.Device(0).compile_arch == "sm_80"


def test_newer_gpus_never_get_an_arch_specific_target(fake: FakeDriver) -> None:
    fake.ATTRIBUTES = {**FakeDriver.ATTRIBUTES, "COMPUTE_CAPABILITY_MAJOR": 12}
    newer = kaio.Device(0)
    assert newer.compile_arch == "sm_90" and "sm_90a" not in newer.compile_targets
    with pytest.raises(KaioTargetError, match="cannot run code for sm_90a"):
        kaio.Device(0, arch="sm_90a")


def test_a_simulated_hopper_keeps_its_own_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIO_ARCH", "sm_80")  # for GPUs only: a simulator is named by its arch
    assert kaio.Device("sim", arch="sm_90a").compile_arch == "sm_90a"
    assert kaio.Device("sim", arch="sm_90").compile_arch == "sm_90"
