"""Loads and stores of typed elements in any state space, generic addresses included.

``load``/``store`` take the addresses of the executing threads, check them through
``spaces.locate`` and gather/scatter through typed views of the space's buffer. A generic
address batch that mixes spaces is split and each part handled in its own space. Stores from
several threads to one address in one instruction keep the highest-numbered thread's value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .context import ExecContext
from .program import Idx
from .spaces import check_shared_written, locate, mark_shared_written, split_generic


def _profile(ctx: ExecContext, space: str, idx: Idx, addr: Any, nbytes: int, access: str) -> None:
    profiler = ctx.profiler
    if profiler is None:
        return
    if space == "global":
        profiler.global_access(ctx, idx, addr, nbytes)
    elif space == "shared":
        profiler.shared_access(ctx, idx, addr, nbytes, access)


def _load_in(ctx: ExecContext, space: str, idx: Idx, addr: Any, itemsize: int, count: int) -> list[np.ndarray]:
    off = locate(ctx, space, idx, addr, itemsize * count, itemsize * count, "load")
    _profile(ctx, space, idx, addr, itemsize * count, "load")
    ix = np.asarray(off) // itemsize
    if space == "shared":
        if ctx.race is not None:
            ctx.race.read(idx, off, itemsize * count)
        if ctx.async_proxy is not None:  # in-flight bulk copies; proxy order (async_proxy.py)
            ctx.async_proxy.generic_read(ctx, idx, off, itemsize * count)
        for k in range(count):
            element = np.asarray(addr, dtype=np.uint64) + np.uint64(k * itemsize)
            check_shared_written(ctx, idx, np.asarray(off) + k * itemsize, itemsize, element)
    view = ctx.view(space, itemsize)
    return [view[ix + k] for k in range(count)]


def load(ctx: ExecContext, space: str | None, idx: Idx, addr: Any, itemsize: int, count: int) -> list[np.ndarray]:
    """``count`` consecutive elements of ``itemsize`` bytes per thread, as unsigned ints."""
    if space is not None:
        return _load_in(ctx, space, idx, addr, itemsize, count)
    groups = split_generic(idx, ctx.n, addr)
    if len(groups) == 1:
        sp, _, _, a = groups[0]
        return _load_in(ctx, sp, idx, a if np.ndim(addr) else a[0], itemsize, count)
    m = ctx.n if idx is None else idx.size
    out = [np.zeros(m, dtype=np.dtype(f"<u{itemsize}")) for _ in range(count)]
    for sp, sub_idx, positions, a in groups:
        for k, part in enumerate(_load_in(ctx, sp, sub_idx, a, itemsize, count)):
            out[k][positions] = part
    return out


def _store_in(ctx: ExecContext, space: str, idx: Idx, addr: Any, itemsize: int, values: list[Any]) -> None:
    count = len(values)
    off = np.asarray(locate(ctx, space, idx, addr, itemsize * count, itemsize * count, "store"))
    _profile(ctx, space, idx, addr, itemsize * count, "store")
    if space == "shared" and ctx.race is not None:

        def stored_bytes() -> np.ndarray:
            parts = [np.broadcast_to(np.asarray(v, dtype=f"<u{itemsize}"), off.shape) for v in values]
            return np.stack(parts, axis=1).view(np.uint8).reshape(off.size, -1)

        ctx.race.write(idx, off, itemsize * count, stored_bytes)
    if space == "shared" and ctx.async_proxy is not None:
        ctx.async_proxy.generic_write(ctx, idx, off, itemsize * count)
    view = ctx.view(space, itemsize)
    ix = off // itemsize
    for k, v in enumerate(values):
        v = np.asarray(v)
        if ix.size == 1 and v.size > 1:
            v = v[-1:]  # one address for every thread: the last thread's store wins
        view[ix + k] = v
    if space == "shared":
        for k in range(count):
            mark_shared_written(ctx, off + k * itemsize, itemsize)


def store(ctx: ExecContext, space: str | None, idx: Idx, addr: Any, itemsize: int, values: list[Any]) -> None:
    """Store per-thread elements (unsigned ints of ``itemsize`` bytes, or scalars)."""
    if space is not None:
        _store_in(ctx, space, idx, addr, itemsize, values)
        return
    groups = split_generic(idx, ctx.n, addr)
    if len(groups) == 1:
        sp, _, _, a = groups[0]
        _store_in(ctx, sp, idx, a if np.ndim(addr) else a[0], itemsize, values)
        return
    for sp, sub_idx, positions, a in groups:
        part = [np.asarray(v)[positions] if np.ndim(v) else v for v in values]
        _store_in(ctx, sp, sub_idx, a, itemsize, part)
