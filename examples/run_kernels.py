"""Run every acceptance kernel on the default device against its numpy reference.

    python examples/run_kernels.py            # GPU if there is one, else the CPU simulator
    KAIO_DEVICE=sim python examples/run_kernels.py

Each case draws fresh random inputs, poisons its outputs before the launch (NaN for floats, all
ones for integers) so a kernel that skips an element cannot pass, and compares with the reference
at a tolerance chosen by dtype. The tests (tests/kaio/runtime) run the same cases.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from acceptance_kernels import (
    block_sum,
    half_math,
    histogram,
    matmul,
    reference_block_sum,
    reference_half_math,
    reference_histogram,
    reference_matmul,
    reference_saxpy,
    reference_silu_gate,
    reference_vector_add,
    reference_warp_sum,
    saxpy,
    silu_gate,
    vector_add,
    warp_sum,
)

import kaio
from kaio import cdiv

Outcome = tuple[np.ndarray, np.ndarray]  # (what the kernel computed, what numpy computed)


def poisoned(dev: kaio.Device, shape: int | tuple[int, ...], dtype: type | np.dtype) -> kaio.Buffer:
    """An output buffer filled with garbage that no correct kernel leaves behind."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return dev.alloc_from(np.full(shape, np.nan, dtype=dt))
    return dev.alloc_from(np.full(shape, -1).astype(dt))


def normal(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)


def run_vector_add(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    a, b = normal(rng, n), normal(rng, n)
    c = poisoned(dev, n, np.float32)
    vector_add[cdiv(n, 256)](dev.alloc_from(a), dev.alloc_from(b), c, n)
    return c.to_host(), reference_vector_add(a, b)


def run_saxpy(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    x, y = normal(rng, n), normal(rng, n)
    alpha = float(rng.standard_normal())
    out = dev.alloc_from(y)
    saxpy[cdiv(n, 256)](dev.alloc_from(x), out, alpha, n)
    return out.to_host(), reference_saxpy(x, y, alpha)


def run_silu_gate(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    x, gate = normal(rng, n) * 4, normal(rng, n)
    out = poisoned(dev, n, np.float32)
    silu_gate[cdiv(n, 128)](dev.alloc_from(x), dev.alloc_from(gate), out, n)
    return out.to_host(), reference_silu_gate(x, gate)


def run_warp_sum(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    x = normal(rng, n)
    out = dev.zeros(1, np.float32)  # accumulated with atomics: must start at zero
    warp_sum[cdiv(n, 256)](dev.alloc_from(x), out, n)
    return out.to_host(), reference_warp_sum(x)


def run_block_sum(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    x = normal(rng, n)
    blocks = cdiv(n, 256)
    out = poisoned(dev, blocks, np.float32)
    block_sum[blocks](dev.alloc_from(x), out, n)
    return out.to_host(), reference_block_sum(x)


def run_matmul(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    size = max(int(n**0.5) // 2, 2) | 1  # odd: the edge tiles are partial
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    c = poisoned(dev, (size, size), np.float32)
    matmul[cdiv(size, 16), cdiv(size, 16)](dev.alloc_from(a), dev.alloc_from(b), c, size)
    return c.to_host(), reference_matmul(a, b)


def run_histogram(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    data = rng.integers(0, 2**32, n, dtype=np.uint32)
    bins = dev.zeros(64, np.uint32)  # accumulated with atomics
    histogram[min(cdiv(n, 256), 4)](dev.alloc_from(data), bins, n)  # grid-stride loop
    return bins.to_host(), reference_histogram(data)


def run_half_math(dev: kaio.Device, rng: np.random.Generator, n: int) -> Outcome:
    x = rng.uniform(-2, 2, n).astype(np.float16)
    scale = float(np.float16(rng.uniform(0.5, 1.5)))
    y = poisoned(dev, n, np.float16)
    half_math[cdiv(n, 128)](dev.alloc_from(x), y, scale, n)
    return y.to_host(), reference_half_math(x, scale)


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[kaio.Device, np.random.Generator, int], Outcome]
    rtol: float
    atol: float  # absolute tolerance per unit of input size where sums grow with n (see check)
    summed: bool = False  # a reduction: the error bound grows with the number of terms


CASES = (
    Case("vector_add", run_vector_add, 0, 0),  # one correctly rounded add: exact
    Case("saxpy", run_saxpy, 1e-6, 1e-6),  # mul + add or fma: one rounding of difference
    Case("silu_gate", run_silu_gate, 1e-5, 1e-6),
    Case("warp_sum", run_warp_sum, 1e-5, 1e-6, summed=True),
    Case("block_sum", run_block_sum, 1e-5, 1e-6, summed=True),
    Case("matmul", run_matmul, 1e-5, 1e-4),  # dot products of at most a few hundred terms
    Case("histogram", run_histogram, 0, 0),
    Case("half_math", run_half_math, 1e-2, 1e-2),  # f16 arithmetic against an f32 reference
)


def check(case: Case, got: np.ndarray, expected: np.ndarray, n: int) -> tuple[bool, float]:
    """(passed, max abs error); reductions get an absolute bound growing with the term count."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return False, float("inf")
    g, e = got.astype(np.float64), expected.astype(np.float64)
    error = float(np.max(np.abs(g - e))) if g.size else 0.0
    atol = case.atol * (n if case.summed else 1)
    return bool(np.allclose(g, e, rtol=case.rtol, atol=atol, equal_nan=False)), error


def main(n: int = 4099) -> int:
    dev = kaio.Device()
    rng = np.random.default_rng()
    print(f"device: {dev!r}, {dev.name} ({dev.arch})")
    print(
        f"{'kernel':<12} {'result':<6} {'max abs err':>12} {'first launch':>13} {'next launch':>12}"
    )
    failures = 0
    for case in CASES:
        start = time.perf_counter()
        got, expected = case.run(dev, rng, n)  # includes compile + load
        first = time.perf_counter() - start
        start = time.perf_counter()
        got, expected = case.run(dev, rng, n)  # fresh inputs, compiled kernel
        dev.synchronize()
        again = time.perf_counter() - start
        ok, error = check(case, got, expected, n)
        failures += not ok
        print(
            f"{case.name:<12} {'ok' if ok else 'FAIL':<6} {error:>12.3g} "
            f"{first * 1e3:>10.1f} ms {again * 1e3:>9.1f} ms"
        )
    print("all kernels match numpy" if not failures else f"{failures} kernel(s) differ from numpy")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4099))
