"""The matmul on sm_90a: it picks a wgmma config, gives numpy's result on ragged shapes on the
simulator (f16 and bf16, every wgmma config, the fused epilogue), assembles with ptxas
-arch=sm_90a without spills, and its SASS runs HGMMA. The wgmma smem layout also serves mma.sync
(an sm_80 device running a wgmma config)."""

import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import WGMMA_CONFIGS, GpuModel, candidates, choose_config, default_config
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.errors import KaioLaunchError
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.targets.ptx import toolchain

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
RAGGED = [(1, 17, 100), (17, 100, 257), (130, 70, 200)]

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")
needs_sass = pytest.mark.skipif(
    toolchain.find_cuobjdump() is None or toolchain.find_nvdisasm() is None,
    reason="nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm not installed",
)


@pytest.fixture(scope="module")
def hopper():
    return kaio.Device("sim", arch="sm_90a")


def run(dev, m, n, k, dtype, config=None, out_dtype=np.float32, bias=None, activation=None):
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    out = dev.alloc_from(np.full((m, n), np.nan, dtype=out_dtype))
    kw = {"bias": dev.alloc_from(bias)} if bias is not None else {}
    matmul(dev.alloc_from(a), dev.alloc_from(b), out, config=config, activation=activation, **kw)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if bias is not None:
        want = want + bias.astype(np.float64)
    if activation == "relu":
        want = np.maximum(want, 0)
    return out.to_host().astype(np.float64), want


def test_sm90a_picks_a_wgmma_config():
    chosen = default_config(True, (8, 8, 8), 2, arch="sm_90a")
    assert chosen.wgmma and chosen == WGMMA_CONFIGS[0] and chosen.warps == (8, 1)
    assert "lower-to-wgmma" in str(matmul.pipeline(arch="sm_90a"))
    assert "lower-to-wgmma" not in str(matmul.pipeline(arch="sm_90"))
    assert not default_config(True, (8, 8, 8), 2, arch="sm_90").wgmma
    model = GpuModel(sms=132)
    for shape in ((64, 64, 64), (8192, 8192, 8192)):
        assert choose_config(*shape, 2, True, (8, 8, 8), model, arch="sm_90a").wgmma
    assert all(c.shared_bytes(2) <= 227 * 1024 for c in candidates(True, (8, 8, 8), 2, arch="sm_90a"))
    static_only = candidates(True, (8, 8, 8), 2, arch="sm_90a", shared_limit=48 * 1024)
    assert static_only[0].wgmma and all(c.shared_bytes(2) <= 48 * 1024 for c in static_only)
    assert not any(c.wgmma for c in candidates(False, (4, 4, 4), 4, arch="sm_90a"))  # f32 stays SIMT


@pytest.mark.heavy_seeds
@pytest.mark.parametrize("shape", RAGGED, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", list(TYPES))
def test_ragged_shapes_on_sm90a(hopper, dtype, shape):
    got, want = run(hopper, *shape, TYPES[dtype])
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err < 1e-5, err


@pytest.mark.heavy_seeds
@pytest.mark.parametrize("config", WGMMA_CONFIGS[1:], ids=lambda c: c.key())
def test_every_wgmma_config(hopper, config):
    got, want = run(hopper, 130, 70, 200, np.float16, config)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err < 1e-5, err


def test_fused_epilogue_into_bf16(hopper):
    bias = np.random.default_rng().standard_normal(70).astype(np.float32)
    got, want = run(hopper, 65, 70, 96, ml_dtypes.bfloat16, out_dtype=ml_dtypes.bfloat16, bias=bias, activation="relu")
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_wgmma_layout_on_mma_sync():
    """A wgmma config on an sm_80 device: the same tiles and layout, read by ldmatrix."""
    got, want = run(kaio.Device("sim"), 70, 130, 100, np.float16, WGMMA_CONFIGS[0])
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err < 1e-5, err


@needs_ptxas
@needs_sass
@pytest.mark.parametrize("config", WGMMA_CONFIGS, ids=lambda c: c.key())
@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.bf16])
def test_sm90a_kernels_assemble_without_spills_and_run_hgmma(config, dtype):
    kernel = MatmulKernel(dtype, dtype, (16, 16, 16), config)
    compiled = kaio.compile(kernel, "sm_90a")
    assert "wgmma.mma_async" in compiled.ptx and "mma.sync" not in compiled.ptx
    report = toolchain.assemble(compiled.ptx, "sm_90a")
    name = compiled.name  # matmul, or persistent_matmul
    print(f"{config.key()} {dtype.name}: {report.registers[name]} registers")
    assert report.spill_stores[name] == 0 and report.spill_loads[name] == 0
    assert "serialized" not in report.log  # ptxas warns when it must serialize wgmma
    sass = toolchain.disassemble(report.cubin)
    bm, bn, bk = config.block
    hgmma = re.findall(rf"HGMMA\.64x{min(bn, 256)}x16\.F32", sass)
    assert len(hgmma) == bk // 16  # one per k16 step of the warpgroup's 64 rows
    assert len(re.findall(r"\bHMMA", sass)) == 0 and len(re.findall(r"\b(LDL|STL)\b", sass)) == 0


