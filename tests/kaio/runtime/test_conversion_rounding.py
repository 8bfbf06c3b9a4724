"""Conversions to bf16/f16 round once, to nearest even, on every arch.

Before sm_90 there is no cvt to bf16 from integers or f64, so kaio goes through f32; rounding to
nearest twice (to f32, then to bf16) is wrong for values just off a bf16 halfway point:
i32 1077936129 = 2**30 + 2**22 + 1 is just above the halfway point between two bf16 values and
must round up, but in f32 it becomes exactly 2**30 + 2**22, which then ties to even, down.
(ml_dtypes' own casts from int/f64 round twice too, so the reference here rounds by hand.)
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import ml_dtypes
import numpy as np
import pytest

import kaio

from ...fuzz.semantics import round_to

KERNELS = """
@kaio.gpu_kernel(block_size=64)
def to_bf16(a: Array[i32], b: Array[i64], c: Array[u32], d: Array[u64], e: Array[f64],
            out: MutArray[bf16], n: u32):
    i = thread_idx_x()
    if i < n:
        out[5 * i] = bf16(a[i])
        out[5 * i + 1] = bf16(b[i])
        out[5 * i + 2] = bf16(c[i])
        out[5 * i + 3] = bf16(d[i])
        out[5 * i + 4] = bf16(e[i])


@kaio.gpu_kernel(block_size=64)
def to_f16(e: Array[f64], out: MutArray[f16], n: u32):
    i = thread_idx_x()
    if i < n:
        out[i] = f16(e[i])
"""



HALFWAY_PLUS_ONE = 2**30 + 2**22 + 1  # the 1077936129


def _cases(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = 64
    # Values a few units off bf16 halfway points at many magnitudes, and random ones.
    mags = rng.integers(8, 31, n)
    off = rng.integers(-2, 3, n)
    i32 = ((1 << mags) + (1 << (mags - 8)) + off).astype(np.int64)
    i32[0] = HALFWAY_PLUS_ONE
    i32[1::2] *= -1
    i64 = i32 << rng.integers(0, 32, n)
    i64[2] = (1 << 62) + (1 << 54) + 1
    e = i32.astype(np.float64) * 2.0 ** rng.integers(-140, 100, n).astype(np.float64)
    e[3] = 1 + 2**-8 + 2**-40  # just above a halfway point: rounds up
    return {
        "a": i32.astype(np.int32),
        "b": i64.astype(np.int64),
        "c": np.abs(i32).astype(np.uint32),
        "d": np.abs(i64).astype(np.uint64) * np.uint64(2),
        "e": e,
    }


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_bf16_from_integers_and_f64_rounds_once(
    arch: str, load_kernels: Callable[[str], ModuleType], rng: np.random.Generator
) -> None:
    m = load_kernels(KERNELS)
    dev = kaio.Device("sim", arch=arch)
    cases = _cases(rng)
    n = len(cases["a"])
    out = dev.zeros(5 * n, ml_dtypes.bfloat16)
    m.to_bf16.launch(dev, *(dev.alloc_from(cases[k]) for k in "abcde"), out, n, grid=1)
    got = out.to_host().reshape(n, 5).view(np.uint16)
    for col, key in enumerate("abcde"):
        values = cases[key]
        want = [
            np.array([round_to(float(v) if key == "e" else int(v), "bf16")]).view(np.uint16)[0]
            for v in values
        ]
        bad = [(int(v) if key != "e" else float(v)) for v, g, w in zip(values, got[:, col], want) if g != w]
        assert not bad, f"{key}: {bad[:4]}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_f16_from_f64_rounds_once(arch: str, load_kernels: Callable[[str], ModuleType]) -> None:
    m = load_kernels(KERNELS)
    dev = kaio.Device("sim", arch=arch)
    e = np.array([1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 2049 + 2**-30, 65519.99, 6e-8], np.float64)
    out = dev.zeros(len(e), np.float16)
    m.to_f16.launch(dev, dev.alloc_from(e), out, len(e), grid=1)
    assert out.to_host().view(np.uint16).tolist() == e.astype(np.float16).view(np.uint16).tolist()
