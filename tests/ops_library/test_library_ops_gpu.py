"""The rest of the library on a real GPU (``pytest -m gpu``): the memory-bound ops, the
attention backward and the quantized matmuls, against the same float64 references and
tolerances as their simulator tests (whose bodies run here with the GPU as the default device),
on ``Device(0)`` and, on Hopper, on its other target too (the ``gpu`` fixture of
test_ops_gpu.py). Skipped without a CUDA device; fresh random inputs, outputs poisoned."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.ops_library import fp8_matmul, gguf_matmul, int8_matmul, w4a16_matmul
from kaio.runtime import device as device_module
from kaio.runtime import driver

from . import test_activations, test_attention_backward, test_cross_entropy, test_norms, test_rope, test_softmax
from .test_fp8_matmul import fp8
from .test_fp8_matmul import reference as fp8_reference
from .test_int8_matmul import exact, int8
from .test_ops_gpu import gpu  # noqa: F401  (the fixture: the default target, then the other)
from .test_w4a16_matmul import dequantize_gptq, random_gptq
from .test_w4a16_matmul import rel as w4a16_rel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not driver.available(), reason="no CUDA driver on this machine"),
]

HALF = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
ROWS = [("f16", 4096 + 3), ("bf16", 1000)]  # rows in column blocks, rows in one pass


@pytest.fixture
def on_gpu(gpu: kaio.Device, monkeypatch: pytest.MonkeyPatch) -> kaio.Device:  # noqa: F811
    """The GPU as the default device: numpy inputs of the simulator tests' bodies go to it."""
    monkeypatch.setattr(device_module, "_default", gpu)
    return gpu


@pytest.mark.parametrize("dtype, cols", ROWS)
def test_norms_softmax_activations_cross_entropy(on_gpu, rng, poison, dtype, cols):
    test_norms.test_layer_norm_matches_float64(rng, None, dtype, cols)
    test_norms.test_fused_add_rms_norm_matches_float64(rng, None, dtype, cols)
    test_softmax.test_softmax_and_log_softmax_match_float64(rng, None, dtype, cols)
    test_activations.test_gated_activations_match_float64(rng, None, dtype, cols)
    test_cross_entropy.test_cross_entropy_matches_float64(rng, None, dtype, cols)


@pytest.mark.parametrize("dtype, interleaved", [("f16", False), ("bf16", True)])
def test_rope_both_layouts(on_gpu, rng, poison, dtype, interleaved):
    for layout in ("bshd", "bhsd"):
        test_rope.test_rope_matches_float64(rng, None, dtype, interleaved, layout, (2, 33, 4, 128))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_backward_atomic_and_deterministic(on_gpu, rng, poison, causal):
    test_attention_backward.run(on_gpu, rng, 2, 4, 2, 200, 264, 64, "bf16", causal=causal)
    test_attention_backward.run(on_gpu, rng, 1, 2, 1, 70, 24, 128, "f16", causal=causal, deterministic=True)


def test_int8_and_fp8_matmuls(on_gpu, rng, poison):
    m, n, k = 70, 130, 160
    a, b = int8(rng, (m, k)), int8(rng, (k, n))
    got = int8_matmul(a, b, np.ones(m, np.float32), np.ones(n, np.float32), out_dtype="f32", device=on_gpu)
    np.testing.assert_array_equal(got, exact(a, b).astype(np.float32))
    w = int8(rng, (n, k))  # column-major B: a linear layer's weight
    got = int8_matmul(a, w.T, np.ones(m, np.float32), np.ones(n, np.float32), out_dtype="f32", device=on_gpu)
    np.testing.assert_array_equal(got, exact(a, w.T).astype(np.float32))
    fa, fb = fp8(rng, "e4m3", (m, k)), fp8(rng, "e5m2", (k, n))
    sa, sb = (rng.random(m) + 0.5).astype(np.float32), (rng.random(n) + 0.5).astype(np.float32)
    got, want = fp8_matmul(fa, fb, sa, sb, out_dtype="f32", device=on_gpu), fp8_reference(fa, fb, sa, sb)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("m, dtype", [(1, "f16"), (64, "bf16")])
def test_w4a16_matmul(on_gpu, rng, poison, m, dtype):
    k, n, group = 512, 136, 128
    t = HALF[dtype]
    qweight, scales, qzeros = random_gptq(rng, k, n, group, True, np.float16)
    x = rng.standard_normal((m, k)).astype(t)
    got = w4a16_matmul(x, qweight, scales, qzeros, group_size=group, device=on_gpu)
    w = dequantize_gptq(qweight, scales, qzeros, group).astype(t).astype(np.float64)
    assert w4a16_rel(got, x.astype(np.float64) @ w) <= {"f16": 5e-3, "bf16": 3e-2}[dtype]


@pytest.mark.parametrize(
    "qtype, m", [("Q8_0", 1), ("Q4_0", 3), ("Q4_K", 1), ("Q5_K", 3), ("Q6_K", 1), ("Q4_K", 100)]
)  # every format decoding (1 and 3 rows), and prefill on tensor cores
def test_gguf_matmul(on_gpu, poison, qtype, m):
    gguf = pytest.importorskip("gguf")
    from .test_gguf_matmul import bound, random_weight

    rng = np.random.default_rng()
    k, n = 512, 136
    w = random_weight(rng, qtype, n, k)
    x = rng.standard_normal((m, k)).astype(np.float16)
    got = gguf_matmul(x, w, qtype, device=on_gpu).astype(np.float64)
    assert np.isfinite(got).all(), "unwritten (NaN) or non-finite elements"
    wd = gguf.quants.dequantize(w, gguf.GGMLQuantizationType[qtype]).astype(np.float64)
    xd = x.astype(np.float64)
    err, limit = np.abs(got - xd @ wd.T), bound(xd, wd, "f16")
    assert (err <= limit).all(), f"worst error {np.max(err / limit):.3g}x the bound"
