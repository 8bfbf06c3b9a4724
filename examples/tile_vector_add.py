"""The first tile kernel: ``c = a + b`` over 1-D tiles, one tile per program.

    python examples/tile_vector_add.py

A program (one CTA) loads a BLOCK-long tile of ``a`` and of ``b`` starting at its own offset,
adds them and stores the sum. ``kt.load`` and ``kt.store`` take the array's bound ``n``: the
elements of the last tile at or past ``n`` are not read (they come back as ``other``, 0) and
not written, so ``n`` need not be a multiple of BLOCK. Runs on the first CUDA GPU when the
driver is present, else on kaio's CPU simulator of PTX.
"""

import numpy as np

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f32, i32


@kaio.tile_kernel(num_warps=4)
def vector_add(a: Array[f32], b: Array[f32], c: MutArray[f32], n: i32,
               BLOCK: kaio.constexpr = 1024):  # fmt: skip
    start = i32(kt.program_id(0)) * BLOCK  # program_id is a u32; offsets and bounds are i32
    x = kt.load(a, (start,), (BLOCK,), (n,))  # a[start : start + BLOCK], 0 past n
    y = kt.load(b, (start,), (BLOCK,), (n,))
    kt.store(c, (start,), x + y, (n,))  # only the elements below n are written


def add(dev: kaio.Device, a: np.ndarray, b: np.ndarray, block: int = 1024) -> np.ndarray:
    """``a + b`` computed by the kernel on ``dev`` (the output poisoned with NaN first)."""
    n = a.size
    c = dev.alloc_from(np.full(n, np.nan, dtype=np.float32))
    vector_add[kaio.cdiv(n, block)](dev.alloc_from(a), dev.alloc_from(b), c, n, BLOCK=block)
    return c.to_host()


def main() -> None:
    dev = kaio.Device()  # the GPU, or the simulator (it says so once on stderr)
    rng = np.random.default_rng()
    n = 10_000  # not a multiple of the tile: the last program's tile is masked
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = add(dev, a, b)
    assert np.array_equal(c, a + b), "tile vector_add does not match numpy"
    print(f"tile vector_add of {n} elements on {dev.name}: matches numpy")


if __name__ == "__main__":
    main()
