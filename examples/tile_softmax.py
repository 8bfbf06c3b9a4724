"""Row softmax as a tile kernel: ``y[i, :] = exp(x[i, :] - max) / sum(exp(x[i, :] - max))``.

    python examples/tile_softmax.py

One program handles ROWS consecutive rows, each kept whole in one tile row: the tile is
ROWS x BLOCK with BLOCK the next power of two at or above the row length, so this kernel is for
rows up to the largest tile (``kt.max``/``kt.sum`` need the whole row at once; longer rows
would loop over column blocks with a running max and sum). Columns at or past ``cols`` load
as ``-inf`` (``other``), so they add ``exp(-inf) = 0`` to the sum; rows past ``rows`` are
computed but not stored. The statistics (row max, row sum) are f32. Runs on the first CUDA
GPU when the driver is present, else on kaio's CPU simulator of PTX.
"""

import math

import numpy as np

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, exp, f32, i32


@kaio.tile_kernel(num_warps=4)
def softmax(x: Array[f32], y: MutArray[f32], rows: i32, cols: i32,
            ROWS: kaio.constexpr = 4, BLOCK: kaio.constexpr = 256):  # fmt: skip
    r0 = i32(kt.program_id(0)) * ROWS
    t = kt.load(x, (r0, 0), (ROWS, BLOCK), (rows, cols), other=-math.inf)  # row stride: cols
    row_max = kt.max(t, 1)  # (ROWS,)
    e = exp(t - kt.expand_dims(row_max, 1))  # (ROWS, BLOCK) - (ROWS, 1): broadcast along rows
    row_sum = kt.sum(e, 1)
    kt.store(y, (r0, 0), e / kt.expand_dims(row_sum, 1), (rows, cols))


def block_for(cols: int) -> int:
    """The tile width holding a whole row: the next power of two at or above ``cols``."""
    return max(1 << (cols - 1).bit_length(), 16)


def run(dev: kaio.Device, x: np.ndarray, rows_per_program: int = 4) -> np.ndarray:
    """The kernel's softmax of every row of ``x`` (the output poisoned with NaN first)."""
    rows, cols = x.shape
    y = dev.alloc_from(np.full(x.shape, np.nan, dtype=np.float32))
    grid = kaio.cdiv(rows, rows_per_program)
    softmax[grid](dev.alloc_from(x), y, rows, cols, ROWS=rows_per_program, BLOCK=block_for(cols))
    return y.to_host()


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    dev = kaio.Device()  # the GPU, or the simulator (it says so once on stderr)
    rng = np.random.default_rng()
    x = (4 * rng.standard_normal((37, 200))).astype(np.float32)  # ragged: 37 rows, 200 columns
    y = run(dev, x)
    assert np.allclose(y, reference(x), rtol=1e-5, atol=1e-7), "tile softmax does not match numpy"
    print(f"tile softmax of a {x.shape[0]}x{x.shape[1]} matrix on {dev.name}: matches numpy")


if __name__ == "__main__":
    main()
