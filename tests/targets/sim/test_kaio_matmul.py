"""kaio's own tensor-core matmul (ops_library, default config: 128 x 128 x 32 CTA tiles, 2 x 2
warps, 3-stage cp.async ring, XOR-swizzled shared tiles) compiled to PTX and run directly on the
simulator against float64 numpy, with its memory metrics."""

from __future__ import annotations

import math

import kaio
import numpy as np
import pytest

from .conftest import Device, check_ptx, rel_error


def compile_matmul(align: tuple[int, int, int], divisor: int = 16):  # type: ignore[no-untyped-def]
    """The kernel for base addresses aligned to ``align`` bytes and m, n, k multiples of
    ``divisor`` (what a launch would specialize on; these tests launch the PTX directly)."""
    from kaio import dtypes
    from kaio.ops_library.matmul_kernel import MatmulKernel
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG

    divisible = tuple((name, divisor) for name in "mnk") if divisor > 1 else ()
    spec = MatmulKernel(dtypes.f16, dtypes.f32, align, DEFAULT_CONFIG, divisible=divisible)
    kernel = kaio.compile(spec, "sm_80")
    check_ptx(kernel.ptx)
    return kernel


@pytest.fixture(scope="module")
def compiled():  # type: ignore[no-untyped-def]
    return compile_matmul((16, 16, 16), 8)


def run_matmul(sim, compiled, rng, m: int, n: int, k: int, alpha: float, beta: float, profile: bool = False):  # type: ignore[no-untyped-def]
    dev = Device(sim)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    bufs = [dev.array(a), dev.array(b), dev.array(c0)]
    values = [bufs[0].address, bufs[1].address, bufs[2].address, bufs[2].address, m, n, k, alpha, beta]
    params = [p.pack(v) for p, v in zip(compiled.params, values)]
    grid = (math.ceil(m / 128) * math.ceil(n / 128), 1, 1)
    report = sim.load(compiled.ptx).launch(compiled.name, grid, compiled.block_size, params, profile=profile)
    want = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c0.astype(np.float64)
    return rel_error(dev.read(bufs[2]), want), report


def test_kaio_matmul_128_cube(sim, compiled, rng):
    error, report = run_matmul(sim, compiled, rng, 128, 128, 128, 1.0, 0.0, profile=True)
    assert error <= 1e-2
    # swizzled tiles: ldmatrix and the cp.async writes into shared memory are conflict-free
    assert report.shared_totals("ldmatrix").ways == 1.0
    assert report.shared_totals("cp.async write").ways == 1.0
    copies = [r for r in report.global_memory if r.text.startswith("cp.async")]
    assert copies and all(r.efficiency == 1.0 for r in copies)
    assert report.by_category["tensor core"] == 128 * 64 * 4  # 64 mma per warp per K step


def test_kaio_matmul_ragged_with_alpha_beta(sim, compiled, rng):
    error, _ = run_matmul(sim, compiled, rng, 200, 136, 72, 1.5, 0.5)
    assert error <= 1e-2


def test_kaio_matmul_unaligned_rows(sim, rng):
    # rows aligned to one element only: no 16-byte cp.async, element loads instead
    compiled = compile_matmul((2, 2, 4), 1)
    error, report = run_matmul(sim, compiled, rng, 37, 29, 19, 1.0, 1.0, profile=True)
    assert error <= 1e-2
    assert "cp.async" not in report.by_class and report.by_category["tensor core"] > 0
