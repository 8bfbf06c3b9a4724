"""The matmul's 16-bit epilogue goes through shared memory and out in 16-byte row vectors
(``tile-layout``'s staged stores): exact on ragged shapes on sm_80 (mma.sync) and sm_90a
(wgmma), for every config, with bias and activation, with split-K; f32 output keeps its direct
stores; a C whose rows are not 16-byte aligned is not staged and stays exact; the store sectors
are the ideal count. Fresh random inputs, outputs poisoned with NaN before the launch."""

import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import TENSOR_CORE_CONFIGS, WGMMA_CONFIGS
from kaio.ops_library.matmul_kernel import MatmulKernel

OUT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"f16": 2e-3, "bf16": 1e-2}  # the output's rounding, relative to the norm
# N a multiple of 16 (rows proven 16-byte aligned: staged), M and N past the tile edges
STAGED = [(1, 16, 100), (17, 112, 257), (130, 80, 200)]
# N not a multiple of 16: no alignment proven, the direct store of the mma layout
UNSTAGED = [(1, 17, 100), (17, 100, 257), (130, 70, 200)]
ARCHS = ["sm_80", "sm_90a"]
# on sm_90a, C leaves by TMA where its loads came by TMA (store-tma): staged stores serve the
# cp.async path
DEFAULT = {"sm_80": None, "sm_90a": replace(WGMMA_CONFIGS[0], tma=False)}


@pytest.fixture(scope="module")
def devices():
    return {arch: kaio.Device("sim", arch=arch) for arch in ARCHS}


