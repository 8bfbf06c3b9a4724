"""Split-K on the simulator: K cut across programs, f32 partial sums reduced in a fixed order,
the fused epilogue applied once. Fresh random inputs, poisoned outputs, float64 references."""

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import (
    GpuModel,
    MatmulConfig,
    candidates,
    choose_config,
    default_config,
    split_k_for,
)

SMALL = MatmulConfig((32, 64, 64), (2, 2), 3)


def run(dev, rng, m, n, k, dtype, config, out_dtype=np.float32, bias=False, activation=None, beta=0.0):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c0 = rng.standard_normal((m, n)).astype(out_dtype) if beta else np.full((m, n), np.nan, out_dtype)
    out = dev.alloc_from(c0)
    bias_v = rng.standard_normal(n).astype(np.float32) if bias else None
    kw = {"bias": dev.alloc_from(bias_v)} if bias else {}
    matmul(dev.alloc_from(a), dev.alloc_from(b), out, alpha=1.5, beta=beta, activation=activation,
           config=config, **kw)  # fmt: skip
    ref = 1.5 * (a.astype(np.float64) @ b.astype(np.float64))
    if beta:
        ref = ref + beta * c0.astype(np.float64)
    if bias:
        ref = ref + bias_v
    if activation == "relu":
        ref = np.maximum(ref, 0)
    return out.to_host().astype(np.float64), ref


def rel_err(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


@pytest.mark.parametrize("splits", [2, 3, 5])
@pytest.mark.parametrize("shape", [(17, 70, 300), (40, 64, 1000), (1, 130, 513)], ids=lambda s: "x".join(map(str, s)))
def test_split_k_matches_numpy_on_ragged_shapes(dev, rng, shape, splits):
    got, want = run(dev, rng, *shape, np.float16, SMALL.with_split_k(splits))
    assert not np.isnan(got).any()
    assert rel_err(got, want) < 1e-5


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_split_k_for_bf16_and_the_simt_path(dev, rng, dtype):
    np_type = {"bf16": ml_dtypes.bfloat16, "f32": np.float32}[dtype]
    config = SMALL if dtype == "bf16" else MatmulConfig((32, 32, 16), (1, 1), 2, "pad", tensor_cores=False)
    got, want = run(dev, rng, 20, 48, 400, np_type, config.with_split_k(4))
    assert rel_err(got, want) < 1e-5


def test_split_k_applies_the_epilogue_once(dev, rng):
    """beta * C, the bias and the activation come after the sum of every chunk, into f16."""
    got, want = run(dev, rng, 33, 72, 640, np.float16, SMALL.with_split_k(3), out_dtype=np.float16,
                    bias=True, activation="relu", beta=0.5)  # fmt: skip
    assert rel_err(got, want) < 2e-3


def test_split_k_is_deterministic(dev, rng):
    a = dev.alloc_from(rng.standard_normal((16, 768)).astype(np.float16))
    b = dev.alloc_from(rng.standard_normal((768, 64)).astype(np.float16))
    results = [matmul(a, b, config=SMALL.with_split_k(4)).to_host() for _ in range(2)]
    assert np.array_equal(results[0], results[1])


def test_more_splits_than_k_steps_leave_empty_chunks_at_zero(dev, rng):
    """K = 100 is 2 BK steps: splits 3..5 get no K at all and must add zeros, not garbage."""
    got, want = run(dev, rng, 8, 64, 100, np.float16, SMALL.with_split_k(5))
    assert rel_err(got, want) < 1e-5


def test_the_default_splits_only_small_deep_problems():
    config = default_config(True, (8, 8, 2), 2)
    assert split_k_for(config, 4096, 4096, 4096, 132) == 1  # enough tiles
    assert split_k_for(config, 128, 128, 256, 132) == 1  # K too shallow to share
    skinny = split_k_for(config, 64, 256, 8192, 132)
    assert 2 <= skinny <= 16
    assert 2 * 2 * skinny <= 132 + 2 * 2  # the split programs still fit on the GPU


def test_auto_ranks_split_k_for_skinny_problems():
    """The cost model (used by config="auto" on the simulator) prefers a split for M = 64,
    K = 8192 and never for a large square problem."""
    gpu = GpuModel(sms=132)
    assert choose_config(64, 256, 8192, 2, True, gpu=gpu).split_k > 1
    assert choose_config(4096, 4096, 4096, 2, True, gpu=gpu).split_k == 1
    pool = candidates(True, (8, 8, 2), 2, (64, 256, 8192), 132)
    assert any(c.split_k > 1 for c in pool) and any(c.split_k == 1 for c in pool)


def test_default_config_splits_on_the_simulator(dev, rng):
    """config=None picks split-K itself for a deep, tiny problem (the simulator has 108 SMs)."""
    from kaio.ops_library.operands import Operands

    a = rng.standard_normal((16, 1024)).astype(np.float16)
    b = rng.standard_normal((1024, 32)).astype(np.float16)
    ops = Operands("matmul", a, b, device=dev)
    oa, ob = ops.take("a", a), ops.take("b", b)
    oc = ops.output((16, 32), dtypes.f32)
    kernel = matmul.kernel(oa, ob, oc, 16, 32, 1024, None, dev)
    assert kernel.config.split_k > 1
    got = matmul(dev.alloc_from(a), dev.alloc_from(b)).to_host()
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert rel_err(got, want) < 1e-5


def test_split_k_kernels_compile_and_show_their_pipeline():
    from kaio.ops_library.matmul_kernel import MatmulKernel

    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), SMALL.with_split_k(4))
    compiled = kaio.compile(kernel, "sm_80")
    assert "mma.sync" in compiled.ptx and "%ctaid.y" in compiled.ptx
    assert SMALL.with_split_k(4).key().endswith("-k4")
