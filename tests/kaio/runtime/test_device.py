"""Devices: identities, properties, the default device and its one-line announcement, and the
promise that `import kaio` stays light."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import kaio
from kaio import KaioDriverError, KaioTypeError
from kaio.runtime import driver

no_driver = pytest.mark.skipif(driver.available(), reason="a CUDA driver is present")
REPO = Path(__file__).resolve().parents[3]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "KAIO_DEVICE"}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
        timeout=120,
    )


def test_identities_give_the_same_object() -> None:
    sim = kaio.Device("sim")
    assert (
        kaio.Device("sim") is sim and kaio.Device("SIM") is sim and kaio.Device("sim:sm_80") is sim
    )
    hopper = kaio.Device("sim", arch="sm_90")
    assert hopper is kaio.Device("sim:sm_90") and hopper is not sim
    assert kaio.Device(sim) is sim
    assert pickle.loads(pickle.dumps(hopper)) is hopper
    assert repr(sim) == 'Device("sim")' and repr(hopper) == 'Device("sim", arch="sm_90")'


def test_simulator_properties() -> None:
    sim = kaio.Device("sim")
    assert sim.is_simulator and sim.arch == "sm_80" and sim.sm == 80 and sim.compile_arch == "sm_80"
    assert sim.name == "kaio CPU simulator (sm_80)"
    assert sim.sm_count == 108 and sim.max_threads_per_block == 1024
    assert (
        sim.shared_memory_per_block == 48 * 1024 and sim.shared_memory_per_block_optin == 163 * 1024
    )
    assert (
        sim.total_memory > 0
        and 0 < sim.memory_info()[0] <= sim.memory_info()[1] == sim.total_memory
    )
    hopper = kaio.Device("sim", arch="sm_90")
    assert hopper.sm == 90 and hopper.shared_memory_per_block_optin == 227 * 1024
    assert sim.ordinal is None and sim.simulator is not hopper.simulator
    sim.synchronize()


def test_unknown_identities() -> None:
    with pytest.raises(KaioTypeError, match="unknown device 'tpu'"):
        kaio.Device("tpu")
    with pytest.raises(KaioTypeError, match="unknown device -1"):
        kaio.Device(-1)
    with pytest.raises(kaio.KaioTargetError, match="sm_42"):  # refused before the driver loads
        kaio.Device(0, arch="sm_42")
    with pytest.raises(kaio.KaioTargetError, match="sm_42"):
        kaio.Device("sim", arch="sm_42")


@no_driver
def test_cuda_device_without_a_driver_is_a_driver_error() -> None:
    with pytest.raises(KaioDriverError, match="no CUDA driver found") as info:
        kaio.Device(0)
    assert info.value.call == "cuInit"
    assert kaio.runtime.cuda_device_count() == 0


@no_driver
def test_default_device_falls_back_to_the_simulator_and_says_so_once() -> None:
    result = run_python("import kaio; a = kaio.Device(); b = kaio.Device(); print(a is b, a)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'True Device("sim")'
    assert result.stderr == "kaio: no CUDA driver found, using the CPU simulator\n"


def test_kaio_device_overrides_the_default() -> None:
    result = run_python("import kaio; print(kaio.Device())", KAIO_DEVICE="sim:sm_90")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'Device("sim", arch="sm_90")' and result.stderr == ""


def test_import_kaio_is_light() -> None:
    code = (
        "import sys, kaio; "
        "names = ('cuda', 'cuda.bindings', 'xdsl', 'kaio.runtime', 'kaio.targets.sim'); "
        "heavy = [m for m in names if m in sys.modules]; "
        "print(heavy)"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    result = run_python(
        "import sys, kaio; kaio.Device('sim'); print('cuda' in sys.modules, 'xdsl' in sys.modules)"
    )
    assert result.stdout.strip() == "False False", (
        "devices and buffers need neither cuda-python nor xDSL"
    )
