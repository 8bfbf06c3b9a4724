"""The ``xdsl.universe`` entry points of installed packages (kaio's own aside): what they
declare of one kind (dialects, passes), read as xDSL's drivers read them."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from kaio.errors import KaioPipelineWarning

ENTRY_POINT_GROUP = "xdsl.universe"


def installed(kind: str) -> dict[str, Callable[[], Any]]:
    """``kind`` (``"all_dialects"``, ``"all_passes"``) of every entry point's universe, by name
    (the first of a name wins). A package whose entry point does not load is skipped with a
    warning naming it."""
    from importlib import metadata  # here: importing it costs a fresh process ~20 ms

    found: dict[str, Callable[[], Any]] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.value.startswith("kaio."):
            continue  # kaio's own universe: kaio adds it itself
        try:
            items = getattr(entry.load(), kind)
        except Exception as e:
            what = kind.removeprefix("all_")
            warnings.warn(
                f"the {ENTRY_POINT_GROUP} entry point '{entry.name}' ({entry.value}) does not load "
                f"({type(e).__name__}: {e}); its {what} are left out",
                KaioPipelineWarning,
                stacklevel=3,
            )
            continue
        for name, factory in items.items():
            found.setdefault(name, factory)
    return found