def gelu(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def run(dev, rng, m, n, k, out, config=None, bias=False, activation=None, staged=None):
    """C = act(A @ B + bias) into a NaN-poisoned C; the relative error against float64 numpy.
    ``staged``: check whether C went out in 16-byte vectors (the profile of the launch)."""
    a = rng.standard_normal((m, k)).astype(OUT[out])  # the output is f32 or the input type
    b = rng.standard_normal((k, n)).astype(OUT[out])
    c = dev.alloc_from(np.full((m, n), np.nan, dtype=OUT[out]))
    kw = {}
    want = a.astype(np.float64) @ b.astype(np.float64)
    if bias:
        row = rng.standard_normal(n).astype(OUT[out])
        kw["bias"] = dev.alloc_from(row)
        want = want + row.astype(np.float64)
    if activation == "gelu":
        want = gelu(want)
    elif activation == "relu":
        want = np.maximum(want, 0)
    if staged is None:
        matmul(dev.alloc_from(a), dev.alloc_from(b), c, config=config, activation=activation, **kw)
    else:
        with dev.profiling():
            matmul(dev.alloc_from(a), dev.alloc_from(b), c, config=config, activation=activation, **kw)
        stores = {m.group(0) for row in dev.last_launch_report.global_memory if (m := re.search(r"st\.global\.\S+", row.text))}
        assert ("st.global.v4.b32" in stores) == staged, stores
    got = c.to_host().astype(np.float64)
    assert np.isfinite(got).all(), "unwritten (NaN) elements"
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


@pytest.mark.parametrize("shape", STAGED, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("out", list(OUT))
@pytest.mark.parametrize("arch", ARCHS)
def test_ragged_shapes(devices, rng, arch, out, shape):
    assert run(devices[arch], rng, *shape, out, DEFAULT[arch], staged=True) < TOL[out]


@pytest.mark.parametrize("shape", UNSTAGED, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("arch", ARCHS)
def test_rows_not_16_byte_aligned_are_stored_directly_and_exactly(devices, rng, arch, shape):
    assert run(devices[arch], rng, *shape, "f16", DEFAULT[arch], staged=False) < TOL["f16"]


@pytest.mark.parametrize("config", TENSOR_CORE_CONFIGS[1:], ids=lambda c: c.key())
def test_every_mma_sync_config(devices, rng, config):
    assert run(devices["sm_80"], rng, 130, 80, 96, "f16", config, staged=True) < TOL["f16"]


@pytest.mark.parametrize("config", [c for c in WGMMA_CONFIGS[1:] if not c.warp_specialize], ids=lambda c: c.key())
def test_every_wgmma_config(devices, rng, config):
    assert run(devices["sm_90a"], rng, 130, 80, 96, "bf16", replace(config, tma=False), staged=True) < TOL["bf16"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_bias_and_activation(devices, rng, arch, activation):
    assert run(devices[arch], rng, 70, 144, 64, "bf16", DEFAULT[arch], bias=True, activation=activation, staged=True) < TOL["bf16"]


def test_warp_specialised_sm90a_kernel():
    """The producer warpgroup has left by the epilogue: its barriers count the consumers only
    (a warp-specialised kernel stores C by TMA; staged here by taking store-tma out)."""
    config = replace(WGMMA_CONFIGS[0], warp_specialize=True)
    pipeline = config.pipeline("sm_90a").without("store-tma")
    staged, plain = (compiled("sm_90a", out, config, pipeline=pipeline) for out in (dtypes.f16, dtypes.f32))
    assert "st.global.v4.b32" in staged.ptx
    assert re.findall(r"bar\.sync[^;]*;", staged.ptx) == ["bar.sync 0;", "bar.sync 1, 256;", "bar.sync 1, 256;"]
    assert shared_bytes(staged) == shared_bytes(plain)


@pytest.mark.parametrize("arch", ARCHS)
def test_split_k(devices, rng, arch):
    config = (TENSOR_CORE_CONFIGS[-4] if arch == "sm_80" else [c for c in WGMMA_CONFIGS if c.warp_specialize][-1]).with_split_k(3)
    assert run(devices[arch], rng, 40, 80, 400, "f16", config) < TOL["f16"]


def compiled(arch, out, config, divisible=(("m", 16), ("n", 16), ("k", 16)), align=(16, 16, 16), pipeline=None):
    return kaio.compile(MatmulKernel(dtypes.f16, out, align, config, divisible=divisible), arch, pipeline=pipeline)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_staged_store_writes_16_byte_vectors_through_reused_shared_memory(arch):
    config = DEFAULT[arch] or TENSOR_CORE_CONFIGS[0]
    staged, plain = compiled(arch, dtypes.f16, config), compiled(arch, dtypes.f32, config)
    stores = re.findall(r"st\.global\.\S+", staged.ptx)
    assert stores and set(stores) == {"st.global.v4.b32"}
    assert "ld.shared.v4.b32" in staged.ptx and "st.shared.b32" in staged.ptx
    assert set(re.findall(r"st\.global\.\S+", plain.ptx)) == {"st.global.v2.f32"}  # f32: unchanged
    # the staging buffer reuses the operand ring: no more shared memory than the f32 kernel
    # (the ring, and on sm_90a the TMA ring's mbarriers)
    assert shared_bytes(staged) == shared_bytes(plain) <= config.shared_bytes(2) + 64


def shared_bytes(kernel) -> int:
    static = sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", kernel.ptx))
    return static + kernel.dynamic_shared_bytes


def test_unproven_alignment_keeps_the_direct_store():
    kernel = compiled("sm_80", dtypes.f16, TENSOR_CORE_CONFIGS[0], divisible=(), align=(2, 2, 2))
    assert "ld.shared.v4.b32" not in kernel.ptx and "st.global.v4.b32" not in kernel.ptx


def test_staging_can_be_turned_off():
    config = TENSOR_CORE_CONFIGS[0]
    pipeline = str(config.pipeline()).replace("staged_stores=true", "staged_stores=false")
    kernel = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config), "sm_80", pipeline=pipeline)
    assert "st.global.v4.b32" not in kernel.ptx and "st.global.b32" in kernel.ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_every_store_sector_is_fully_used(devices, rng, arch):
    """256 x 256 f16 out of the default config: 128 KiB in 4096 sectors (the direct store of
    the mma layout's 4-byte pairs wrote 8192, each half used)."""
    dev = devices[arch]
    a = dev.alloc_from(rng.standard_normal((256, 64)).astype(np.float16))
    b = dev.alloc_from(rng.standard_normal((64, 256)).astype(np.float16))
    c = dev.alloc_from(np.full((256, 256), np.nan, np.float16))
    with dev.profiling():
        matmul(a, b, c, config=DEFAULT[arch])
    report = dev.last_launch_report
    stores = [r for r in report.global_memory if "st.global" in r.text]
    assert sum(r.sectors for r in stores) == 256 * 256 * 2 // 32
    assert all(r.efficiency == 1.0 for r in stores)
    assert report.shared_totals("store").bank_conflicts == 0 and report.shared_totals("load").bank_conflicts == 0
