"""A bool mask built by broadcasting a row tile against a column tile (once a compiler bug met
while writing the memory-bound ops: bool tiles could not move between layouts)."""

from __future__ import annotations

import numpy as np

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f32, i32


@kaio.tile_kernel(num_warps=1)
def masked_gather(x: Array[f32], out: MutArray[f32], rows: i32, cols: i32, R: kaio.constexpr = 4, C: kaio.constexpr = 8):
    r = kt.expand_dims(kt.arange(R), 1)
    j = kt.expand_dims(kt.arange(C), 0)
    ok = (r < rows) & (j < cols)  # a bool tile made by broadcasting (R, 1) against (1, C)
    kt.store(out, r * cols + j, kt.load(x, r * cols + j, mask=ok), mask=ok)


def test_a_mask_broadcast_from_row_and_column_tiles_loads():
    dev = kaio.Device("sim")
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    out = dev.alloc_from(np.zeros((3, 5), np.float32))
    masked_gather[1](dev.alloc_from(x), out, 3, 5)
    np.testing.assert_array_equal(out.to_host(), x)
