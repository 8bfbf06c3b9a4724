"""The spine's acceptance kernels, written as a kaio user writes them.

Each kernel has a numpy reference (``reference_<name>``) and a launch recipe in
``examples/run_kernels.py``; the tests compile every one for sm_80 and sm_90 and run them on the
simulator against the references.
"""

# ruff: noqa: F405 - kernels use the names of `from kaio.prelude import *`, the public surface

from __future__ import annotations

import numpy as np

import kaio
from kaio.prelude import *  # noqa: F403


@kaio.gpu_kernel(block_size=256)
def vector_add(a: Array[f32], b: Array[f32], c: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        c[i] = a[i] + b[i]


@kaio.gpu_kernel(block_size=256)
def saxpy(x: Array[f32], y: MutArray[f32], alpha: f32, n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = alpha * x[i] + y[i]


@kaio.device
def sigmoid(v: f32) -> f32:
    return 1.0 / (1.0 + exp(-v))


@kaio.gpu_kernel(block_size=128)
def silu_gate(x: Array[f32], gate: Array[f32], out: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i >= n:
        return
    v = x[i]
    out[i] = v * sigmoid(v) * gate[i]


@kaio.gpu_kernel(block_size=256)
def warp_sum(x: Array[f32], out: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    v = x[i] if i < n else 0.0
    for k in static_range(5):
        v += shfl_sync_down(v, 16 >> k)
    if lane_id() == 0:
        atomic_add(out, 0, v)


@kaio.gpu_kernel(block_size=256)
def block_sum(x: Array[f32], out: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    total = block_reduce_sum(x[i] if i < n else 0.0)
    if thread_idx_x() == 0:
        out[block_idx_x()] = total


@kaio.gpu_kernel(block_size=(16, 16))
def matmul(a: Array[f32], b: Array[f32], c: MutArray[f32], n: i32, TILE: kaio.constexpr = 16):
    sa = shared_mem(f32, (TILE, TILE))
    sb = shared_mem(f32, (TILE, TILE))
    tx = i32(thread_idx_x())
    ty = i32(thread_idx_y())
    row = i32(block_idx_y()) * TILE + ty
    col = i32(block_idx_x()) * TILE + tx
    acc = 0.0
    for t in range(0, n, TILE):
        sa[ty, tx] = a[index_2d(row, t + tx, n)] if row < n and t + tx < n else 0.0
        sb[ty, tx] = b[index_2d(t + ty, col, n)] if t + ty < n and col < n else 0.0
        bar_sync()
        for k in static_range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        bar_sync()
    if row < n and col < n:
        c[index_2d(row, col, n)] = acc


@kaio.gpu_kernel(block_size=256)
def histogram(data: Array[u32], bins: MutArray[u32], n: u32, NBINS: kaio.constexpr = 64):
    local = shared_mem(u32, NBINS)
    t = thread_idx_x()
    for b in range(t, NBINS, block_dim_x()):
        local[b] = 0
    bar_sync()
    i = t + block_idx_x() * block_dim_x()
    while i < n:
        atomic_add(local, data[i] % NBINS, u32(1))
        i += block_dim_x() * grid_dim_x()
    bar_sync()
    for b in range(t, NBINS, block_dim_x()):
        atomic_add(bins, b, local[b])


@kaio.gpu_kernel(block_size=128)
def half_math(x: Array[f16], y: MutArray[f16], scale: f16, n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        v = x[i] * scale + 1.0
        y[i] = f16(tanh(f32(v))) + sqrt(abs(v)) * v**2


# One more, beyond the acceptance list: four neighbouring elements per thread, which
# `vectorize-loads` turns into one 16-byte load.


@kaio.gpu_kernel(block_size=64)
def scale4(x: Array[f32], y: MutArray[f32], s: f32, n4: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n4:
        a = x[4 * i]
        b = x[4 * i + 1]
        c = x[4 * i + 2]
        d = x[4 * i + 3]
        y[4 * i] = a * s
        y[4 * i + 1] = b * s
        y[4 * i + 2] = c * s
        y[4 * i + 3] = d * s



# --------------------------------------------------------------------------- numpy references


def reference_vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def reference_saxpy(x: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    return np.float32(alpha) * x + y


def reference_silu_gate(x: np.ndarray, gate: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x)) * gate


def reference_warp_sum(x: np.ndarray) -> np.ndarray:
    return np.array([x.astype(np.float64).sum()], dtype=np.float32)


def reference_block_sum(x: np.ndarray, block: int = 256) -> np.ndarray:
    padded = np.zeros(-(-x.size // block) * block, dtype=np.float64)
    padded[: x.size] = x
    return padded.reshape(-1, block).sum(axis=1).astype(np.float32)


def reference_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def reference_histogram(data: np.ndarray, nbins: int = 64) -> np.ndarray:
    return np.bincount(data % nbins, minlength=nbins).astype(np.uint32)


def reference_half_math(x: np.ndarray, scale: float) -> np.ndarray:
    v = (x.astype(np.float32) * np.float32(scale) + 1.0).astype(np.float16).astype(np.float32)
    return (np.tanh(v) + np.sqrt(np.abs(v)) * v * v).astype(np.float16)


ACCEPTANCE_KERNELS = (vector_add, saxpy, silu_gate, warp_sum, block_sum, matmul, histogram, half_math)
