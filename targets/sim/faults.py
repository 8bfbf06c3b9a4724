"""Faults raised inside instruction closures, before the executor knows where it is.

A closure only knows batch-local thread indices. The executor catches these, adds the kernel
name, the PTX line and the thread/block coordinates, and raises the public kaio error.
"""

from __future__ import annotations


class DecodeError(Exception):
    """An instruction the decoder cannot turn into an op (unknown mnemonic or modifier, bad
    operand). The loader adds the line and raises KaioLaunchError."""


class SimFault(Exception):
    """A runtime fault of one thread: ``memory`` faults become KaioMemoryError, the rest
    KaioSimError. ``thread`` is the batch-local index of the first faulting thread; ``extra``
    holds attributes the public error carries as well (a race's other thread and line)."""

    def __init__(self, kind: str, message: str, thread: int, address: int | None = None, extra: dict[str, object] | None = None):
        self.kind = kind
        self.message = message
        self.thread = thread
        self.address = address
        self.extra = extra or {}
        super().__init__(message)


def first_fault(mask, idx, kind: str, message: str, addresses=None) -> SimFault:  # type: ignore[no-untyped-def]
    """The fault of the lowest-numbered thread where ``mask`` holds (mask is over ``idx``)."""
    import numpy as np

    k = int(np.flatnonzero(mask)[0])
    thread = k if idx is None else int(idx[k])
    address = None
    if addresses is not None:
        a = np.asarray(addresses)
        address = int(a.reshape(-1)[k] if a.ndim and a.size > 1 else a.reshape(-1)[0])
    return SimFault(kind, message, thread, address)
