"""Torch tensors that require grad through the library ops: the graph is recorded, or an error.

A library op called with torch tensors goes through its ``torch.ops.kaio`` custom op, whose
``torch.library.register_autograd`` backward records the graph. Two calls need more than that:

* ``device=`` with tensors that require grad: a kaio device is no schema type, so the call
  runs the custom op inside :func:`on_device` and the op's implementation launches on
  :func:`scoped_device` (the backward's kernels run on the tensors' own device: their GPU, or
  the default simulator for CPU tensors). Without grad, ``device=`` runs the op directly.
* an op whose backward is not registered: a ``KaioTypeError`` at the call, naming the op,
  instead of torch's error at ``backward()`` (or no error at all, had the op been run directly
  as the custom op's implementation does).

Nothing here imports torch: whoever holds a tensor imported it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kaio.errors import KaioTypeError

_DEVICE: ContextVar[Any] = ContextVar("kaio_op_device", default=None)


def needs_grad(*values: Any) -> bool:
    """Whether autograd would record a call on these values: grad mode on and a tensor among
    them requires grad."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return False
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


@contextmanager
def on_device(device: Any) -> Iterator[None]:
    """Run custom ops launched inside on ``device`` (a kaio Device or what ``Device()`` takes)."""
    from kaio.runtime.device import Device

    token = _DEVICE.set(Device(device))
    try:
        yield
    finally:
        _DEVICE.reset(token)


def scoped_device() -> Any:
    """The device :func:`on_device` set, else None (the operands' device)."""
    return _DEVICE.get()


def has_backward(qualname: str) -> bool:
    """Whether the custom op ``namespace::name`` has a backward (``register_autograd``). An op
    torch does not know as a Python custom op counts as having one: torch checks it."""
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(qualname)
    return opdef is None or opdef._backward_fn is not None


def require_backward(op: str, qualname: str) -> None:
    if not has_backward(qualname):
        raise KaioTypeError(
            f"{op}: has no backward yet, and an input requires grad; call it under "
            "torch.no_grad() or pass detached tensors (x.detach())"
        )


def refuse_grad(op: str, *values: Any, why: str = "it has no backward of its own") -> None:
    """For a function that runs kernels directly on torch tensors (no custom op, so nothing
    would record a gradient): a KaioTypeError when a tensor among ``values`` requires grad."""
    if needs_grad(*values):
        raise KaioTypeError(
            f"{op}: records no gradient ({why}), and an input requires grad; call it under "
            "torch.no_grad() or pass detached tensors"
        )


class GradOps:
    """``torch.ops.kaio`` for a call whose tensors require grad: each op checks that it has a
    backward and runs on ``device`` (None: the tensors' device)."""

    def __init__(self, namespace: Any, device: Any) -> None:
        self._namespace = namespace
        self._device = device

    def __getattr__(self, name: str) -> Callable[..., Any]:
        op = getattr(self._namespace, name)

        def call(*args: Any) -> Any:
            require_backward(name, f"kaio::{name}")
            if self._device is None:
                return op(*args)
            with on_device(self._device):
                return op(*args)

        return call


def route(namespace: Any, values: tuple[Any, ...], device: Any) -> Any:
    """What a library op called with torch ``values`` runs: ``namespace`` (``torch.ops.kaio``)
    when no grad is needed and no device is named, :class:`GradOps` when grad is needed, None
    (the op runs directly, on ``device``) when a device is named and no grad is needed."""
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():  # traced: Dynamo needs the ops themselves
        return namespace
    if needs_grad(*values):
        return GradOps(namespace, device)
    return namespace if device is None else None
