"""Kernels calling the extension's builtin twice (the pass folds the second away)."""

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, block_dim_x, block_idx_x, constexpr, f32, i32, thread_idx_x, u32
from kaio_demo_ext import saturate


@kaio.tile_kernel(num_warps=4)
def clamp_tile(x: Array[f32], y: MutArray[f32], n: i32, BLOCK: constexpr):
    r = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    v = kt.load(x, r, mask=r < n)
    kt.store(y, r, saturate(saturate(v * 2.0)), mask=r < n)


@kaio.gpu_kernel(block_size=128)
def clamp_simt(x: Array[f32], y: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = saturate(saturate(x[i] * 2.0))
