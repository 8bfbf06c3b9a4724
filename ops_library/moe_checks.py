"""What the MoE ops check before a launch: integer arrays whose values decide where the kernels
write (expert ids, group offsets) are read on the host once, so a bad value is a kaio error
naming the argument instead of a write out of bounds."""

from __future__ import annotations

from typing import Any

import numpy as np

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.operands import Operand

INDEX_TYPES = (dtypes.i32, dtypes.i64)


def host_values(value: Any) -> np.ndarray | None:
    """The values of an array argument on the host (a torch tensor or kaio Buffer read back
    once), or None for another device array kind (nothing to check it with)."""
    from kaio.runtime import tensors
    from kaio.runtime.buffer import Buffer

    if tensors.is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, Buffer):
        return value.to_host()
    return None


def take_index(op: str, name: str, o: Operand, types: tuple[dtypes.ScalarType, ...] = INDEX_TYPES) -> None:
    if o.dtype not in types:
        names = " or ".join(t.name for t in types)
        raise KaioTypeError(f"{op}: `{name}` must be {names}, got {o.dtype.name}")


def check_ids(op: str, name: str, value: Any, experts: int) -> None:
    """Every expert id is in [0, experts)."""
    host = host_values(value)
    if host is None or host.size == 0:
        return
    bad = (host < 0) | (host >= experts)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise KaioValueError(f"{op}: `{name}`{list(where)} = {int(host[where])} is not an expert id in [0, {experts})")


def check_count(op: str, name: str, value: Any, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise KaioTypeError(f"{op}: `{name}` must be an int, got {type(value).__name__}")
    if not lo <= value < 2**31:
        raise KaioValueError(f"{op}: `{name}` must be at least {lo} (and below 2**31), got {value}")
    return int(value)
