"""The persistent matmul: a program per SM walking the C tiles in grouped order. On sm_90a its
K loop, nested in the tile loop, still runs on TMA (the ring carried across tiles) and C leaves
by TMA; with fewer programs than tiles each program computes several, exactly (ragged shapes,
NaN-poisoned outputs, numpy references)."""

import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import WGMMA_CONFIGS, MatmulConfig, split_k_for
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.targets.ptx import toolchain

PERSISTENT = next(c for c in WGMMA_CONFIGS if c.persistent)


@pytest.fixture
def two_programs(monkeypatch):
    """Two programs whatever the device: every program walks several tiles."""
    monkeypatch.setattr(MatmulKernel, "programs", lambda self, device: 2)


@pytest.mark.parametrize("m, n, k", [(130, 136, 200), (300, 264, 72), (17, 264, 64)])
@pytest.mark.parametrize("in_type, out_type", [
    (np.float16, np.float16), (ml_dtypes.bfloat16, np.float32),
], ids=["f16", "bf16-f32"])  # fmt: skip
@pytest.mark.heavy_seeds
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "cpasync"])
def test_each_program_computes_several_tiles(two_programs, rng, m, n, k, in_type, out_type, tma):
    dev = kaio.Device("sim", arch="sm_90a")
    a = rng.standard_normal((m, k)).astype(in_type)
    b = rng.standard_normal((k, n)).astype(in_type)
    bias = rng.standard_normal(n).astype(out_type)
    out = dev.alloc_from(np.full((m, n), np.nan, out_type))
    with dev.profiling():
        matmul(dev.alloc_from(a), dev.alloc_from(b), out, bias=dev.alloc_from(bias), activation="relu",
               config=replace(PERSISTENT, tma=tma))  # fmt: skip
    report = dev.last_launch_report
    assert report.grid == (2, 1, 1)
    assert (report.by_class["cp.async.bulk.tensor.2d"] > 0) == tma and (report.by_class["cp.async"] > 0) != tma
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64), 0)
    rtol = 1e-5 if out_type == np.float32 else 8e-3
    np.testing.assert_allclose(out.to_host().astype(np.float64), want, rtol=rtol, atol=rtol * np.sqrt(k))


def test_a_persistent_mma_sync_config_runs_on_sm80(two_programs, rng):
    config = MatmulConfig((64, 64, 32), (2, 2), 3, persistent=True)
    dev = kaio.Device("sim")
    m, n, k = 150, 136, 72
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    out = dev.alloc_from(np.full((m, n), np.nan, np.float32))
    matmul(dev.alloc_from(a), dev.alloc_from(b), out, alpha=0.5, config=config)
    np.testing.assert_allclose(out.to_host(), 0.5 * (a.astype(np.float64) @ b.astype(np.float64)), rtol=1e-5, atol=1e-4)


def test_the_grid_is_what_the_device_runs_at_once():
    dev = kaio.Device("sim", arch="sm_90a")
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), PERSISTENT)
    assert kernel.programs(dev) == dev.sm_count  # 192 KiB a program: one per SM
    assert PERSISTENT.shared_bytes(2) == 128 * 1024 + 128 * 128 * 4, "the ring and an f32 C's staging"


def test_persistent_configs_do_not_split_k():
    with pytest.raises(ValueError, match="persistent matmul config cannot split K"):
        replace(PERSISTENT, split_k=2)
    assert split_k_for(PERSISTENT, 128, 128, 1 << 16, 132) == 1
    assert PERSISTENT.key().endswith("-p")


@pytest.mark.skipif(None in (toolchain.find_ptxas(), toolchain.find_cuobjdump(), toolchain.find_nvdisasm()), reason="no ptxas/cuobjdump wheels")
@pytest.mark.parametrize("out", [dtypes.f16, dtypes.f32])
def test_the_persistent_kernel_assembles_with_tma_both_ways_and_no_spills(out):
    kernel = MatmulKernel(dtypes.f16, out, (16, 16, 16), PERSISTENT, alpha_beta=(False, False))
    compiled = kaio.compile(kernel, "sm_90a")
    report = toolchain.assemble(compiled.ptx, "sm_90a")
    assert report.spill_stores.get("persistent_matmul", 0) == 0 and report.spill_loads.get("persistent_matmul", 0) == 0
    sass = toolchain.disassemble(report.cubin)
    assert "UTMALDG.2D" in sass and "UTMASTG.2D" in sass and "HGMMA" in sass and not re.search(r"\bLDGSTS\b", sass)
    print(f"persistent {out}: {report.registers['persistent_matmul']} registers")
