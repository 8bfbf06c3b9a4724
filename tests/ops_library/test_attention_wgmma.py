"""attention on an sm_90a device: with 64 query rows over 4 warps (one warpgroup) both dots run
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

from .test_attention_sim import BOUND, reference


def test_both_attention_dots_take_wgmma_on_sm90a():
    config = choose_config(128, 64)
    kernel = configured_kernel(dtypes.f16, config)
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": 64, "CAUSAL": True, "HAS_LENS": False}
    ptx = kaio.compile(kernel, "sm_90a", **meta).ptx
    assert config.block_n == 32 and "mma.sync" not in ptx
    assert ptx.count("wgmma.mma_async") == 4 + 2  # S: D/16 = 4 k16 steps; P V: BN/16 = 2
    pv = [line for line in ptx.splitlines() if "wgmma.mma_async.sync.aligned.m64n64k16" in line]
    assert len(pv) == 2 and all(re.search(r"\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+", line) for line in pv)


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
