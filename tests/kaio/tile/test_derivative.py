"""``kaio.frontend.derivative``: a device function's derivative by one parameter,
compiled into a tile kernel and run on the simulator against the analytic derivative in numpy
(fresh random inputs, outputs poisoned); and the constructs it refuses, each named at its line."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.errors import KaioCompileError
from kaio.frontend.derivative import derivative
from kaio.prelude import Array, MutArray, exp2, f32, fma, i32

from .conftest import poisoned

N = 256


def run(fn, x, idx, bias):
    """``fn(x, idx, bias)`` and its derivative by x, element by element."""
    value_fn, slope_fn = kaio.device(fn), derivative(fn, "x")

    @kaio.tile_kernel(num_warps=4)
    def apply(xs: Array[f32], idxs: Array[i32], bias: Array[f32], value: MutArray[f32], slope: MutArray[f32], n: i32,
              BLOCK: kaio.constexpr = N):  # fmt: skip
        t = kt.load(xs, (0,), (BLOCK,), (n,))
        i = kt.load(idxs, (0,), (BLOCK,), (n,))
        v, d = value_fn(t, i, bias), slope_fn(t, i, bias)
        kt.store(value, (0,), v, (n,))
        kt.store(slope, (0,), d, (n,))

    dev = kaio.Device("sim")
    out_v, out_d = poisoned(dev, (N,), np.float32), poisoned(dev, (N,), np.float32)
    apply.launch(dev, dev.alloc_from(x), dev.alloc_from(idx), dev.alloc_from(bias), out_v, out_d, N, grid=(1,))
    return out_v.to_host(), out_d.to_host()


def tanh_cap(x, i, bias):
    return 2.5 * kt.tanh(x / 2.5)


def branchy(x, i, bias):
    y = x * x
    if i > 3:  # a branch of the index: each side its own derivative
        y = kt.exp(x) + bias[i]
    z = kt.where(x > 0.0, y, -x)
    z += kt.maximum(x, 0.5) / (1.0 + x * x)
    return kt.log(z + 10.0) + kt.sqrt(x * x + 1.0) ** 3


def mixed(x, i, bias):
    a = fma(x, bias[i], 1.0)
    b = exp2(a * 0.25) - kt.rsqrt(x * x + 2.0)
    c = kt.minimum(a, b) * f32(i) + kt.sin(x) * kt.cos(x)
    return c / (2.0 + kt.abs(x)) - bias[i] if i < 7 else abs(x)


def constant(x, i, bias):
    return bias[i] * 2.0


CASES = {
    "tanh_cap": (tanh_cap, lambda x, i, b: 2.5 * np.tanh(x / 2.5), lambda x, i, b: 1 - np.tanh(x / 2.5) ** 2),
    "branchy": (branchy, None, None),
    "mixed": (mixed, None, None),
    "constant": (constant, lambda x, i, b: b[i] * 2.0, lambda x, i, b: 0 * x),
}


def _branchy(x, i, b):
    y = np.where(i > 3, np.exp(x) + b[i], x * x)
    dy = np.where(i > 3, np.exp(x), 2 * x)
    z = np.where(x > 0, y, -x) + np.maximum(x, 0.5) / (1 + x * x)
    dz = np.where(x > 0, dy, -1.0) + (np.where(x >= 0.5, 1.0, 0.0) * (1 + x * x) - np.maximum(x, 0.5) * 2 * x) / (1 + x * x) ** 2
    r = np.sqrt(x * x + 1)
    return np.log(z + 10) + r**3, dz / (z + 10) + 3 * r**2 * x / r


def _mixed(x, i, b):
    a, da = x * b[i] + 1, b[i]
    bb = 2 ** (a / 4) - 1 / np.sqrt(x * x + 2)
    dbb = 2 ** (a / 4) * np.log(2) * da / 4 + x * (x * x + 2) ** -1.5
    c = np.minimum(a, bb) * i + np.sin(x) * np.cos(x)
    dc = np.where(a <= bb, da, dbb) * i + np.cos(x) ** 2 - np.sin(x) ** 2
    den = 2 + np.abs(x)
    v = c / den - b[i]
    dv = dc / den - c * np.sign(x) / den**2
    return np.where(i < 7, v, np.abs(x)), np.where(i < 7, dv, np.sign(x))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_derivative_matches_the_analytic_one(name, rng):
    fn, value, slope = CASES[name]
    if name == "branchy":
        value, slope = (lambda *a: _branchy(*a)[0]), (lambda *a: _branchy(*a)[1])
    if name == "mixed":
        value, slope = (lambda *a: _mixed(*a)[0]), (lambda *a: _mixed(*a)[1])
    x = (rng.standard_normal(N) * 2).astype(np.float32)
    x[np.abs(x) < 1e-3] = 0.5  # off abs's kink
    idx = rng.integers(0, 10, N).astype(np.int32)
    bias = rng.standard_normal(10).astype(np.float32)
    got_v, got_d = run(fn, x, idx, bias)
    xd, bd = x.astype(np.float64), bias.astype(np.float64)
    want_v, want_d = value(xd, idx, bd), slope(xd, idx, bd)
    np.testing.assert_allclose(got_v, want_v, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(got_d, want_d, rtol=2e-3, atol=2e-3)


def looped(x, i, bias):
    for _ in range(2):
        x = x * 2.0
    return x


def floored(x, i, bias):
    return f32(i32(x))


def gathered(x, i, bias):
    return bias[i32(x)]


def helper_call(x, i, bias):
    return tanh_twice(x)


@kaio.device
def tanh_twice(x):
    return kt.tanh(kt.tanh(x))


def reduced(x, i, bias):
    return kt.max(x, 0)


@pytest.mark.parametrize(
    ("fn", "construct"),
    [(looped, "a loop"), (floored, "the integer cast `i32(x)`"), (gathered, "a load indexed by the parameter"),
     (helper_call, "the call `tanh_twice(...)`"), (reduced, "the call `kt.max(...)`")],  # fmt: skip
)
def test_what_cannot_be_derived_is_named_at_its_line(fn, construct):
    with pytest.raises(KaioCompileError) as err:
        derivative(fn, "x")
    assert construct in str(err.value)
    assert "test_derivative.py" in str(err.value)


def test_a_missing_parameter_is_named():
    with pytest.raises(KaioCompileError, match="no parameter `score`"):
        derivative(tanh_cap, "score")
