"""The dotted modifiers of an opcode, consumed by name so none is ever silently ignored.

A factory takes what it understands (``take``/``flag``/``types``) and calls ``done()``; any
modifier left over is an error naming it. Order does not matter: PTX writers disagree on it
(``cvt.f64.bf16.rp``, ``atom.add.shared::cluster.noftz.f16``).
"""

from __future__ import annotations

from .faults import DecodeError
from .ptx_types import PTX_TYPES, PtxType

# Hints with no effect on a functional simulation: caching, eviction, memory ordering, scope.
IGNORED_MEMORY_HINTS = frozenset(
    {
        "ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt",
        "weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "mmio",
        "cta", "cluster", "gpu", "sys",
        "L2::cache_hint", "unified",
    }
)  # fmt: skip
IGNORED_MEMORY_PREFIXES = ("L1::", "L2::", "level::")


class Modifiers:
    def __init__(self, opcode: str):
        parts = opcode.split(".")
        self.opcode = opcode
        self.mnemonic = parts[0]
        self.items = parts[1:]

    def take(self, *options: str) -> str | None:
        """Remove and return the one modifier among ``options`` (None if absent)."""
        found = [m for m in self.items if m in options]
        if len(found) > 1:
            raise DecodeError(f"conflicting modifiers {', '.join('.' + f for f in found)} in {self.opcode}")
        if found:
            self.items.remove(found[0])
            return found[0]
        return None

    def flag(self, name: str) -> bool:
        if name in self.items:
            self.items.remove(name)
            return True
        return False

    def require(self, *options: str) -> str:
        got = self.take(*options)
        if got is None:
            raise DecodeError(f"{self.opcode} needs one of {', '.join('.' + o for o in options)}")
        return got

    def types(self) -> list[PtxType]:
        """Remove and return the type modifiers, in the order written."""
        found = [m for m in self.items if m in PTX_TYPES]
        self.items = [m for m in self.items if m not in PTX_TYPES]
        return [PTX_TYPES[m] for m in found]

    def one_type(self, allowed: set[str] | None = None) -> PtxType:
        ts = self.types()
        if len(ts) != 1:
            raise DecodeError(f"{self.opcode} needs exactly one type, has {len(ts)}")
        if allowed is not None and ts[0].name not in allowed:
            raise DecodeError(f"{self.opcode}: type .{ts[0].name} is not supported (allowed: {', '.join(sorted(allowed))})")
        return ts[0]

    def drop_memory_hints(self) -> None:
        self.items = [
            m for m in self.items if m not in IGNORED_MEMORY_HINTS and not m.startswith(IGNORED_MEMORY_PREFIXES)
        ]

    def done(self) -> None:
        if self.items:
            raise DecodeError(
                f"unsupported modifier {', '.join('.' + m for m in self.items)} in {self.opcode}"
            )
