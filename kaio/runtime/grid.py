"""Launch geometry: grids and blocks, checked against the kernel and the device.

A grid is an int, a tuple of 1-3 ints, or a callable taking the launch's ``meta`` dict (the
constexpr values and the runtime arguments by name) and returning one of those, as in Triton:
``kernel[lambda meta: (kaio.cdiv(n, meta["BLOCK"]),)](...)``.

A block defaults to the kernel's ``block_size``; an explicit block may be smaller in every
dimension (the kernel's code may assume at most ``block_size`` threads: its PTX says ``.maxntid``
and shared arrays are sized for it) but never larger.

Every problem with the geometry (a non-int dimension, zero or negative, above the device's
limits, a block larger than the kernel's) raises ``KaioLaunchError``, before anything reaches the
device. (``KaioTypeError`` is kept for the kernel's own arguments.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from kaio.errors import KaioLaunchError
from kaio.prelude import cdiv  # ceiling division for grid sizes (also a kernel builtin)

Dim3 = tuple[int, int, int]


def _dims(value: Any, what: str, limits: Dim3) -> Dim3:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        dims: tuple[Any, ...] = (value,)
    elif isinstance(value, (tuple, list)):
        dims = tuple(value)
    else:
        raise KaioLaunchError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if not 1 <= len(dims) <= 3 or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in dims
    ):
        raise KaioLaunchError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    full = [int(d) for d in dims] + [1] * (3 - len(dims))
    for axis, (d, limit) in enumerate(zip(full, limits, strict=True)):
        if not 1 <= d <= limit:
            raise KaioLaunchError(
                f"{what} dimension {'xyz'[axis]} = {d} is outside 1..{limit} ({what} {tuple(full)})"
            )
    return (full[0], full[1], full[2])


def resolve_grid(grid: Any, meta: Callable[[], Mapping[str, Any]], limits: Dim3) -> Dim3:
    """The 3-D grid; ``meta()`` builds the dict a callable grid receives (only when needed)."""
    if callable(grid):
        try:
            grid = grid(meta())
        except KaioLaunchError:
            raise
        except Exception as exc:  # the user's lambda: say where it failed
            raise KaioLaunchError(f"the grid function raised {type(exc).__name__}: {exc}") from exc
    return _dims(grid, "grid", limits)


def resolve_block(
    block: Any, kernel_block: Dim3, name: str, max_block: Dim3, max_threads: int
) -> Dim3:
    dims = _dims(block, "block", max_block)
    if math.prod(dims) > max_threads:
        raise KaioLaunchError(
            f"block {dims} has {math.prod(dims)} threads; the device allows {max_threads}"
        )
    if any(d > k for d, k in zip(dims, kernel_block, strict=True)):
        raise KaioLaunchError(
            f"block {dims} is larger than kernel `{name}`'s block_size {kernel_block}; launch "
            "with a block that fits in it (or change block_size in @kaio.gpu_kernel)"
        )
    return dims
