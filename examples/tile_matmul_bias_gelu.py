"""A tensor-core matmul with bias and GELU fused into its epilogue, written as a tile kernel:
``c = gelu(a @ b + bias)``, f16 in, f32 accumulation, f32 or f16 out.

    python examples/tile_matmul_bias_gelu.py

One program computes a BM x BN tile of C. It walks K in BK steps, each loading a BM x BK tile
of A and a BK x BN tile of B and accumulating ``kt.dot`` into an f32 tile; then it adds the
bias (a BN tile broadcast over the rows), applies GELU (tanh form) and stores C once. The
compiler does the rest: the A and B tiles are staged in shared memory through a 3-stage
``cp.async`` ring (``num_stages=3``) and the dot runs as ``ldmatrix`` + ``mma.sync`` on tensor
cores. Edge tiles are masked by the bounds, so m, n, k need not be multiples of the tiles.
Runs on the first CUDA GPU when the driver is present, else on kaio's CPU simulator of PTX.
"""

from functools import cache
from typing import Any

import numpy as np

import kaio
import kaio.tile as kt
from kaio.dtypes import ScalarType
from kaio.prelude import Array, MutArray, f16, f32, i32, tanh

SQRT_2_OVER_PI = 0.7978845608028654


@cache
def matmul_bias_gelu_kernel(OUT: ScalarType) -> Any:  # noqa: N803
    """The kernel writing C as ``OUT`` (f32 or f16): one tile kernel per output type."""

    @kaio.tile_kernel(num_warps=4, num_stages=3)
    def matmul_bias_gelu(a: Array[f16], b: Array[f16], bias: Array[f16], c: MutArray[OUT],
                         m: i32, n: i32, k: i32,
                         BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 32):  # fmt: skip
        m0 = i32(kt.program_id(0)) * BM
        n0 = i32(kt.program_id(1)) * BN
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, BK):  # the loop carries the accumulator tile
            a_tile = kt.load(a, (m0, k0), (BM, BK), (m, k))  # 0 past the edges of A
            b_tile = kt.load(b, (k0, n0), (BK, BN), (k, n))
            acc = kt.dot(a_tile, b_tile, acc)  # acc + a_tile @ b_tile, on tensor cores
        acc = acc + f32(kt.load(bias, (n0,), (BN,), (n,)))  # (BM, BN) + (BN,): one bias per column
        acc = 0.5 * acc * (1.0 + tanh(SQRT_2_OVER_PI * (acc + 0.044715 * acc * acc * acc)))
        kt.store(c, (m0, n0), OUT(acc), (m, n))

    return matmul_bias_gelu


matmul_bias_gelu = matmul_bias_gelu_kernel(f32)
matmul_bias_gelu_f16 = matmul_bias_gelu_kernel(f16)


def run(dev: kaio.Device, a: np.ndarray, b: np.ndarray, bias: np.ndarray, out: type = np.float32,
        block: tuple[int, int, int] = (64, 64, 32)) -> np.ndarray:  # fmt: skip
    """``gelu(a @ b + bias)`` computed by the kernel on ``dev`` (the output poisoned first)."""
    (m, k), (_, n) = a.shape, b.shape
    kernel = matmul_bias_gelu if out == np.float32 else matmul_bias_gelu_f16
    c = dev.alloc_from(np.full((m, n), np.nan, dtype=out))
    bm, bn, bk = block
    grid = (kaio.cdiv(m, bm), kaio.cdiv(n, bn))
    args = (dev.alloc_from(a), dev.alloc_from(b), dev.alloc_from(bias), c, m, n, k)
    kernel[grid](*args, BM=bm, BN=bn, BK=bk)
    return c.to_host()


def reference(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    x = a.astype(np.float32) @ b.astype(np.float32) + bias.astype(np.float32)
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


def main() -> None:
    dev = kaio.Device()  # the GPU, or the simulator (it says so once on stderr)
    rng = np.random.default_rng()
    m, n, k = 100, 72, 80  # none a multiple of the 64x64x32 tiles: edge tiles are masked
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float16)
    c = run(dev, a, b, bias)
    matches = np.allclose(c, reference(a, b, bias), rtol=1e-2, atol=1e-2)
    assert matches, "tile matmul+bias+gelu does not match numpy"
    print(f"tile matmul+bias+gelu of {m}x{k} @ {k}x{n} (f16 -> f32) on {dev.name}: matches numpy")


if __name__ == "__main__":
    main()
