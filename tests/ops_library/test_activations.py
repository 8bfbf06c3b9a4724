"""kaio.ops_library.silu_and_mul / gelu_and_mul on the simulator against float64 numpy."""

import math

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import gelu_and_mul, silu_and_mul

from .conftest import DTYPES, TOL, f64, rel, rows_for, sweep

torch = pytest.importorskip("torch")
erf = np.vectorize(math.erf)


def silu_ref(x):
    a, g = np.split(f64(x), 2, axis=-1)
    return a / (1 + np.exp(-a)) * g


def gelu_ref(x, approximate="none"):
    a, g = np.split(f64(x), 2, axis=-1)
    if approximate == "tanh":
        return 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))) * g
    return 0.5 * a * (1 + erf(a / math.sqrt(2))) * g


def gelu_close(got, x, tol, approximate="none"):
    """Norm-relative error within ``tol``, plus what f32 arithmetic must lose: for a << 0,
    1 + erf(a / sqrt(2)) cancels to a few f32 ulps of 1 (as torch's f32 GELU does), an absolute
    error of about eps_f32 * |a * g / 2|; with every a that negative (d = 1, 3 rows) the output
    is all such tiny values."""
    want = gelu_ref(x, approximate)
    a, g = np.split(f64(x), 2, axis=-1)
    err = np.linalg.norm(np.asarray(got, np.float64) - want)
    return err <= tol * np.linalg.norm(want) + 4 * np.finfo(np.float32).eps * np.linalg.norm(a * g / 2)


@pytest.mark.parametrize("dtype, d", sweep())
def test_gated_activations_match_float64(rng, poison, dtype, d):
    x = (3 * rng.standard_normal((rows_for(d), 2 * d))).astype(DTYPES[dtype])
    got = silu_and_mul(x)
    assert got.dtype == x.dtype and got.shape == (x.shape[0], d)
    assert rel(got, silu_ref(x)) <= TOL[dtype]
    assert gelu_close(gelu_and_mul(x), x, TOL[dtype])
    if d == 64:
        assert gelu_close(gelu_and_mul(x, approximate="tanh"), x, TOL[dtype], "tanh")


def test_gelu_far_below_zero_is_within_what_f32_keeps():
    """The inputs of a CI failure (seed 2313415690): every a below -4.9, outputs near 1e-6."""
    x = np.array([[-4.99, 4.406], [-5.258, -0.6562], [-6.277, -0.4849]], np.float16)
    assert gelu_close(gelu_and_mul(x), x, TOL["f16"])


def test_the_erf_form_keeps_its_accuracy_far_from_zero(poison):
    x = np.concatenate([np.linspace(-9, 9, 64), np.ones(64)]).astype(np.float32)[None, :]
    got, want = gelu_and_mul(x)[0], gelu_ref(x)[0]
    assert np.abs(got - want).max() <= 1e-6


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_misaligned_torch_views_with_leading_dims(poison, dtype):
    x = torch.randn(2 * 3 * 48 + 1).to(dtype)[1:].view(2, 3, 48)
    assert x.data_ptr() % 16
    got = silu_and_mul(x)
    assert isinstance(got, torch.Tensor) and got.shape == (2, 3, 24) and got.dtype == dtype
    want = torch.nn.functional.silu(x[..., :24].double()) * x[..., 24:].double()
    assert rel(got, want.numpy()) <= TOL["f16" if dtype == torch.float16 else "f32"]


def test_buffers_in_buffers_out(rng):
    dev = kaio.Device("sim")
    x = rng.standard_normal((3, 16)).astype(np.float32)
    got = gelu_and_mul(dev.alloc_from(x))
    assert isinstance(got, kaio.Buffer) and rel(got.to_host(), gelu_ref(x)) <= 1e-5


def test_bad_inputs_are_named():
    with pytest.raises(KaioTypeError, match="last dim of `x` must be even"):
        silu_and_mul(np.ones((2, 5), np.float32))
    with pytest.raises(KaioTypeError, match="`approximate` is 'none' or 'tanh'"):
        gelu_and_mul(np.ones((2, 4), np.float32), approximate="erf")
    with pytest.raises(KaioTypeError, match="`x` must be f16, bf16 or f32"):
        silu_and_mul(np.ones((2, 4), np.float64))
