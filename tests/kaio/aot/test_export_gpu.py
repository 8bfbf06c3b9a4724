"""An exported kernel launched by its C launcher on a real GPU (``pytest -m gpu``; run by
``python -m kaio.hwcheck``): the launcher is built with gcc against the wheel's cuda.h, called
through ctypes on buffers kaio allocated in the same primary context, and compared with numpy."""

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kaio
from kaio.aot import export
from kaio.ops_library import matmul
from kaio.runtime import driver

sys.path.insert(0, str(Path(__file__).parent))
import aot_kernels  # noqa: E402
from fake_cuda import WARNINGS, need_gcc  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not driver.available(), reason="no CUDA driver on this machine")]


def launcher(kernel, tmp_path, arch, **options):
    gcc, include = need_gcc()
    files = export(kernel, tmp_path, arch=arch, **options)
    manifest = json.loads(next(p for p in files if p.suffix == ".json").read_text())
    library = tmp_path / "liblauncher.so"
    # not linked to libcuda: its symbols come from the driver cuda-python loaded (made global below)
    subprocess.run([gcc, *WARNINGS, "-fPIC", "-shared", "-isystem", str(include), "-o", str(library),
                    str(tmp_path / f"{manifest['name']}.c"), "-lpthread"], check=True)  # fmt: skip
    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(library))
    return getattr(lib, manifest["launch"]), manifest


@pytest.fixture
def gpu() -> kaio.Device:
    if kaio.runtime.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    return kaio.Device(0)


def test_exported_saxpy_from_c(gpu, tmp_path):
    launch, _ = launcher(aot_kernels.saxpy, tmp_path, gpu.compile_arch, grid=("cdiv(n, 128)",))
    rng = np.random.default_rng()
    n = int(rng.integers(10_000, 100_000))
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    dx, dy = gpu.alloc_from(x), gpu.alloc_from(y)
    gpu.synchronize()
    launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_float, ctypes.c_uint32]
    assert launch(None, None, dx.ptr, dy.ptr, 1.5, n) == 0
    gpu.synchronize()
    np.testing.assert_allclose(dy.to_host(), np.float32(1.5) * x + y, rtol=1e-6)


def test_exported_matmul_from_c(gpu, tmp_path):
    launch, manifest = launcher(matmul, tmp_path, ("sm_80", gpu.compile_arch) if gpu.compile_arch != "sm_80" else "sm_80")
    rng = np.random.default_rng()
    m, n, k = 384, 512, 256
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((m, k), (k, n)))
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    da, db, dc = gpu.alloc_from(a), gpu.alloc_from(b), gpu.alloc_from(c0)
    gpu.synchronize()
    launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint64] * 4 + [ctypes.c_int32] * 3 + [ctypes.c_float] * 2
    assert launch(None, None, da.ptr, db.ptr, dc.ptr, dc.ptr, m, n, k, 1.5, 0.5) == 0
    gpu.synchronize()
    expected = 1.5 * (a.astype(np.float64) @ b.astype(np.float64)) + 0.5 * c0
    np.testing.assert_allclose(dc.to_host(), expected, rtol=2e-3, atol=2e-2)
