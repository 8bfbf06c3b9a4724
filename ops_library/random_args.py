"""The arguments of the ops that draw random numbers (dropout, attention's dropout): a
probability in [0, 1) and a seed, checked the same way for every op."""

from __future__ import annotations

import numbers
import sys
from typing import Any

from kaio.errors import KaioTypeError, KaioValueError


def check_p(op: str, p: Any, name: str = "p") -> float:
    """A dropout probability: a number in [0, 1), or a KaioValueError naming ``name``."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= float(p) < 1:
        raise KaioValueError(f"{op}: `{name}` must be a number in [0, 1), got {p!r}")
    return float(p)


def check_seed(op: str, seed: Any) -> int:
    """An integer seed (modulo 2**64), one drawn from a torch.Generator, or a KaioTypeError."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(seed, torch.Generator):
        return int(torch.randint(0, 2**63 - 1, (), generator=seed, device=seed.device).item())
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise KaioTypeError(f"{op}: `seed` must be an integer or a torch.Generator, got {type(seed).__name__} {seed!r}")
    return int(seed) % (1 << 64)


def seed_as_int64(seed: int) -> int:
    """A 64-bit seed as the int64 a torch custom op carries (the kernel reads it back as u64)."""
    return seed - (1 << 64) if seed >> 63 else seed
