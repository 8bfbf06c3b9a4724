"""Tile kernels run on the simulator device, with fresh random inputs every run."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kaio


@pytest.fixture(scope="session")
def dev() -> kaio.Device:
    return kaio.Device("sim")


@pytest.fixture
def rng() -> np.random.Generator:
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    return np.random.default_rng(seed)


def poisoned(dev: kaio.Device, shape: tuple[int, ...], dtype: object) -> kaio.Buffer:
    """An output buffer full of NaN (or the integer type's maximum): unwritten elements show."""
    dtype = np.dtype(dtype)
    fill = np.nan if dtype.kind == "f" or dtype.name == "bfloat16" else np.iinfo(dtype).max
    return dev.alloc_from(np.full(shape, fill, dtype=dtype))
