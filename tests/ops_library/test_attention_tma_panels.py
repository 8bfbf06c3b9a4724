"""Attention on sm_90a at head dim 128: K and V tiles two swizzle spans wide come by one box
each of a rank-4 paneled map (panel, keys of the head, panels, heads) where the launch found
D a multiple of 64 (``tensor_map_views``), O leaves by one box the same way, and the result
matches the reference."""

import numpy as np

import kaio
from kaio import dtypes
from kaio.ops_library import attention
from kaio.ops_library.attention import choose_config, configured_kernel

from .test_attention_sim import BOUND, reference

LOAD = "cp.async.bulk.tensor.{}d.shared::cluster.global.mbarrier::complete_tx::bytes"


def test_attention_keys_and_values_at_head_dim_128_are_one_box_each():
    config = choose_config(128, 128, "sm_90a")
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": 128, "BDV": 128, "CAUSAL": False, "HAS_LENS": False}
    compiled = kaio.compile(configured_kernel(dtypes.f16, config), "sm_90a", __divisible__=(("D", 64), ("DV", 64)), **meta)
    maps = {t.array: (t.dims, t.strides, t.box) for t in compiled.tensor_maps}
    for name in ("k", "v"):  # (panel, keys of the head, panels, heads)
        assert maps[name] == (("64", "SK", "(D // 64)", "2147483647"), ("D", "64", "(SK * D)"), (64, config.block_n, 2, 1))
    assert compiled.ptx.count(LOAD.format(4)) == 2 * 2 * 2 and LOAD.format(3) not in compiled.ptx  # 2 key loops, K and V
    assert maps["o"] == (("64", "SQ", "(D // 64)", "2147483647"), ("D", "64", "(SQ * D)"), (64, config.block_m, 2, 1))
    assert compiled.ptx.count("cp.async.bulk.tensor.4d.global.shared::cta") == 1  # O: store-tma's, one box too


def test_attention_at_head_dim_128_matches_the_reference(rng):
    dev = kaio.Device("sim", arch="sm_90a")
    q = rng.standard_normal((1, 2, 40, 128)).astype(np.float16)
    k, v = (rng.standard_normal((1, 2, 70, 128)).astype(np.float16) for _ in range(2))
    out = dev.alloc_from(np.full(q.shape, np.nan, np.float16))
    with dev.profiling():
        attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=True, out=out)
    assert dev.last_launch_report.by_class["cp.async.bulk.tensor.4d"] > 0
    want, _ = reference(q, k, v, True)
    got = out.to_host().astype(np.float64)
    assert not np.isnan(got).any() and np.abs(got - want).max() <= BOUND
