"""The library's tensor-core ops on a real GPU (``pytest -m gpu``): every kind of matmul the
device compiles (mma.sync; on sm_90a wgmma with TMA loads, warp-specialised, and on cp.async,
every wgmma config) and attention, against float64 numpy on ragged shapes. Skipped without a
CUDA device; the simulator tests run the same kernels on every machine.

Each test runs on ``Device(0)`` (the default target: sm_90a on an H100, see ``HOPPER_DEFAULT``)
and, on Hopper, on the other of its two targets too (``Device(0, arch="sm_90")``: mma.sync and
cp.async), so the ``python -m kaio.hwcheck`` report says whether both paths pass on the
hardware. Elsewhere the second is skipped."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import DEFAULT_CONFIG, WGMMA_CONFIGS, MatmulConfig
from kaio.runtime import driver

from .test_attention_sim import run as run_attention

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not driver.available(), reason="no CUDA driver on this machine"),
]

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
SHAPES = [(1, 17, 104), (130, 72, 200), (257, 264, 136), (1024, 1024, 1024), (64, 4096, 4096)]


@pytest.fixture(scope="module", params=["default", "sm_90", "sm_90a"])
def gpu(request: pytest.FixtureRequest) -> kaio.Device:
    if kaio.runtime.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    default = kaio.Device(0)
    if request.param == "default":
        return default
    if "sm_90a" not in default.compile_targets:
        pytest.skip(f"the second Hopper target needs a Hopper GPU; this one is {default.arch}")
    if request.param == default.compile_arch:
        pytest.skip(f"{request.param} is this GPU's default target: run as `default`")
    return kaio.Device(0, arch=request.param)


def matmul_configs(dev: kaio.Device) -> dict[str, MatmulConfig | None]:
    configs: dict[str, MatmulConfig | None] = {"default": None, "mma.sync": DEFAULT_CONFIG}
    if dev.compile_arch == "sm_90a":
        head = WGMMA_CONFIGS[0]
        configs |= {"wgmma tma": head, "wgmma ws": replace(head, warp_specialize=True), "wgmma cp.async": replace(head, tma=False)}
        configs |= {c.key(): c for c in WGMMA_CONFIGS[1:]}
    return configs


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("dtype", list(TYPES))
def test_every_matmul_kind_matches_numpy(gpu, rng, dtype, m, n, k):
    a = rng.standard_normal((m, k)).astype(TYPES[dtype])
    b = rng.standard_normal((k, n)).astype(TYPES[dtype])
    want = a.astype(np.float64) @ b.astype(np.float64)
    da, db = gpu.alloc_from(a), gpu.alloc_from(b)
    for name, config in matmul_configs(gpu).items():
        out = gpu.alloc_from(np.full((m, n), np.nan, np.float32))
        matmul(da, db, out, config=config)
        got = out.to_host()
        assert not np.isnan(got).any(), name
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 1e-5, (name, err)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_numpy(gpu, rng, d, causal):
    run_attention(gpu, rng, 2, 4, 2, 200, 264, d, "bf16", causal)
    run_attention(gpu, rng, 1, 2, 2, 1, 1000, d, "f16", causal)  # decoding: split keys
