"""attention on an sm_90a device: with 128 query rows over 8 warps (two warpgroups) both dots run
on wgmma: S = Q K^T with both operands K-major in shared memory, O += P V with P straight from
registers (each warp's A fragments, mma.pack_a). The result matches the float64 reference
(tiny sizes: the simulator is slow)."""

import re

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import attention
from kaio.ops_library.attention import choose_config, configured_kernel
from kaio.targets.ptx import toolchain

from .test_attention_sim import BOUND, reference


def test_both_attention_dots_take_wgmma_on_sm90a():
    config = choose_config(128, 64, "sm_90a")
    kernel = configured_kernel(dtypes.f16, config)
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": 64, "CAUSAL": True, "HAS_LENS": False}
    ptx = kaio.compile(kernel, "sm_90a", **meta).ptx
    assert (config.block_m, config.block_n, config.warps) == (128, 128, 8) and "mma.sync" not in ptx
    # per key loop (two: unmasked, masked) S: D/16 = 4 k16 steps; P V: BN/16 = 8
    assert ptx.count("wgmma.mma_async") == 2 * (4 + 8)
    pv = [line for line in ptx.splitlines() if "wgmma.mma_async.sync.aligned.m64n64k16" in line]
    assert len(pv) == 2 * 8 and all(re.search(r"\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+", line) for line in pv)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_on_sm90a_matches_the_reference(causal):
    dev = kaio.Device("sim", arch="sm_90a")
    rng = np.random.default_rng()
    b, h, sq, sk, d = 1, 2, 70, 45, 64
    q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float16) for s in (sq, sk, sk))
    out = dev.alloc_from(np.full((b, h, sq, d), np.nan, np.float16))
    attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=causal, out=out)
    want, _ = reference(q, k, v, causal)
    got = out.to_host().astype(np.float64)
    assert not np.isnan(got).any()
    assert np.abs(got - want).max() <= BOUND


def test_keys_and_values_come_by_rank_3_tensor_maps():
    """K and V of head g are rows g * SK .. g * SK + SK of a (B * HKV * SK, D) array: a map
    over (D, SK, groups) whose box stops at the head's last key (pipeline-tma's split_batch)."""
    config = choose_config(128, 64, "sm_90a")
    kernel = configured_kernel(dtypes.f16, config)
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": 64, "CAUSAL": False, "HAS_LENS": False}
    compiled = kaio.compile(kernel, "sm_90a", __divisible__=(("D", 16), ("DV", 16)), **meta)
    maps = {t.array: (t.dims, t.strides, t.box) for t in compiled.tensor_maps}
    assert maps == {
        **{name: (("D", "SK", "2147483647"), ("D", "(SK * D)"), (64, config.block_n, 1)) for name in ("k", "v")},
        "o": (("D", "SQ", "2147483647"), ("D", "(SQ * D)"), (64, config.block_m, 1)),  # store-tma's, by head too
    }
    assert compiled.ptx.count("cp.async.bulk.tensor.3d.shared::cluster") == 2 * 2 * 2  # 2 key loops: prologue + loop, K and V
    assert compiled.ptx.count("cp.async.bulk.tensor.3d.global.shared::cta") == 1  # O
    lens = kaio.compile(kernel, "sm_90a", __divisible__=(("D", 16), ("DV", 16)), **{**meta, "HAS_LENS": True})
    assert [t.array for t in lens.tensor_maps] == ["o"], "a per-batch key count read from memory: no map describes K, V"


@pytest.mark.parametrize("h, hkv, sq, sk, causal, lens", [
    (4, 2, 40, 96, False, None),  # grouped heads
    (2, 2, 33, 70, True, None),  # ragged: the last box of a head stops at its last key
    (2, 1, 1, 200, False, None),  # decoding: the keys split across programs, then combined
    (2, 2, 16, 64, True, [40, 0]),  # per-batch key counts: cp.async
])
def test_attention_with_tma_matches_the_reference(rng, h, hkv, sq, sk, causal, lens):
    dev = kaio.Device("sim", arch="sm_90a")
    b = 2
    q = rng.standard_normal((b, h, sq, 64)).astype(np.float16)
    k, v = (rng.standard_normal((b, hkv, sk, 64)).astype(np.float16) for _ in range(2))
    out = dev.alloc_from(np.full(q.shape, np.nan, np.float16))
    kw = {"kv_lens": dev.alloc_from(np.asarray(lens, np.int32))} if lens is not None else {}
    with dev.profiling():
        attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=causal, out=out, **kw)
    mix = dev.last_launch_report.by_class  # the main kernel's (decoding: the combine step's)
    if sq > 1:
        # K and V by TMA, or by cp.async where key counts come from memory; O by TMA either way
        assert mix["cp.async.bulk.tensor.3d"] > 0 and mix["cp.async.bulk.commit_group"] > 0
        assert (mix["cp.async"] > 0) == (lens is not None)
    want, _ = reference(q, k, v, causal, lens=lens)
    got = out.to_host().astype(np.float64)
    assert not np.isnan(got).any() and np.abs(got - want).max() <= BOUND


@pytest.mark.skipif(None in (toolchain.find_ptxas(), toolchain.find_cuobjdump(), toolchain.find_nvdisasm()), reason="no ptxas/cuobjdump wheels")
@pytest.mark.parametrize("d", [64, 128])
def test_sm90a_attention_assembles_with_utmaldg_3d_and_no_spills(d):
    config = choose_config(128, d, "sm_90a")
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": d, "BDV": d, "CAUSAL": True, "HAS_LENS": False}
    compiled = kaio.compile(configured_kernel(dtypes.bf16, config), "sm_90a", __divisible__=(("D", 16), ("DV", 16)), **meta)
    report = toolchain.assemble(compiled.ptx, "sm_90a")
    assert report.spill_stores.get("attention", 0) == 0
    sass = toolchain.disassemble(report.cubin)
    assert "UTMALDG.3D" in sass and "HGMMA" in sass and "LDGSTS" not in sass


def test_whole_key_blocks_take_the_unmasked_loop_on_sm90a(rng):
    """Keys over two 128-row blocks, causal: the later query blocks run the unmasked loop over
    their off-band blocks (1 and 2 of them), then the masked loop over the diagonal in the same
    shared bytes, its TMA ring refilled after the barrier (non-causal runs are the other tests')."""
    causal = True
    dev = kaio.Device("sim", arch="sm_90a")
    assert choose_config(130, 64, "sm_90a").block_n == 128
    q = rng.standard_normal((1, 1, 260, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 1, 300, 64)).astype(np.float16) for _ in range(2))
    out = dev.alloc_from(np.full(q.shape, np.nan, np.float16))
    previous, dev.simulator.race_check = dev.simulator.race_check, True  # shared-memory hazards are errors
    try:
        attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=causal, out=out)
    finally:
        dev.simulator.race_check = previous
    want, _ = reference(q, k, v, causal)
    got = out.to_host().astype(np.float64)
    assert not np.isnan(got).any() and np.abs(got - want).max() <= BOUND