@pytest.mark.heavy_seeds
def test_rings_beyond_48k_take_dynamic_shared_memory():
    """The default sm_90a config's 144 KiB ring is one .extern .shared array the launch sizes
    (the compile records it, the disk cache keeps it); a device that cannot give a block that
    much refuses the launch by name."""
    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), WGMMA_CONFIGS[0])
    compiled = kaio.compile(kernel, "sm_90a")
    ring = WGMMA_CONFIGS[0].shared_bytes(2)
    assert ring == 144 * 1024  # plus the TMA ring's three 8-byte mbarriers
    assert compiled.shared_bytes == 0 and compiled.dynamic_shared_bytes == ring + 3 * 8
    assert ".extern .shared .align 1024 .b8 matmul_dynamic_smem[];" in compiled.ptx
    assert kaio.compile(kernel, "sm_90a").dynamic_shared_bytes == compiled.dynamic_shared_bytes  # a cache hit
    small = WGMMA_CONFIGS[3]  # a 48 KiB ring: static on cp.async, dynamic with TMA's mbarriers on top
    assert kaio.compile(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), replace(small, tma=False)), "sm_90a").dynamic_shared_bytes == 0
    assert kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), small), "sm_90a").dynamic_shared_bytes == 48 * 1024 + 24
    # C's 128 x 128 f32 tile (64 KiB), staged for its TMA store, outgrows the ring it reuses
    assert kaio.compile(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), small), "sm_90a").dynamic_shared_bytes == 64 * 1024 + 24
    big = MatmulConfig((128, 128, 64), (8, 1), 4, "wgmma")  # 128 KiB
    a = np.zeros((64, 64), np.float16)
    with pytest.raises(KaioLaunchError, match="needs 131072 bytes"):
        matmul(a, a, config=big, device=kaio.Device("sim", arch="sm_89"))  # 99 KiB a block
    # on an sm_80 device (163 KiB) the same config runs on mma.sync, out of dynamic shared memory
    got, want = run(kaio.Device("sim"), 70, 130, 100, np.float16, big)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err < 1e-5, err


def test_split_k_on_wgmma(hopper):
    """A skinny, deep problem splits K on sm_90a too: each program's partial sum on wgmma."""
    from kaio.ops_library.matmul import matmul as op
    from kaio.ops_library.operands import Operands

    m, n, k = 16, 64, 2048
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    da, db = hopper.alloc_from(a), hopper.alloc_from(b)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    ops = Operands("matmul", da, db, out, None, device=hopper)
    chosen = op.kernel(ops.take("a", da), ops.take("b", db), ops.take("out", out), m, n, k, None, hopper).config
    assert chosen.wgmma and chosen.split_k > 1, chosen
    matmul(da, db, out)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(out.to_host() - want) / np.linalg.norm(want) < 1e-5
