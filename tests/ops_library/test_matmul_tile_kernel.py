"""The tile-kernel matmul on the simulator: ragged sizes for every input type, the fused
bias + activation epilogue, and its errors. Fresh random inputs, poisoned outputs."""

import ml_dtypes
import numpy as np
import pytest

from kaio.errors import KaioTypeError
from kaio.ops_library import matmul

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
RAGGED = [(1, 17, 100), (257, 1, 17), (17, 100, 257), (100, 257, 1), (128, 64, 64)]


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    None: lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": gelu,
    "silu": lambda x: x / (1 + np.exp(-x)),
}


def run(dev, rng, m, n, k, dtype, out_dtype=np.float32, bias=None, activation=None):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    out = dev.alloc_from(np.full((m, n), np.nan, dtype=out_dtype))
    kw = {}
    if bias is not None:
        kw["bias"] = dev.alloc_from(bias)
    matmul(dev.alloc_from(a), dev.alloc_from(b), out, activation=activation, **kw)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if bias is not None:
        ref = ref + bias.astype(np.float64)
    return out.to_host().astype(np.float64), ACTIVATIONS[activation](ref)


@pytest.mark.parametrize("shape", RAGGED, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", list(TYPES))
def test_ragged_sizes_for_every_input_type(dev, rng, dtype, shape):
    got, want = run(dev, rng, *shape, TYPES[dtype])
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err < 1e-5, err


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
@pytest.mark.parametrize("out", ["f32", "f16"])
def test_bias_and_activation_fused(dev, rng, activation, out):
    m, n, k = 70, 40, 48
    bias = rng.standard_normal(n).astype(np.float32)
    got, want = run(dev, rng, m, n, k, np.float16, TYPES[out], bias, activation)
    tol = 1e-5 if out == "f32" else 3e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


def test_bias_in_the_input_type(dev, rng):
    m, n, k = 33, 48, 32
    bias = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    got, want = run(dev, rng, m, n, k, ml_dtypes.bfloat16, np.float32, bias, "relu")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_epilogue_errors_are_named(dev):
    a = dev.alloc_from(np.zeros((16, 16), np.float16))
    with pytest.raises(KaioTypeError, match="activation must be one of"):
        matmul(a, a, activation="tanh")
    with pytest.raises(KaioTypeError, match=r"bias must have shape \(16,\)"):
        matmul(a, a, bias=dev.alloc_from(np.zeros(8, np.float32)))
    with pytest.raises(KaioTypeError, match="bias must be f32 or f16"):
        matmul(a, a, bias=dev.alloc_from(np.zeros(16, np.int32)))


def test_the_matmul_source_is_one_screen():
    import inspect

    from kaio.ops_library.matmul_kernel import matmul_tile_kernel

    lines = inspect.getsource(matmul_tile_kernel).splitlines()
    assert len(lines) <= 45
