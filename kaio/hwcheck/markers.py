"""Progress markers for ``python -m kaio.hwcheck``: a benchmark calls ``running("matmul ws f16
4096x4096x4096")`` before each kernel it times (the pytest plugin does it before each test), and
when a section hangs hwcheck names the last marker it left. Outside hwcheck
(``KAIO_HWCHECK_MARKERS`` unset) ``running`` does nothing, so the scripts print only their
tables."""

from __future__ import annotations

import os

MARKERS_ENV = "KAIO_HWCHECK_MARKERS"


def running(what: str) -> None:
    """Record that ``what`` starts now (appended and closed at once: a killed process keeps it)."""
    path = os.environ.get(MARKERS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as markers:
            markers.write(" ".join(what.split()) + "\n")


def last_marker(path: str | os.PathLike[str]) -> str | None:
    """The last marker written to ``path``, or None before the first."""
    try:
        with open(path, encoding="utf-8") as markers:
            lines = markers.read().splitlines()
    except FileNotFoundError:
        return None
    return lines[-1] if lines else None
