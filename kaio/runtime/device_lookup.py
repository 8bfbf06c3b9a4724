"""How the modules below ``device.py`` (streams, tensors) find a device without importing
``device.py`` back: ``device.py`` offers ``dev.stream()``/``dev.event()`` and so imports them,
and a module must not import its assembler back (the imports point one way).

``device.py`` installs :class:`~kaio.runtime.device.Device` here when it loads; importing any
``kaio.runtime`` module loads the package first, whose ``__init__`` imports ``device.py``, so
the lookup is always installed before anyone can ask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kaio.runtime.device import Device

_lookup: Callable[[Any], Device] | None = None


def install(lookup: Callable[[Any], Device]) -> None:
    """Called once by ``device.py``: ``lookup(which)`` is ``Device(which)``."""
    global _lookup
    _lookup = lookup


def device(which: Any = None) -> Device:
    """``Device(which)``: None is the default device, an int a CUDA ordinal."""
    assert _lookup is not None, "kaio.runtime.device installs the device lookup when it loads"
    return _lookup(which)
