"""store-tma: on sm_90a a dot's output tile goes through a swizzled shared buffer (the K loop's
dead ring) and out as TMA box stores; ragged edges are clipped by the unit, a store in a loop
refills the buffer safely, and a store no tensor map can describe keeps st.global with a debug
note."""

import logging
import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.compiled import TensorMapParam
from kaio.ops_library import matmul
from kaio.errors import KaioTargetError
from kaio.ops_library.matmul_config import TENSOR_CORE_CONFIGS, WGMMA_CONFIGS
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.passes.store_tma import StoreTmaPass
from kaio.prelude import Array, MutArray, f16, f32, i32
from kaio.targets.ptx import toolchain

TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
needs_sass = pytest.mark.skipif(
    None in (toolchain.find_ptxas(), toolchain.find_cuobjdump(), toolchain.find_nvdisasm()),
    reason="ptxas / cuobjdump / nvdisasm wheels not installed",
)


@pytest.fixture(scope="module")
def hopper():
    return kaio.Device("sim", arch="sm_90a")


def test_the_matmul_stores_c_by_tma_from_its_dead_ring():
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), WGMMA_CONFIGS[0])
    compiled = kaio.compile(kernel, "sm_90a")
    c_map = next(t for t in compiled.tensor_maps if t.array == "c")
    assert c_map == TensorMapParam("c_tmap", "c", ("n", "(0 + m)"), ("n",), (64, 128), 128)
    ptx = compiled.ptx
    assert ptx.count(TMA_STORE) == 4  # 256 columns: four 64-column (128-byte) panels
    assert "fence.proxy.async.shared::cta" in ptx and "cp.async.bulk.wait_group.read 0" in ptx
    assert not re.search(r"st\.global", ptx), "C leaves by TMA only"
    staged = kaio.compile(kernel, "sm_90a", pipeline=kernel.default_pipeline("sm_90a").without("store-tma"))
    assert compiled.dynamic_shared_bytes == staged.dynamic_shared_bytes, "the buffer takes the ring's bytes"
    text = compiled.stages["store-tma"]
    assert '"tma_store" {kaio.reuse_dead}' in text and text.count("tma.store") == 4


@pytest.mark.heavy_seeds
@pytest.mark.parametrize("m, n, k", [(130, 72, 200), (17, 264, 136), (1, 8, 8)])
@pytest.mark.parametrize("in_type, out_type", [
    (np.float16, np.float16), (np.float16, np.float32), (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
], ids=["f16", "f16-f32", "bf16"])  # fmt: skip
def test_tma_stores_match_numpy_on_ragged_shapes(hopper, rng, m, n, k, in_type, out_type):
    """Boxes past C's edges are clipped by the unit (a box column past n would land on the next
    row, a row past m outside C: the simulator's bounds check would fault)."""
    a = rng.standard_normal((m, k)).astype(in_type)
    b = rng.standard_normal((k, n)).astype(in_type)
    bias = rng.standard_normal(n).astype(out_type)
    out = hopper.alloc_from(np.full((m, n), np.nan, out_type))
    with hopper.profiling():
        matmul(hopper.alloc_from(a), hopper.alloc_from(b), out, bias=hopper.alloc_from(bias), activation="relu")
    mix = hopper.last_launch_report.by_class
    assert mix["st.global"] == 0 and mix["cp.async.bulk.commit_group"] > 0, "C left by TMA"
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64), 0)
    got = out.to_host().astype(np.float64)
    rtol = 1e-5 if out_type == np.float32 else (8e-3 if out_type == np.float16 else 2e-2)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.sqrt(k))


@pytest.mark.parametrize("config", [c for c in WGMMA_CONFIGS if c != WGMMA_CONFIGS[0]], ids=str)
def test_every_tma_config_stores_correctly(hopper, rng, config):
    m, n, k = 70, 136, 72
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float16))
    matmul(hopper.alloc_from(a), hopper.alloc_from(b), out, config=config)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.to_host().astype(np.float64), want, rtol=8e-3, atol=8e-3 * np.sqrt(k))


def test_split_k_partial_tiles_go_out_through_rank_3_maps(hopper, rng):
    """Split s writes its partial tile at rows s * m + m0 with bound s * m + m: a map over
    (n, m, splits) whose boxes stop at the split's last row."""
    config = WGMMA_CONFIGS[2].with_split_k(3)
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config)
    c_map = next(t for t in kaio.compile(kernel, "sm_90a").tensor_maps if t.array == "c")
    assert c_map.dims[:2] == ("n", "m") and len(c_map.box) == 3
    m, n, k = 40, 72, 3 * 64 + 8
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    matmul(hopper.alloc_from(a), hopper.alloc_from(b), out, config=config)
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_without_the_tma_switch_c_keeps_st_global():
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), replace(WGMMA_CONFIGS[0], tma=False))
    assert "store-tma" not in kernel.default_pipeline("sm_90a").names
    ptx = kaio.compile(kernel, "sm_90a").ptx
    assert TMA_STORE not in ptx and "st.global" in ptx


def test_an_unaligned_c_keeps_st_global_with_a_debug_note(caplog, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")  # the note comes from the passes: no disk-cache hit
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 2), WGMMA_CONFIGS[0])
    with caplog.at_level(logging.DEBUG, logger="kaio.passes"):
        ptx = kaio.compile(kernel, "sm_90a").ptx
    assert TMA_STORE not in ptx and "st.global" in ptx
    assert any("store-tma" in r.message and "does not prove 16-byte rows" in r.message for r in caplog.records)


