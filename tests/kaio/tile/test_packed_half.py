"""Packed f16x2/bf16x2 arithmetic in tile maps (``passes/to_ptx/half_pairs.py``): bit-identical
to the one-register lowering and to numpy, special values included, on sm_80 (bf16 add/sub/mul
by fma) and sm_90 (native bf16x2 add/sub/mul)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.passes.to_ptx import half_pairs
from kaio.prelude import Array, MutArray, abs, bf16, f16, f32, fma, i32  # noqa: A004

from ...fuzz.semantics import round_to
from .conftest import poisoned

TYPES = {"f16": (f16, np.float16), "bf16": (bf16, ml_dtypes.bfloat16)}
NAMES = ["add", "sub", "mul", "fma", "maximum", "minimum", "neg", "abs", "narrowed", "scaled", "shared", "reused"]


def make_kernel(T):  # noqa: N803
    """A fresh kernel object (no in-memory compile cache shared between the two lowerings)."""

    @kaio.tile_kernel(num_warps=2)
    def packed(a: Array[T], b: Array[T], c: Array[T], o0: MutArray[T], o1: MutArray[T], o2: MutArray[T],
               o3: MutArray[T], o4: MutArray[T], o5: MutArray[T], o6: MutArray[T], o7: MutArray[T],
               o8: MutArray[T], o9: MutArray[T], o10: MutArray[T], o11: MutArray[T], n: i32,
               BLOCK: kaio.constexpr = 512):  # fmt: skip
        s = i32(kt.program_id(0)) * BLOCK
        x = kt.load(a, (s,), (BLOCK,), (n,))
        y = kt.load(b, (s,), (BLOCK,), (n,))
        z = kt.load(c, (s,), (BLOCK,), (n,))
        kt.store(o0, (s,), x + y, (n,))
        kt.store(o1, (s,), x - y, (n,))
        kt.store(o2, (s,), x * y, (n,))
        kt.store(o3, (s,), fma(x, y, z), (n,))
        kt.store(o4, (s,), kt.maximum(x, y), (n,))
        kt.store(o5, (s,), kt.minimum(x, y), (n,))
        kt.store(o6, (s,), -x, (n,))
        kt.store(o7, (s,), abs(x), (n,))
        kt.store(o8, (s,), T(f32(x) * f32(y)), (n,))  # one rounding: the half multiply
        kt.store(o9, (s,), T(f32(x) * 0.375 + f32(z)), (n,))  # f32 math, converted two at a time
        w = x * y - z  # used twice: computed once, kept packed
        kt.store(o10, (s,), w, (n,))
        kt.store(o11, (s,), w + x, (n,))

    return packed


def special_values(rng, dtype, n):
    x = (rng.standard_normal(n) * 4).astype(dtype)
    picks = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-7, -3e-6, 60000.0, -65504.0, 1.0], np.float32)
    mask = rng.random(n) < 0.15
    x[mask] = picks[rng.integers(0, len(picks), mask.sum())].astype(dtype)
    return x


def reference(name, x, y, z, dtype):
    x32, y32, z32 = (v.astype(np.float32) for v in (x, y, z))
    with np.errstate(all="ignore"):
        exact = {
            "add": x32 + y32, "sub": x32 - y32, "mul": x32 * y32, "neg": -x32, "abs": np.abs(x32),
            "maximum": np.fmax(x32, y32), "minimum": np.fmin(x32, y32), "narrowed": x32 * y32,
            "scaled": (x32 * np.float32(0.375)).astype(np.float32) + z32,
        }  # fmt: skip
        if name == "fma":  # exact in f64, then rounded once (numpy would round via f32 twice)
            return round_once(x.astype(np.float64) * y.astype(np.float64) + z.astype(np.float64), dtype)
        if name in ("shared", "reused"):
            w = (x32 * y32).astype(dtype).astype(np.float32) - z32
            w = w.astype(dtype)
            return w if name == "shared" else (w.astype(np.float32) + x32).astype(dtype)
        return exact[name].astype(dtype)


def round_once(v: np.ndarray, dtype) -> np.ndarray:
    """f64 values rounded once to the 16-bit type (numpy's bf16 cast goes through f32: twice)."""
    name = "bf16" if dtype == ml_dtypes.bfloat16 else "f16"
    return np.array([round_to(float(e), name) for e in v], dtype)


def run(dev, kernel, x, y, z, dtype):
    n = x.size
    outs = [poisoned(dev, (n,), dtype) for _ in NAMES]
    kernel[kaio.cdiv(n, 512)](dev.alloc_from(x), dev.alloc_from(y), dev.alloc_from(z), *outs, n)
    return [o.to_host() for o in outs]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("n", [1024, 1003])  # whole vectors; a ragged end (element accesses)
def test_packed_maps_match_the_scalar_lowering_and_numpy(monkeypatch, rng, arch, dtype, n):
    monkeypatch.setenv("KAIO_CACHE", "0")
    T, npt = TYPES[dtype]
    dev = kaio.Device("sim", arch=arch)
    x, y, z = (special_values(rng, npt, n) for _ in range(3))
    x[0], y[0], z[0] = 2.125, 4.25, 1e-7  # bf16 fma: a tie of x * y broken by a tiny z
    kernel = make_kernel(T)
    text = kaio.compile(kernel, arch, __divisible__=(("n", 16 if n % 16 == 0 else 1),)).ptx
    x2 = f"{dtype}x2"
    for form in ("max", "min", "fma.rn"):
        assert f"{form}.{x2}" in text or f"{form}.NaN.{x2}" in text, form
    if dtype == "f16" or arch == "sm_90":
        assert f"add.rn.{x2}" in text and f"sub.rn.{x2}" in text and f"mul.rn.{x2}" in text
    assert f"cvt.rn.{x2}.f32" in text
    packed = run(dev, kernel, x, y, z, npt)
    monkeypatch.setattr(half_pairs, "ENABLED", False)
    scalar_kernel = make_kernel(T)
    assert f".{x2}" not in kaio.compile(scalar_kernel, arch, __divisible__=(("n", 16 if n % 16 == 0 else 1),)).ptx
    scalar = run(dev, scalar_kernel, x, y, z, npt)
    for name, p, s in zip(NAMES, packed, scalar, strict=True):
        # bit for bit, but any NaN for a NaN: which input's NaN an op passes on (and the sign of
        # a NaN made from 0 * inf) is not the same for every instruction form
        same = (p.view(np.uint16) == s.view(np.uint16)) | (np.isnan(p.astype(np.float32)) & np.isnan(s.astype(np.float32)))
        assert same.all(), name
        want = reference(name, x, y, z, npt)
        ok = (p.view(np.uint16) == want.view(np.uint16)) | (np.isnan(p.astype(np.float32)) & np.isnan(want.astype(np.float32)))
        if name in ("maximum", "minimum"):  # numpy orders -0 and +0 either way
            ok |= (p.astype(np.float32) == 0) & (want.astype(np.float32) == 0)
        assert ok.all(), (name, np.flatnonzero(~ok)[:5], x[~ok][:5], y[~ok][:5], p[~ok][:5], want[~ok][:5])


@kaio.device
def plus_column_bias(s, col, bias):
    return s + bias[col]


@kaio.tile_kernel(num_warps=4, num_stages=0)
def scores_with_a_gathered_bias_times_b(a: Array[f16], b: Array[f16], bias: Array[f32], out: MutArray[f32],
                                        BM: kaio.constexpr = 32, BD: kaio.constexpr = 32):  # fmt: skip
    qb = kt.load(a, (0, 0), (BM, BD), (BM, BD))
    kb = kt.load(b, (0, 0), (BM, BD), (BM, BD))
    s = kt.dot(qb, kt.trans(kb), kt.zeros((BM, BM), f32))
    cols = kt.expand_dims(kt.arange(BM), 0)
    p = f16(plus_column_bias(s, cols, bias))  # one map: a load per element, narrowed in pairs
    kt.store(out, (0, 0), kt.dot(p, kb, kt.zeros((BM, BD), f32)), (BM, BD))


def test_a_map_that_loads_by_each_lanes_own_index_in_pairs(rng):
    """Packed in pairs (the f16 results go to shared memory as words), the map's load is
    lowered once per lane; its address reads through the i64 index to the i32 column, which
    must be this lane's, not the last lowered one's (both lanes once loaded column + 1)."""
    a, b = (rng.standard_normal((32, 32)).astype(np.float16) for _ in range(2))
    bias = rng.standard_normal(32).astype(np.float32)
    dev = kaio.Device("sim")
    out = poisoned(dev, (32, 32), np.float32)
    scores_with_a_gathered_bias_times_b.launch(dev, dev.alloc_from(a), dev.alloc_from(b), dev.alloc_from(bias), out, grid=(1,))
    p = (a.astype(np.float64) @ b.astype(np.float64).T + bias[None, :]).astype(np.float16)
    np.testing.assert_allclose(out.to_host(), p.astype(np.float64) @ b.astype(np.float64), atol=2e-3, rtol=1e-3)
