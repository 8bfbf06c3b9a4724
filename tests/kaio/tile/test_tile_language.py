"""The tile language on the simulator against numpy: loads and stores (block, masked, strided,
gather/scatter), broadcasting, reductions along each axis, dots (with kt.trans, on tensor
cores and FMAs), control flow carrying tiles. Fresh random inputs, poisoned outputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, bf16, exp, f16, f32, i32, u32

from .conftest import poisoned

# --------------------------------------------------------------------------- kernels


@kaio.tile_kernel(num_warps=4)
def scale_add(x: Array[f32], y: Array[f32], out: MutArray[f32], n: u32, alpha: f32, BLOCK: kaio.constexpr = 256):
    off = kt.program_id(0) * BLOCK
    a = kt.load(x, (off,), (BLOCK,), (n,))
    b = kt.load(y, (off,), (BLOCK,), (n,))
    kt.store(out, (off,), alpha * a + b, (n,))


@kaio.tile_kernel(num_warps=4)
def row_reduce(x: Array[f32], sums: MutArray[f32], maxs: MutArray[f32], mins: MutArray[f32],
               rows: i32, cols: i32, R: kaio.constexpr = 16, C: kaio.constexpr = 64):  # fmt: skip
    r0 = i32(kt.program_id(0)) * R
    t = kt.load(x, (r0, 0), (R, C), (rows, cols), other=0.0)
    kt.store(sums, (r0,), kt.sum(t, 1), (rows,))
    big = kt.load(x, (r0, 0), (R, C), (rows, cols), other=-1e30)
    kt.store(maxs, (r0,), kt.max(big, 1), (rows,))
    small = kt.load(x, (r0, 0), (R, C), (rows, cols), other=1e30)
    kt.store(mins, (r0,), kt.min(small, axis=1), (rows,))


@kaio.tile_kernel(num_warps=4)
def col_reduce(x: Array[i32], sums: MutArray[i32], maxs: MutArray[i32], mins: MutArray[i32], rows: i32, cols: i32,
               R: kaio.constexpr = 64, C: kaio.constexpr = 32):  # fmt: skip
    c0 = i32(kt.program_id(0)) * C
    t = kt.load(x, (0, c0), (R, C), (rows, cols))
    kt.store(sums, (c0,), kt.sum(t, 0), (cols,))
    low = kt.load(x, (0, c0), (R, C), (rows, cols), other=-(2**31))
    kt.store(maxs, (c0,), kt.max(low, 0), (cols,))
    high = kt.load(x, (0, c0), (R, C), (rows, cols), other=2**31 - 1)
    kt.store(mins, (c0,), kt.min(high, 0), (cols,))


@kaio.tile_kernel(num_warps=2)
def total(x: Array[f32], out: MutArray[f32], n: i32, N: kaio.constexpr = 512):
    t = kt.load(x, (0,), (N,), (n,))
    s = kt.sum(t, 0)  # a 1-D tile reduces to a scalar
    hi = kt.max(kt.load(x, (0,), (N,), (n,), other=-1e30), 0)
    lo = kt.min(kt.load(x, (0,), (N,), (n,), other=1e30), 0)
    kt.store(out, (0,), kt.full((4,), s, f32) + kt.where(kt.arange(4) == 1, hi - s, 0.0) + kt.where(kt.arange(4) == 2, lo - s, 0.0), (3,))


@kaio.tile_kernel(num_warps=4)
def outer(u: Array[f32], v: Array[f32], out: MutArray[f32], m: i32, n: i32, BM: kaio.constexpr = 32, BN: kaio.constexpr = 64):
    """out = u[:, None] * v[None, :] + 1, by expand_dims on one side and numpy rules on the other."""
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    a = kt.expand_dims(kt.load(u, (m0,), (BM,), (m,)), 1)
    b = kt.load(v, (n0,), (BN,), (n,))
    kt.store(out, (m0, n0), a * b + 1.0, (m, n))


@kaio.tile_kernel(num_warps=4)
def transpose(x: Array[f16], out: MutArray[f16], rows: i32, cols: i32, B: kaio.constexpr = 32):
    r0, c0 = i32(kt.program_id(0)) * B, i32(kt.program_id(1)) * B
    t = kt.load(x, (r0, c0), (B, B), (rows, cols))
    kt.store(out, (c0, r0), kt.trans(t), (cols, rows))


@kaio.tile_kernel(num_warps=4)
def strided_view(x: Array[f32], out: MutArray[f32], rows: i32, cols: i32, B: kaio.constexpr = 32):
    """Read x (rows x cols) as its transpose through strides, write the transpose densely."""
    r0, c0 = i32(kt.program_id(0)) * B, i32(kt.program_id(1)) * B
    t = kt.load(x, (r0, c0), (B, B), (cols, rows), strides=(1, cols))
    kt.store(out, (r0, c0), t, (cols, rows))


@kaio.tile_kernel(num_warps=4)
def gather_scatter(x: Array[f32], idx: Array[i32], out: MutArray[f32], n: i32, BLOCK: kaio.constexpr = 128):
    """out[idx[i]] = 2 * x[idx[i]] for the i < n whose x is positive."""
    offs = kt.arange(BLOCK) + i32(kt.program_id(0)) * BLOCK
    inside = offs < n
    where = kt.load(idx, offs, mask=inside, other=0)
    v = kt.load(x, where, mask=inside)
    kt.store(out, where, 2.0 * v, mask=inside & (v > 0.0))


@kaio.tile_kernel(num_warps=4)
def where_clip(x: Array[f32], out: MutArray[f32], n: i32, lo: f32, BLOCK: kaio.constexpr = 256):
    off = i32(kt.program_id(0)) * BLOCK
    t = kt.load(x, (off,), (BLOCK,), (n,))
    kept = kt.where(t < lo, lo, t)
    kt.store(out, (off,), kt.minimum(kept, 1.0) + exp(t) * 0.0, (n,))


@kaio.tile_kernel(num_warps=4, num_stages=2)
def attention_scores(q: Array[f16], k: Array[f16], out: MutArray[f32], sq: i32, sk: i32, d: i32,
                     BM: kaio.constexpr = 32, BN: kaio.constexpr = 32, BD: kaio.constexpr = 32):  # fmt: skip
    """out = q @ k^T with k stored (sk, d) row-major: the dot reads kt.trans of a loaded tile."""
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for d0 in range(0, d, BD):
        qt = kt.load(q, (m0, d0), (BM, BD), (sq, d))
        kt_ = kt.load(k, (n0, d0), (BN, BD), (sk, d))
        acc = kt.dot(qt, kt.trans(kt_), acc)
    kt.store(out, (m0, n0), acc, (sq, sk))


@kaio.tile_kernel(num_warps=4, num_stages=3)
def user_matmul(a: Array[bf16], b: Array[bf16], c: MutArray[f32], m: i32, n: i32, k: i32,
                BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 32):  # fmt: skip
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for k0 in range(0, k, BK):
        acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
    kt.store(c, (m0, n0), acc, (m, n))


@kaio.tile_kernel(num_warps=2, num_stages=0)
def fma_matmul(a: Array[f32], b: Array[f32], c: MutArray[f32], m: i32, n: i32, k: i32,
               BM: kaio.constexpr = 32, BN: kaio.constexpr = 32, BK: kaio.constexpr = 8):  # fmt: skip
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for k0 in range(0, k, BK):
        acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
    kt.store(c, (m0, n0), acc, (m, n))


@kaio.tile_kernel(num_warps=4)
def probabilities_times_v(s: Array[f32], v: Array[f16], out: MutArray[f32], n: i32, BM: kaio.constexpr = 32,
                          BN: kaio.constexpr = 32, D: kaio.constexpr = 32):  # fmt: skip
    """softmax(s) @ v for one 32x32 block: a dot operand computed in registers (not a load)."""
    x = kt.load(s, (0, 0), (BM, BN), (n, n), other=-1e30)
    p = exp(x - kt.expand_dims(kt.max(x, 1), 1))
    p = p / kt.expand_dims(kt.sum(p, 1), 1)
    acc = kt.dot(f16(p), kt.load(v, (0, 0), (BN, D), (n, D)), kt.zeros((BM, D), f32))
    kt.store(out, (0, 0), acc, (n, D))


# --------------------------------------------------------------------------- tests


def rel(got: np.ndarray, want: np.ndarray) -> float:
    want = want.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30))


@pytest.mark.parametrize("n", [1, 255, 256, 1000])
def test_masked_1d_load_and_store(dev, rng, n):
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = poisoned(dev, (n,), np.float32)
    scale_add[kaio.cdiv(n, 256)](dev.alloc_from(x), dev.alloc_from(y), out, n, 1.5)
    np.testing.assert_allclose(out.to_host(), 1.5 * x + y, rtol=1e-6)


@pytest.mark.parametrize("rows, cols", [(16, 64), (37, 50), (5, 1)])
def test_row_reductions(dev, rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    outs = [poisoned(dev, (rows,), np.float32) for _ in range(3)]
    row_reduce[kaio.cdiv(rows, 16)](dev.alloc_from(x), *outs, rows, cols)
    np.testing.assert_allclose(outs[0].to_host(), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(outs[1].to_host(), x.max(1))
    np.testing.assert_array_equal(outs[2].to_host(), x.min(1))


@pytest.mark.parametrize("rows, cols", [(64, 32), (40, 70)])
def test_column_reductions_of_ints(dev, rng, rows, cols):
    x = rng.integers(-1000, 1000, (rows, cols)).astype(np.int32)
    sums, maxs, mins = (poisoned(dev, (cols,), np.int32) for _ in range(3))
    col_reduce[kaio.cdiv(cols, 32)](dev.alloc_from(x), sums, maxs, mins, rows, cols)
    np.testing.assert_array_equal(sums.to_host(), x.sum(0))
    np.testing.assert_array_equal(maxs.to_host(), x.max(0))
    np.testing.assert_array_equal(mins.to_host(), x.min(0))


def test_a_1d_tile_reduces_to_a_scalar(dev, rng):
    x = rng.standard_normal(300).astype(np.float32)
    out = poisoned(dev, (3,), np.float32)
    total[1](dev.alloc_from(x), out, 300)
    got = out.to_host()
    # f32 accumulation in another order than numpy's: an absolute bound (the sum may be near 0)
    np.testing.assert_allclose(got[0], x.astype(np.float64).sum(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1:], [x.max(), x.min()], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m, n", [(32, 64), (45, 100)])
def test_broadcasting_expand_dims_and_numpy_rules(dev, rng, m, n):
    u, v = rng.standard_normal(m).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = poisoned(dev, (m, n), np.float32)
    outer[(kaio.cdiv(m, 32), kaio.cdiv(n, 64))](dev.alloc_from(u), dev.alloc_from(v), out, m, n)
    np.testing.assert_allclose(out.to_host(), np.outer(u, v) + 1, rtol=1e-6)


@pytest.mark.parametrize("rows, cols", [(32, 32), (50, 70)])
def test_trans_moves_data_between_threads(dev, rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float16)
    out = poisoned(dev, (cols, rows), np.float16)
    transpose[(kaio.cdiv(rows, 32), kaio.cdiv(cols, 32))](dev.alloc_from(x), out, rows, cols)
    np.testing.assert_array_equal(out.to_host(), x.T)


def test_strided_views_read_a_transposed_matrix(dev, rng):
    rows, cols = 40, 24
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = poisoned(dev, (cols, rows), np.float32)
    strided_view[(kaio.cdiv(cols, 32), kaio.cdiv(rows, 32))](dev.alloc_from(x), out, rows, cols)
    np.testing.assert_array_equal(out.to_host(), x.T)


def test_gather_and_scatter_with_masks(dev, rng):
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    idx = rng.permutation(n).astype(np.int32)
    start = rng.standard_normal(n).astype(np.float32)
    out = dev.alloc_from(start)
    gather_scatter[kaio.cdiv(n, 128)](dev.alloc_from(x), dev.alloc_from(idx), out, n)
    want = np.where(x > 0, 2 * x, start)
    np.testing.assert_array_equal(out.to_host(), want)


def test_where_minimum_and_math_on_tiles(dev, rng):
    n = 500
    x = rng.standard_normal(n).astype(np.float32)
    out = poisoned(dev, (n,), np.float32)
    where_clip[kaio.cdiv(n, 256)](dev.alloc_from(x), out, n, -0.5)
    np.testing.assert_allclose(out.to_host(), np.minimum(np.where(x < -0.5, -0.5, x), 1.0), rtol=1e-6)


@pytest.mark.parametrize("sq, sk, d", [(32, 32, 32), (17, 45, 40)])
def test_dot_with_a_transposed_operand(dev, rng, sq, sk, d):
    q = rng.standard_normal((sq, d)).astype(np.float16)
    k = rng.standard_normal((sk, d)).astype(np.float16)
    out = poisoned(dev, (sq, sk), np.float32)
    attention_scores[(kaio.cdiv(sq, 32), kaio.cdiv(sk, 32))](dev.alloc_from(q), dev.alloc_from(k), out, sq, sk, d)
    assert rel(out.to_host(), q.astype(np.float64) @ k.astype(np.float64).T) < 1e-5


@pytest.mark.parametrize("m, n, k", [(64, 64, 64), (1, 17, 100), (100, 1, 17), (17, 100, 1), (70, 90, 257)])
def test_bf16_tensor_core_dot_on_ragged_shapes(dev, rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = poisoned(dev, (m, n), np.float32)
    user_matmul[(kaio.cdiv(m, 64), kaio.cdiv(n, 64))](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    assert rel(c.to_host(), a.astype(np.float64) @ b.astype(np.float64)) < 1e-5


@pytest.mark.parametrize("m, n, k", [(32, 32, 8), (33, 17, 100)])
def test_f32_dot_runs_on_fmas(dev, rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = poisoned(dev, (m, n), np.float32)
    fma_matmul[(kaio.cdiv(m, 32), kaio.cdiv(n, 32))](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    assert rel(c.to_host(), a.astype(np.float64) @ b.astype(np.float64)) < 1e-5


def test_a_dot_operand_computed_in_registers(dev, rng):
    n = 30
    s = rng.standard_normal((n, n)).astype(np.float32)
    v = rng.standard_normal((n, 32)).astype(np.float16)
    out = poisoned(dev, (n, 32), np.float32)
    probabilities_times_v[1](dev.alloc_from(s), dev.alloc_from(v), out, n)
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want = p.astype(np.float16).astype(np.float64) @ v.astype(np.float64)
    assert rel(out.to_host(), want) < 2e-3


def test_dots_on_a_hopper_device(rng):
    """On sm_90a the 64-row bf16 matmul (4 warps: one warpgroup) runs on wgmma, the 32-row dots
    (a transposed operand, an operand computed in registers) keep mma.sync."""
    hopper = kaio.Device("sim", arch="sm_90a")
    assert "wgmma.mma_async" in kaio.compile(user_matmul, "sm_90a").ptx
    assert "wgmma" not in kaio.compile(attention_scores, "sm_90a").ptx
    m, n, k = 70, 90, 257
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = poisoned(hopper, (m, n), np.float32)
    user_matmul[(kaio.cdiv(m, 64), kaio.cdiv(n, 64))](hopper.alloc_from(a), hopper.alloc_from(b), c, m, n, k)
    assert rel(c.to_host(), a.astype(np.float64) @ b.astype(np.float64)) < 1e-5
    q = rng.standard_normal((17, 40)).astype(np.float16)
    kk = rng.standard_normal((45, 40)).astype(np.float16)
    out = poisoned(hopper, (17, 45), np.float32)
    attention_scores[(1, 2)](hopper.alloc_from(q), hopper.alloc_from(kk), out, 17, 45, 40)
    assert rel(out.to_host(), q.astype(np.float64) @ kk.astype(np.float64).T) < 1e-5


KERNELS = [scale_add, row_reduce, col_reduce, total, outer, transpose, strided_view, gather_scatter,
           where_clip, attention_scores, user_matmul, fma_matmul, probabilities_times_v]  # fmt: skip


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_every_kernel_assembles_without_spills(arch):
    from kaio.targets.ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 not installed")
    for kernel in KERNELS:
        report = toolchain.assemble(kaio.compile(kernel, arch).ptx, arch)
        assert report.spill_stores[kernel.name] == 0 and report.spill_loads[kernel.name] == 0, kernel.name