@kaio.tile_kernel(num_warps=4, num_stages=1)
def column_blocks(a: Array[f16], b: Array[f16], c: MutArray[f16], n: i32, BLOCKS: kaio.constexpr = 3,
                  ONLY_IF_POSITIVE: kaio.constexpr = False):  # fmt: skip
    """C[:, 64 j .. 64 j + 64] = A B_j for each column block j, one store per loop iteration (the
    store's buffer is refilled while the previous box store may still be reading it)."""
    a, b, c = kt.multiple_of(a, 16), kt.multiple_of(b, 16), kt.multiple_of(c, 16)
    x = kt.load(a, (0, 0), (64, 64), (64, 64))
    for j in range(BLOCKS):
        acc = kt.dot(x, kt.load(b, (0, j * 64), (64, 64), (64, n)), kt.zeros((64, 64), f32))
        if ONLY_IF_POSITIVE:
            if n > 0:
                kt.store(c, (0, j * 64), f16(acc), (64, n))
        else:
            kt.store(c, (0, j * 64), f16(acc), (64, n))


def test_a_store_in_a_loop_reuses_its_buffer_safely(hopper, rng):
    n = 3 * 64 - 16  # the last block is ragged (n % 16 == 0: the launch proves 16-byte rows)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, n)).astype(np.float16)
    c = hopper.alloc_from(np.full((64, n), np.nan, np.float16))
    with hopper.profiling():
        column_blocks[1](hopper.alloc_from(a), hopper.alloc_from(b), c, n)
    mix = hopper.last_launch_report.by_class
    assert mix["st.global"] == 0 and mix["cp.async.bulk.commit_group"] == 3
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.to_host().astype(np.float64), want, rtol=8e-3, atol=8e-2)


def test_a_store_under_a_branch_keeps_st_global_with_a_debug_note(caplog, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")  # the note comes from the passes: no disk-cache hit
    with caplog.at_level(logging.DEBUG, logger="kaio.passes"):
        ptx = kaio.compile(column_blocks, "sm_90a", __divisible__=(("n", 16),), ONLY_IF_POSITIVE=True).ptx
    assert TMA_STORE not in ptx and "st.global" in ptx
    assert any("store-tma" in r.message and "under a branch" in r.message for r in caplog.records)


def test_stores_of_elementwise_tiles_are_left_alone():
    @kaio.tile_kernel(num_warps=4)
    def scale(x: Array[f16], y: MutArray[f16], n: i32):
        x, y = kt.multiple_of(x, 16), kt.multiple_of(y, 16)
        kt.store(y, (0, 0), kt.load(x, (0, 0), (64, 64), (n, n)) * 2.0, (n, n))

    ptx = kaio.compile(scale, "sm_90a").ptx
    assert TMA_STORE not in ptx and "st.global" in ptx


@needs_sass
@pytest.mark.parametrize("config", WGMMA_CONFIGS, ids=str)
def test_every_wgmma_config_assembles_with_utmastg_and_no_spills(config):
    kernel = MatmulKernel(dtypes.bf16, dtypes.bf16, (16, 16, 16), config, dtypes.bf16, "gelu")
    report = toolchain.assemble(kaio.compile(kernel, "sm_90a").ptx, "sm_90a")
    assert report.spill_stores.get("matmul", 0) == 0 and report.spill_loads.get("matmul", 0) == 0
    sass = toolchain.disassemble(report.cubin)
    assert "UTMASTG.2D" in sass and not re.search(r"\bSTG\b", sass)



def test_store_tma_on_a_target_without_tma_names_the_feature_and_the_minimum_sm():
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), TENSOR_CORE_CONFIGS[0])
    pipeline = kernel.default_pipeline("sm_80").insert(StoreTmaPass(), after="tile-layout")
    with pytest.raises(KaioTargetError, match=r"fence.proxy.async needs sm_90 or newer; the target is sm_80"):
        kaio.compile(kernel, "sm_80", pipeline=pipeline)


@kaio.tile_kernel(num_warps=16, num_stages=1)
def wide_tile(a: Array[f16], b: Array[f16], c: MutArray[f32], n: i32):
    """A 256 x 256 f32 accumulator: 256 KiB staged would exceed a block's shared memory."""
    a, b, c = kt.multiple_of(a, 16), kt.multiple_of(b, 16), kt.multiple_of(c, 16)
    acc = kt.dot(kt.load(a, (0, 0), (256, 16), (n, 16)), kt.load(b, (0, 0), (16, 256), (16, n)), kt.zeros((256, 256), f32))
    kt.store(c, (0, 0), acc, (n, n))


def test_a_tile_too_large_to_stage_keeps_st_global_with_a_debug_note(caplog, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")  # the note comes from the passes: no disk-cache hit
    with caplog.at_level(logging.DEBUG, logger="kaio.passes"):
        ptx = kaio.compile(wide_tile, "sm_90a", __divisible__=(("n", 16),)).ptx
    assert TMA_STORE not in ptx and "st.global" in ptx
    assert any("store-tma" in r.message and "256 KiB would not fit" in r.message for r in caplog.records)
