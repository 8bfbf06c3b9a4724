"""Tile kernels run on the simulator device, with fresh random inputs every run."""

from __future__ import annotations


import numpy as np

import kaio


def poisoned(dev: kaio.Device, shape: tuple[int, ...], dtype: object) -> kaio.Buffer:
    """An output buffer full of NaN (or the integer type's maximum): unwritten elements show."""
    dtype = np.dtype(dtype)
    fill = np.nan if dtype.kind == "f" or dtype.name == "bfloat16" else np.iinfo(dtype).max
    return dev.alloc_from(np.full(shape, fill, dtype=dtype))
