"""``pytest -p kaio.hwcheck.pytest_plugin``: a hwcheck marker before each test, so a test that
hangs the GPU is named in the report (see :mod:`kaio.hwcheck.markers`)."""

from __future__ import annotations

from kaio.hwcheck.markers import running


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    running(nodeid)
