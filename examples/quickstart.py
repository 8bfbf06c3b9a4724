"""kaio in one screen: write a kernel in Python, run it, check it against numpy.

    python examples/quickstart.py

Runs on the first CUDA GPU when the driver is present, else on kaio's CPU simulator of PTX.
"""

import numpy as np

import kaio
from kaio.prelude import Array, MutArray, block_dim_x, block_idx_x, f32, thread_idx_x, u32


@kaio.gpu_kernel(block_size=256)
def saxpy(x: Array[f32], y: MutArray[f32], alpha: f32, n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = alpha * x[i] + y[i]


def main() -> None:
    dev = kaio.Device()  # the GPU, or the simulator (it says so once on stderr)
    n = 10_000
    x = np.random.rand(n).astype(np.float32)
    y = np.random.rand(n).astype(np.float32)

    x_dev, y_dev = dev.alloc_from(x), dev.alloc_from(y)
    saxpy[kaio.cdiv(n, 256)](x_dev, y_dev, 2.0, n)  # grid = number of blocks
    result = y_dev.to_host()

    expected = np.float32(2.0) * x + y
    assert np.allclose(result, expected, rtol=1e-6), "saxpy does not match numpy"
    print(f"saxpy of {n} elements on {dev.name} ({dev!r}): matches numpy")
    print(f"y[:4] = {result[:4]}")


if __name__ == "__main__":
    main()
