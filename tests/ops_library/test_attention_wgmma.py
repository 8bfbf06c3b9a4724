"""attention on an sm_90a device: with 64 query rows over 4 warps (one warpgroup) S = Q K^T
runs on wgmma (both operands K-major in shared memory); O += P V takes P straight from
registers, which lower-to-wgmma leaves to mma.sync (mma.pack_a). The result matches the
float64 reference (tiny sizes: the simulator is slow)."""

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import attention
from kaio.ops_library.attention import choose_config, configured_kernel

from .test_attention_sim import BOUND, reference


def test_the_score_dot_takes_wgmma_on_sm90a():
    config = choose_config(128, 64)
    kernel = configured_kernel(dtypes.f16, config)
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": 64, "CAUSAL": True, "HAS_LENS": False}
    ptx = kaio.compile(kernel, "sm_90a", **meta).ptx
    assert ptx.count("wgmma.mma_async") == 4  # S: 4 k16 steps of m64n{BN}k16
    assert "mma.sync.aligned.m16n8k16" in ptx  # P V, A from registers


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
