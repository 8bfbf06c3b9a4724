"""The matmul's epilogue computes only the terms a call has: alpha != 1 (a multiply), beta != 0
(C read and scaled), a bias; a plain product's kernel reads no C and does no epilogue arithmetic.
Each combination matches numpy on the simulator, C poisoned with NaN where it must not be read."""

import re

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import TENSOR_CORE_CONFIGS
from kaio.ops_library.matmul_kernel import HAS_BIAS, HAS_C, SCALED, MatmulKernel

F32_MUL = re.compile(r"\bmul(\.rn)?\.f32\b")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_plain_product_reads_no_c_and_scales_nothing(arch):
    config = TENSOR_CORE_CONFIGS[0]
    general = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config), arch).ptx
    plain = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config, alpha_beta=(False, False)), arch).ptx
    assert "ld.global" in general and F32_MUL.search(general)
    assert "ld.global" not in plain and not F32_MUL.search(plain)


def test_the_terms_are_the_kernels_bits():
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), TENSOR_CORE_CONFIGS[0], dtypes.f16, alpha_beta=(False, True))
    assert kernel.terms == HAS_C | HAS_BIAS and kernel.constexprs["TERMS"] == HAS_C | HAS_BIAS
    assert MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), TENSOR_CORE_CONFIGS[0]).terms == SCALED | HAS_C
    split = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), TENSOR_CORE_CONFIGS[0].with_split_k(2), dtypes.f16)
    assert split.constexprs["TERMS"] == 0, "split-K's partial sums are raw: the reduction applies the epilogue"


@pytest.mark.parametrize("alpha, beta, with_bias", [
    (1.0, 0.0, False), (1.0, 0.0, True), (-0.5, 0.0, False), (1.0, 2.0, False), (0.25, -1.5, True),
])  # fmt: skip
@pytest.mark.parametrize("split_k", [1, 3])
def test_each_call_runs_the_kernel_of_its_terms(rng, alpha, beta, with_bias, split_k):
    dev = kaio.Device("sim")
    m, n, k = 70, 48, 3 * 32 + 16
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32) if beta else np.full((m, n), np.nan, np.float32)
    out = dev.alloc_from(c)
    config = TENSOR_CORE_CONFIGS[2].with_split_k(split_k)
    with dev.profiling():
        matmul(dev.alloc_from(a), dev.alloc_from(b), out, alpha=alpha, beta=beta,
               bias=dev.alloc_from(bias) if with_bias else None, config=config)  # fmt: skip
    if split_k == 1 and not beta and not with_bias:
        assert dev.last_launch_report.by_class["ld.global"] == 0, "a plain product reads nothing but A and B"
    want = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + (beta * c if beta else 0) + (bias if with_bias else 0)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-4)
