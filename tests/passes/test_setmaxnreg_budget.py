"""setmaxnreg budgets of warp-specialised kernels: the producer's .dec and the consumers' .inc
come from the registers the CTA holds at entry (pinned with .maxnreg), so the CTA's pool always
covers the .inc; nothing is traded where there is nothing to trade (ptxas would print C7508 and
ignore it); configurations that cannot run are compile errors."""

import re
from dataclasses import replace

import pytest

import kaio
from kaio import dtypes
from kaio.errors import KaioCompileError
from kaio.ops_library.matmul_config import WGMMA_CONFIGS, MatmulConfig
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.passes.register_trade import PRODUCER_THREADS, entry_registers, plan_trade
from kaio.targets.ptx import toolchain

WS_CONFIGS = list(dict.fromkeys(replace(c, warp_specialize=True) for c in WGMMA_CONFIGS if not c.persistent))
EDGE_CONFIGS = [
    replace(WGMMA_CONFIGS[1], warp_specialize=True, maxnreg=128),  # the audit's hang: .inc 232 under a 128 cap
    MatmulConfig((64, 128, 64), (4, 1), 4, "wgmma", warp_specialize=True),  # 4 consumer warps: C7508 before
    MatmulConfig((256, 128, 64), (16, 1), 3, "wgmma", warp_specialize=True),  # 16 consumer warps: .inc 112 hung
]


def counts(ptx: str) -> tuple[int | None, int, dict[str, int]]:
    """(.maxnreg, .maxntid x, {dec/inc: count}) of a one-entry PTX module."""
    maxnreg = re.search(r"\.maxnreg (\d+)", ptx)
    threads = int(re.search(r"\.maxntid (\d+)", ptx).group(1))  # type: ignore[union-attr]
    moves = {m: int(n) for m, n in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32 (\d+);", ptx)}
    return (int(maxnreg.group(1)) if maxnreg else None), threads, moves


def compile_ptx(config: MatmulConfig) -> str:
    return kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config), "sm_90a").ptx


@pytest.mark.parametrize("config", WS_CONFIGS + EDGE_CONFIGS, ids=MatmulConfig.key)
def test_the_consumers_inc_is_covered_by_the_pool_of_the_count_at_entry(config):
    ptx = compile_ptx(config)
    maxnreg, threads, moves = counts(ptx)
    consumers = threads - PRODUCER_THREADS
    assert consumers == config.threads
    if not moves:  # nothing to trade: each thread already holds what a consumer may take
        assert threads == 256 and maxnreg is None
        assert not plan_trade(consumers).trade
        return
    r = entry_registers(threads, config.maxnreg)
    assert maxnreg == r, "ptxas is pinned to the count the budget starts from"
    assert moves["dec"] < r < moves["inc"]
    assert moves["dec"] * PRODUCER_THREADS + moves["inc"] * consumers <= r * threads, "the .inc would wait forever"
    assert moves["inc"] <= 240 and moves["inc"] % 8 == 0


def test_the_audits_configurations_get_counts_their_pools_cover():
    # maxnreg=128, 8 consumer warps: the .dec to 40 frees 11,264 registers; 168 takes 10,240 of them
    trade = plan_trade(256, maxnreg=128)
    assert (trade.entry, trade.producer, trade.consumer) == (128, 40, 168) and trade.holds() <= trade.pool
    assert plan_trade(256).consumer == 232  # uncapped: 168 at entry (384 threads), as CUTLASS's cooperative kernel
    assert (plan_trade(512).entry, plan_trade(512).consumer) == (96, 104)  # 16 consumer warps (was 112: a hang)
    assert not plan_trade(128).trade  # 4 consumer warps hold 248 each already


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="ptxas wheel not installed")
@pytest.mark.parametrize("config", WS_CONFIGS[:1] + EDGE_CONFIGS, ids=MatmulConfig.key)
def test_ptxas_keeps_the_trade_and_gives_the_budgeted_count_at_entry(config):
    ptx = compile_ptx(config)
    report = toolchain.assemble(ptx, "sm_90a")
    assert "C7508" not in report.log and "setmaxnreg' ignored" not in report.log
    maxnreg, _, moves = counts(ptx)
    if moves:
        assert report.registers["matmul"] == maxnreg, "the kernel launches with exactly the budgeted count"


def test_a_cap_below_the_consumers_accumulators_is_a_compile_error():
    config = replace(WGMMA_CONFIGS[0], warp_specialize=True, maxnreg=128)  # 128 x 256 f32: 128 per consumer thread
    with pytest.raises(KaioCompileError, match=r"128 registers per thread at entry under maxnreg=128.*accumulators alone take 128"):
        compile_ptx(config)


def test_explicit_counts_the_pool_cannot_cover_are_compile_errors():
    with pytest.raises(KaioCompileError, match=r"holds 128 registers.*frees 11264.*\.inc to 136 \.\. 168, not 232 \(that needs 26624\)"):
        plan_trade(256, maxnreg=128, consumer=232)
    with pytest.raises(KaioCompileError, match="not 120"):
        plan_trade(256, maxnreg=128, consumer=120)  # not an increase
    with pytest.raises(KaioCompileError, match="would not give any back"):
        plan_trade(256, maxnreg=128, producer=128)
    with pytest.raises(KaioCompileError, match="steps of 8"):
        plan_trade(256, consumer=230)
    assert plan_trade(256, maxnreg=128, consumer=160).consumer == 160


def test_pipeline_options_reach_the_budget_and_a_lower_cap_later_is_refused():
    config = replace(WGMMA_CONFIGS[1], warp_specialize=True)
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config)
    text = str(config.pipeline("sm_90a")).replace("consumer_registers=0", "consumer_registers=200")
    ptx = kaio.compile(kernel, "sm_90a", pipeline=text).ptx
    assert counts(ptx)[2] == {"dec": 40, "inc": 200}
    capped = text.replace(',lower-to-ptx,', ',lower-to-ptx{maxnreg=128},')
    assert capped != text
    with pytest.raises(KaioCompileError, match="budgeted for 168 registers per thread at entry, but maxnreg=128"):
        kaio.compile(kernel, "sm_90a", pipeline=capped)
