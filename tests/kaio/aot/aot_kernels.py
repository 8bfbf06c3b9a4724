"""Kernels the export tests ship: a SIMT kernel, a tile kernel (2-D grid, constexpr tiles)."""

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, block_dim_x, block_idx_x, f32, i32, thread_idx_x, u32, tanh


@kaio.gpu_kernel(block_size=128)
def saxpy(x: Array[f32], y: MutArray[f32], alpha: f32, n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = alpha * x[i] + y[i]


@kaio.tile_kernel(num_warps=4)
def bias_gelu(x: Array[f32], bias: Array[f32], y: MutArray[f32], rows: i32, cols: i32,
              R: kaio.constexpr = 16, C: kaio.constexpr = 64):  # fmt: skip
    r0, c0 = i32(kt.program_id(0)) * R, i32(kt.program_id(1)) * C
    h = kt.load(x, (r0, c0), (R, C), (rows, cols)) + kt.expand_dims(kt.load(bias, (c0,), (C,), (cols,)), 0)
    kt.store(y, (r0, c0), 0.5 * h * (1.0 + tanh(0.7978845608028654 * (h + 0.044715 * h * h * h))), (rows, cols))


BIAS_GELU_GRID = ("cdiv(rows, R)", "cdiv(cols, C)")
