"""dropout and dropout_add on the simulator: the mask is Triton's random numbers (kaio.random,
checked against Triton itself in tests/kaio/frontend/test_random_builtins.py), the kept fraction
is within 3 sigma of 1 - p, the backward regenerates the same mask, p = 0 and training=False
drop nothing, and bad p, seeds and shapes are named. Fresh random inputs, outputs poisoned."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kaio
import kaio.random as kr
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import dropout, dropout_add

from .conftest import DTYPES

torch = pytest.importorskip("torch")


def mask(seed: int, shape: tuple[int, ...], p: float) -> np.ndarray:
    return kr.rand(seed, np.arange(math.prod(shape), dtype=np.int32)).reshape(shape) > np.float32(p)


def reference(x: np.ndarray, p: float, seed: int, residual: np.ndarray | None = None) -> np.ndarray:
    """f32 math, rounded to x's type once: where(keep, x * f32(1 / (1 - p)), 0) (+ residual)."""
    y = np.where(mask(seed, x.shape, p), x.astype(np.float32) * np.float32(1.0 / (1.0 - p)), np.float32(0))
    if residual is not None:
        y = y + residual.astype(np.float32)
    return y.astype(x.dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(1,), (3, 1000), (2, 3, 700)])  # partial last programs
def test_the_mask_is_the_seeds_and_the_values_are_scaled(rng, poison, dtype, shape):
    x = rng.standard_normal(shape).astype(DTYPES[dtype])
    seed, p = int(rng.integers(2**64, dtype=np.uint64)), float(rng.uniform(0.05, 0.9))
    got = dropout(x, p, seed)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, reference(x, p, seed))
    r = rng.standard_normal(shape).astype(DTYPES[dtype])
    np.testing.assert_array_equal(dropout_add(x, r, p, seed), reference(x, p, seed, r))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_kept_fraction_is_within_three_sigma(rng, p):
    n = 1 << 16
    x = np.ones(n, np.float32)
    kept = np.count_nonzero(dropout(x, p, int(rng.integers(2**63))))
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(kept - n * (1 - p)) <= 3 * sigma, (kept, n * (1 - p), sigma)


def test_other_seeds_give_other_masks_and_the_same_seed_the_same(rng):
    x = rng.standard_normal(4096).astype(np.float32)
    a, b, c = dropout(x, 0.5, 1), dropout(x, 0.5, 2), dropout(x, 0.5, 1)
    assert np.array_equal(a, c) and not np.array_equal(a, b)
    assert np.array_equal(dropout(x, 0.5, 2**64 + 1), a), "seeds are taken modulo 2**64"


def test_the_backward_regenerates_the_forwards_mask(rng):
    x = torch.from_numpy(rng.standard_normal((4, 300)).astype(np.float32)).requires_grad_()
    r = torch.from_numpy(rng.standard_normal((4, 300)).astype(np.float32)).requires_grad_()
    seed, p = 2**40 + 17, 0.3
    y = dropout_add(x, r, p, seed)
    g = torch.from_numpy(rng.standard_normal((4, 300)).astype(np.float32))
    y.backward(g)
    keep = torch.from_numpy(mask(seed, (4, 300), p))
    torch.testing.assert_close(x.grad, torch.where(keep, g * np.float32(1 / (1 - p)), 0.0), rtol=0, atol=0)
    torch.testing.assert_close(r.grad, g, rtol=0, atol=0)
    assert torch.equal(y.detach() != r.detach(), keep), "forward and backward drop the same elements"
    x.grad = None
    dropout(x, p, seed).sum().backward()
    torch.testing.assert_close(x.grad, torch.where(keep, np.float32(1 / (1 - p)), 0.0), rtol=0, atol=0)


def test_p_zero_and_evaluation_drop_nothing(rng):
    x = rng.standard_normal((3, 50)).astype(np.float16)
    r = rng.standard_normal((3, 50)).astype(np.float16)
    assert dropout(x, 0.0, 5) is x and dropout(x, 0.5, 5, training=False) is x
    np.testing.assert_array_equal(dropout_add(x, r, 0.0, 5), (x.astype(np.float32) + r).astype(np.float16))
    np.testing.assert_array_equal(dropout_add(x, r, 0.7, 5, training=False), (x.astype(np.float32) + r).astype(np.float16))
    t = torch.from_numpy(x.astype(np.float32)).requires_grad_()
    dropout_add(t, torch.from_numpy(r.astype(np.float32)), 0.0, 5).sum().backward()
    assert torch.equal(t.grad, torch.ones_like(t))


def test_a_torch_generator_gives_the_seed(rng):
    x = torch.from_numpy(rng.standard_normal(2000).astype(np.float32))
    a = dropout(x, 0.5, torch.Generator().manual_seed(3))
    b = dropout(x, 0.5, torch.Generator().manual_seed(3))
    c = dropout(x, 0.5, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    g = torch.Generator().manual_seed(3)
    first, second = dropout(x, 0.5, g), dropout(x, 0.5, g)
    assert not torch.equal(first, second), "each call draws a new seed"


def test_buffers_in_buffers_out(rng):
    dev = kaio.Device("sim")
    x = rng.standard_normal(3000).astype(np.float32)
    got = dropout(dev.alloc_from(x), 0.2, 9)
    assert isinstance(got, kaio.Buffer) and np.array_equal(got.to_host(), reference(x, 0.2, 9))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x: dropout(x, 1.0, 1), KaioValueError, r"`p` must be a number in \[0, 1\), got 1.0"),
        (lambda x: dropout(x, -0.1, 1), KaioValueError, "got -0.1"),
        (lambda x: dropout(x, "0.5", 1), KaioValueError, "got '0.5'"),
        (lambda x: dropout(x, True, 1), KaioValueError, "got True"),
        (lambda x: dropout(x, 0.5, 1.5), KaioTypeError, "`seed` must be an integer or a torch.Generator, got float"),
        (lambda x: dropout(x, 0.5, None), KaioTypeError, "got NoneType"),
        (lambda x: dropout_add(x, x[:, :3], 0.5, 1), KaioTypeError, r"`residual` must have shape \(2, 4\)"),
        (lambda x: dropout_add(x, x.astype(np.float16), 0.5, 1), KaioTypeError, "`residual` is f16 but `x` is f32"),
        (lambda x: dropout(x.astype(np.int32), 0.5, 1), KaioTypeError, "`x` must be f16, bf16 or f32, got i32"),
    ],
)
def test_bad_inputs_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call(np.ones((2, 4), np.float32))


def test_opaque_to_torch_compile(rng):
    x = torch.from_numpy(rng.standard_normal((8, 64)).astype(np.float32))
    f = torch.compile(lambda x: dropout(x, 0.25, 77) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(f(x), torch.from_numpy(reference(x.numpy(), 0.25, 77)) * 2, rtol=0, atol=0)
