"""Passes, one file per pass (or per small family); each a frozen-dataclass ModulePass."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """kaio's passes by name, loaded lazily (the xDSL registry convention)."""

    def lower_to_ptx() -> type[ModulePass]:
        from kaio.passes.lower_to_ptx import LowerToPtxPass

        return LowerToPtxPass

    return {"lower-to-ptx": lower_to_ptx}
