"""Addresses -> byte offsets into a state space's buffer, with the sanitizer checks.

Every access goes through ``locate``: it checks alignment and bounds for the threads that
execute it (raising a ``SimFault`` for the lowest-numbered faulting thread) and returns the
buffer name and the byte offsets to gather from or scatter to. Generic addresses are split by
window first (``split_generic``); the common all-global case costs one min/max.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .context import ExecContext
from .faults import first_fault
from .memory import GLOBAL_BASE, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .program import Idx

_WINDOWS = (("shared", SHARED_WINDOW), ("local", LOCAL_WINDOW), ("param", PARAM_WINDOW))


def _as_u64(addr: object) -> np.ndarray:
    return np.asarray(addr, dtype=np.uint64).reshape(-1)


def locate(ctx: ExecContext, space: str, idx: Idx, addr: object, nbytes: int, align: int, what: str) -> np.ndarray:
    """Checked byte offsets (int64, one per executing thread, or one if ``addr`` is uniform)."""
    a = _as_u64(addr)
    if align > 1:
        bad = (a & np.uint64(align - 1)) != 0
        if bad.any():
            raise first_fault(bad, idx, "memory", f"misaligned {space} {what} ({nbytes} bytes, needs {align}-byte alignment)", a)
    if space in ("global", "const"):
        oob = ctx.memory.out_of_bounds(a, nbytes)
        if oob is not None and oob.any():
            raise first_fault(oob, idx, "memory", f"out-of-bounds {space} {what} ({nbytes} bytes)", a)
        return (a - np.uint64(GLOBAL_BASE)).astype(np.int64)
    limit = {"shared": ctx.shared_bytes, "local": ctx.local_bytes, "param": ctx.entry.param_bytes}[space]
    oob = a > np.uint64(max(limit - nbytes, -1)) if limit >= nbytes else np.ones(a.shape, dtype=bool)
    if oob.any():
        raise first_fault(oob, idx, "memory", f"out-of-bounds {space} {what} ({nbytes} bytes; the {space} window holds {limit})", a)
    offsets = a.astype(np.int64)
    if space == "shared":
        base = ctx.shared_base if idx is None else ctx.shared_base[idx]
        return base + offsets if a.size > 1 else base + offsets[0]
    if space == "local":
        base = ctx.local_base if idx is None else ctx.local_base[idx]
        return base + offsets if a.size > 1 else base + offsets[0]
    return offsets  # param: one buffer shared by every thread


def split_generic(idx: Idx, n: int, addr: object) -> list[tuple[str, Idx, Any, np.ndarray]]:
    """Partition generic addresses by state space.

    Returns (space, thread indices, positions within the executing set, space addresses);
    positions is ``slice(None)`` when one space takes everything.
    """
    a = _as_u64(addr)
    if a.size == 0 or int(a.min()) >= GLOBAL_BASE:
        return [("global", idx, slice(None), a)]
    groups: list[tuple[str, Idx, Any, np.ndarray]] = []
    rest = np.ones(a.shape, dtype=bool)
    for space, base in _WINDOWS:
        inside = (a >= np.uint64(base)) & (a < np.uint64(base + WINDOW_SIZE))
        if inside.any():
            groups.append((space, *_subset(idx, n, a, inside), a[inside] - np.uint64(base)))
            rest &= ~inside
    if rest.any():
        groups.append(("global", *_subset(idx, n, a, rest), a[rest]))
    return groups


def _subset(idx: Idx, n: int, a: np.ndarray, mask: np.ndarray) -> tuple[Idx, Any]:
    if a.size == 1:  # a uniform address: every executing thread takes this path
        return idx, slice(None)
    positions = np.flatnonzero(mask)
    return (positions if idx is None else idx[positions]), positions


def check_shared_written(ctx: ExecContext, idx: Idx, offsets: np.ndarray, itemsize: int, addresses: object) -> None:
    """Raise for a load of shared bytes that nothing stored in this launch."""
    if ctx.shared_written is None:
        return
    marks = ctx.view("shared_written", itemsize)[offsets // itemsize]
    pattern = np.uint64(0x0101010101010101 >> (64 - 8 * itemsize)).astype(marks.dtype)
    bad = marks != pattern
    if np.any(bad):
        raise first_fault(np.atleast_1d(bad), idx, "memory", "uninitialized shared read (nothing stored these bytes in this launch)", addresses)


def mark_shared_written(ctx: ExecContext, offsets: np.ndarray, itemsize: int) -> None:
    if ctx.shared_written is None:
        return
    view = ctx.view("shared_written", itemsize)
    view[offsets // itemsize] = np.uint64(0x0101010101010101 >> (64 - 8 * itemsize)).astype(view.dtype)
