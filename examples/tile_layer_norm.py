"""Layer norm as a tile kernel: ``y = (x - mean) / sqrt(var + eps) * weight + bias`` per row.

    python examples/tile_layer_norm.py

f16 in and out, f32 statistics. One program normalizes ROWS consecutive rows, each kept whole
in one tile row (BLOCK, a power of two at or above the row length: rows up to the largest
tile). The row is cast to f32; the mean and the variance are ``kt.sum`` along axis 1 divided by
the row length; columns past ``cols`` load as 0 and are masked out of the variance with
``kt.where`` so they do not count. Runs on the first CUDA GPU when the driver is present, else
on kaio's CPU simulator of PTX.
"""

import numpy as np

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f16, f32, i32, rsqrt


@kaio.tile_kernel(num_warps=4)
def layer_norm(x: Array[f16], weight: Array[f16], bias: Array[f16], y: MutArray[f16],
               rows: i32, cols: i32, eps: f32,
               ROWS: kaio.constexpr = 4, BLOCK: kaio.constexpr = 256):  # fmt: skip
    r0 = i32(kt.program_id(0)) * ROWS
    t = f32(kt.load(x, (r0, 0), (ROWS, BLOCK), (rows, cols)))  # 0 past the bounds
    mean = kt.sum(t, 1) / f32(cols)  # (ROWS,) f32
    inside = kt.expand_dims(kt.arange(BLOCK) < cols, 0)  # (1, BLOCK) bool: the real columns
    centred = kt.where(inside, t - kt.expand_dims(mean, 1), 0.0)
    inv_std = rsqrt(kt.sum(centred * centred, 1) / f32(cols) + eps)
    w = f32(kt.load(weight, (0,), (BLOCK,), (cols,)))  # (BLOCK,) broadcasts over the rows
    b = f32(kt.load(bias, (0,), (BLOCK,), (cols,)))
    kt.store(y, (r0, 0), f16(centred * kt.expand_dims(inv_std, 1) * w + b), (rows, cols))


def block_for(cols: int) -> int:
    """The tile width holding a whole row: the next power of two at or above ``cols``."""
    return max(1 << (cols - 1).bit_length(), 16)


def run(dev: kaio.Device, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5,
        rows_per_program: int = 4) -> np.ndarray:  # fmt: skip
    """The kernel's layer norm of every row of ``x`` (the output poisoned with NaN first)."""
    rows, cols = x.shape
    y = dev.alloc_from(np.full(x.shape, np.nan, dtype=np.float16))
    args = (dev.alloc_from(x), dev.alloc_from(weight), dev.alloc_from(bias), y, rows, cols, eps)
    grid = kaio.cdiv(rows, rows_per_program)
    layer_norm[grid](*args, ROWS=rows_per_program, BLOCK=block_for(cols))
    return y.to_host()


def reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    x32 = x.astype(np.float32)
    mean = x32.mean(axis=1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(axis=1, keepdims=True)
    return (x32 - mean) / np.sqrt(var + eps) * weight.astype(np.float32) + bias.astype(np.float32)


def main() -> None:
    dev = kaio.Device()  # the GPU, or the simulator (it says so once on stderr)
    rng = np.random.default_rng()
    rows, cols = 37, 200  # ragged: the last program's rows and each row's last columns are masked
    x = (3 + 2 * rng.standard_normal((rows, cols))).astype(np.float16)
    weight = rng.standard_normal(cols).astype(np.float16)
    bias = rng.standard_normal(cols).astype(np.float16)
    y = run(dev, x, weight, bias)
    expected = reference(x, weight, bias)
    matches = np.allclose(y.astype(np.float32), expected, rtol=1e-2, atol=1e-2)
    assert matches, "tile layer_norm does not match numpy"
    print(f"tile layer_norm of a {rows}x{cols} f16 matrix on {dev.name}: matches numpy")


if __name__ == "__main__":
    main()
