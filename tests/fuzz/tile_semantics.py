"""The documented semantics of the tile language's memory operations, in numpy, independent of
the compiler: the reference the tile fuzzer compares the simulator with (elementwise arithmetic,
reductions and dots are numpy's own on exactly representable values, see ``tile_programs``).

A view of ``array`` at ``offsets`` with ``bounds`` and ``strides`` holds element ``i`` (one index
per dim) at ``sum((offsets[d] + i[d]) * strides[d])``, inside where ``0 <= offsets[d] + i[d] <
bounds[d]`` along every dim (docs/tile_language.md, "Memory: views, bounds and masks").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _view_indices(offsets: Sequence[int], shape: Sequence[int], bounds: Sequence[int],
                  strides: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(flat index of each element, whether it is inside), in Python ints (no overflow)."""
    grids = np.meshgrid(*[o + np.arange(n).astype(object) for o, n in zip(offsets, shape, strict=True)], indexing="ij")
    inside = np.ones(tuple(shape), bool)
    flat = np.zeros(tuple(shape), object)
    for g, bound, stride in zip(grids, bounds, strides, strict=True):
        inside &= (g >= 0) & (g < bound)
        flat = flat + g * stride
    return flat, inside


def view_load(array: np.ndarray, offsets: Sequence[int], shape: Sequence[int], bounds: Sequence[int],
              strides: Sequence[int], other: object) -> np.ndarray:  # fmt: skip
    flat, inside = _view_indices(offsets, shape, bounds, strides)
    safe = np.where(inside, flat, 0).astype(np.int64)
    return np.where(inside, array[safe], np.asarray(other, array.dtype)).astype(array.dtype)


def view_store(array: np.ndarray, offsets: Sequence[int], tile: np.ndarray, bounds: Sequence[int],
               strides: Sequence[int]) -> None:  # fmt: skip
    flat, inside = _view_indices(offsets, tile.shape, bounds, strides)
    array[flat[inside].astype(np.int64)] = tile[inside]


def gather(array: np.ndarray, index: np.ndarray, mask: np.ndarray, other: object) -> np.ndarray:
    safe = np.where(mask, index, 0)
    return np.where(mask, array[safe], np.asarray(other, array.dtype)).astype(array.dtype)


def atomic_add(array: np.ndarray, index: np.ndarray, values: np.ndarray, mask: np.ndarray) -> None:
    """One add per element where ``mask`` (collisions add up; integers wrap)."""
    np.add.at(array, index[mask], values[mask].astype(array.dtype))
