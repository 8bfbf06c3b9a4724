"""Proxy fences of the sm_90a code: the mbarriers TMA completes on are fenced after their init;
a TMA refill of a stage that ldmatrix read (the mma.sync + TMA path) is fenced in the issuing
thread after the barrier; a stage only wgmma reads is not; the TMA-store epilogue fences every
writer before its barrier."""

from dataclasses import dataclass, replace

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import WGMMA_CONFIGS, MatmulConfig
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.pipeline import Pipeline
from kaio.targets.ptx import toolchain

FENCE = "fence.proxy.async.shared::cta;"
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global"
TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta"
SMALL = WGMMA_CONFIGS[4]  # 64 x 64 x 64, 4 warps, 3 stages
WS = replace(WGMMA_CONFIGS[0], warp_specialize=True)


def without_wgmma(config):
    """The config's pipeline with the dot left to mma.sync: ldmatrix reads the TMA ring."""
    return str(MatmulConfig.pipeline(config, "sm_90a")).replace("lower-to-wgmma{overlap=true},", "")


@dataclass(frozen=True)
class MmaSyncOnTma(MatmulConfig):
    """A wgmma-layout config whose dot runs on mma.sync while its ring still fills by TMA."""

    def pipeline(self, arch: str = "sm_80") -> Pipeline:
        return Pipeline.parse(without_wgmma(self))

    def key(self) -> str:
        return super().key() + "-mmasync"


def lines_of(config, pipeline=None) -> list[str]:
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config)
    return [line.strip() for line in kaio.compile(kernel, "sm_90a", pipeline=pipeline).ptx.splitlines()]


def first(lines: list[str], text: str, start: int = 0) -> int:
    return next(i for i in range(start, len(lines)) if text in lines[i])


def loop_body(lines: list[str]) -> list[str]:
    """The K loop: from its mbarrier wait to its back edge."""
    start = first(lines, "mbarrier.try_wait.parity")
    return lines[start : first(lines, "$L_endfor", start)]


@pytest.mark.parametrize("config", [SMALL, WS, WGMMA_CONFIGS[-1]], ids=["tma", "warp-specialised", "persistent"])
def test_the_barriers_are_fenced_for_the_async_proxy_after_their_init(config):
    lines = lines_of(config)
    init = max(i for i, line in enumerate(lines) if "mbarrier.init" in line)
    fence, publish, load = first(lines, FENCE), first(lines, "bar.sync"), first(lines, TMA_LOAD)
    assert init < fence < publish < load, "thread 0: init, fence, then the block barrier, before any TMA"
    assert not any("$L_" in line for line in lines[init:fence]), "in the initialising thread's branch"


def test_a_refill_of_a_stage_ldmatrix_read_is_fenced_after_the_barrier():
    body = loop_body(lines_of(SMALL, without_wgmma(SMALL)))
    read, barrier = max(i for i, line in enumerate(body) if "ldmatrix" in line), first(body, "bar.sync")
    fence, refill = first(body, FENCE), first(body, TMA_LOAD)
    assert read < barrier < fence < refill


@pytest.mark.parametrize("config", [SMALL, WS, WGMMA_CONFIGS[-1]], ids=["tma", "warp-specialised", "persistent"])
def test_stages_only_wgmma_reads_are_refilled_without_a_fence(config):
    lines = lines_of(config)
    assert FENCE not in "\n".join(loop_body(lines))
    assert sum(FENCE in line for line in lines) == 2, "the barriers' init and the C store's"


def test_a_nested_run_of_an_ldmatrix_ring_fences_its_prologue():
    persistent = WGMMA_CONFIGS[-1]
    lines = lines_of(persistent, without_wgmma(persistent))
    k_loop = first(lines, "$L_for", first(lines, "$L_for") + 1)
    k_loop_end = first(lines, "$L_endfor", k_loop)
    next_run = first(lines, "bar.sync", k_loop_end)  # the next tile's first loads: the run's readers are done
    assert first(lines, FENCE, next_run) < first(lines, TMA_LOAD, next_run) < first(lines, "st.shared", next_run)


def test_the_c_store_is_fenced_by_every_writer_before_its_barrier():
    lines = lines_of(SMALL)
    store = first(lines, TMA_STORE)
    fence = max(i for i in range(store) if FENCE in lines[i])
    staged = max(i for i in range(fence) if lines[i].startswith("st.shared"))
    barrier = first(lines, "bar.sync", fence)
    assert staged < fence < barrier < store
    assert not any(line.startswith(("@", "$L_")) for line in lines[staged:barrier]), "every thread fences"


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="ptxas wheel not installed")
def test_the_fenced_mma_sync_tma_kernel_assembles():
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), SMALL)
    report = toolchain.assemble(kaio.compile(kernel, "sm_90a", pipeline=without_wgmma(SMALL)).ptx, "sm_90a")
    assert report.spill_stores.get("matmul", 0) == 0


def test_the_mma_sync_tma_path_matches_numpy(rng):
    dev = kaio.Device("sim", arch="sm_90a")
    m, n, k = 70, 40, 4 * 64 - 8  # four K tiles through three stages: every stage is refilled
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = dev.alloc_from(np.full((m, n), np.nan, np.float32))
    with dev.profiling():
        matmul(dev.alloc_from(a), dev.alloc_from(b), out, config=MmaSyncOnTma(**vars(SMALL)))
    mix = dev.last_launch_report.by_class
    assert mix["cp.async.bulk.tensor.2d"] > 0 and mix.get("wgmma.mma_async", 0) == 0 and mix["mma.m16n8k16.f32.f16"] > 0
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
