"""Torch tensors through the library ops: the caller's ``device=`` carried, the graph recorded,
or an error.

A library op called with torch tensors goes through its ``torch.ops.kaio`` custom op, whose
``torch.library.register_autograd`` backward records the graph. Two calls need more than that:

* ``device=``: a kaio device is no schema type, so every kaio custom op takes it as a string,
  the keyword-only ``device`` argument (:func:`device_label`: ``"sim:sm_90a"``, ``"cuda:0"``,
  ``"cuda:0@sm_90a"``); the op's implementation launches on :func:`op_device`. A call with
  tensors that require grad, or one traced by ``torch.compile``, passes it to the custom op
  (:class:`DeviceOps`), and the op's backward launches its kernels on the same device; eager
  without grad, ``device=`` runs the op directly.
* an op whose backward is not registered: a ``KaioTypeError`` at the call, naming the op
  (traced by ``torch.compile``: the cause of the compile error), instead of torch's error at
  ``backward()`` (or no error at all, had the op been run directly as the custom op's
  implementation does).

The custom ops themselves are the torch layer, above the op modules: each module of it has a
``register()``, and ``torch_registration`` runs them all, once. The op modules never import that
layer; :func:`kaio_ops` loads it on the first call with torch tensors (``import kaio.torch``
does too).

Nothing here imports torch: whoever holds a tensor imported it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kaio.errors import KaioTypeError, KaioValueError

_DEVICE: ContextVar[Any] = ContextVar("kaio_op_device", default=None)


def kaio_ops() -> Any:
    """``torch.ops.kaio`` with kaio's custom ops in it: the first call registers them
    (``torch_registration.register_torch_ops``: once, thread-safe).

    The one place below the torch layer that loads it. The op modules never import that layer,
    yet an op's first call with torch tensors must find its custom op without the user having
    imported ``kaio.torch``: this loads the layer by name, as a plugin, on that call; the import
    graph leaves this one edge out and tests/test_import_layering.py checks it is the only one.
    An import statement, not ``importlib``: ``torch.compile`` tracing a first call runs an
    import (and ``register_torch_ops``, marked a constant for it) but not ``importlib``."""
    from kaio.ops_library.torch_registration import register_torch_ops

    register_torch_ops()
    return sys.modules["torch"].ops.kaio


def needs_grad(*values: Any) -> bool:
    """Whether autograd would record a call on these values: grad mode on and a tensor among
    them requires grad."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return False
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


def define_op(qualname: str, impl: Callable[..., Any], fake: Callable[..., Any],
              mutates_args: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """``torch.library.custom_op(qualname, impl)`` (its schema from ``impl``'s annotations) with
    ``fake`` as its fake implementation: what a torch module's ``register()`` defines an op with."""
    op = sys.modules["torch"].library.custom_op(qualname, impl, mutates_args=mutates_args)
    op.register_fake(fake)
    return op


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


def device_label(device: Any) -> str | None:
    """``device`` (a kaio Device or what ``Device()`` takes; None: the operands' device) as the
    custom ops' ``device`` argument carries it: ``"sim:<arch>"``, ``"cuda:<n>"`` or
    ``"cuda:<n>@<arch>"`` (a compile target asked for). What ``Device()`` refuses raises here,
    with its error. ``torch_ops`` marks it for ``torch.compile`` as a function whose result is a
    constant: Dynamo runs it while tracing and keeps the string (on registration)."""
    if device is None:
        return None
    from kaio.runtime.device import Device

    kind, value, asked = Device(device)._identity
    if kind == "sim":
        return f"sim:{value}"
    return f"cuda:{value}" if asked is None else f"cuda:{value}@{asked}"


def op_device(label: str | None) -> Any:
    """The device a custom op launches on: the one its ``device`` argument names, else the one
    :func:`on_device` set, else None (the operands' device)."""
    if label is None:
        return scoped_device()
    from kaio.runtime.device import Device

    which, _, arch = label.partition("@")
    return Device(which, arch=arch or None)


def register_autograd(op: Any, backward: Callable[..., Any], setup_context: Callable[..., None]) -> None:
    """``torch.library.register_autograd`` for a kaio custom op (a ``CustomOpDef`` or its
    ``"kaio::name"``): ``setup_context(ctx, inputs, output)`` sees the positional arguments as
    usual, and ``ctx.kaio_device`` holds the op's ``device`` argument, for the backward to pass
    to the ops it runs (``device=ctx.kaio_device``): the backward launches where the forward
    did, compiled or not."""

    def setup(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any) -> None:
        ctx.kaio_device = keyword_only_inputs.get("device")
        setup_context(ctx, inputs, output)

    if isinstance(op, str):
        sys.modules["torch"].library.register_autograd(op, backward, setup_context=setup)
    else:
        op.register_autograd(backward, setup_context=setup)


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


def refuse_traced(op: str, *values: Any) -> None:
    """For a function that runs kernels directly on torch tensors (no custom op): a
    KaioValueError while ``torch.compile`` traces it with a tensor among ``values`` (the cause
    of the compile error), instead of Dynamo failing somewhere inside kaio's launch code."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.compiler.is_compiling() and any(isinstance(v, torch.Tensor) for v in values):
        direct_run_traced(op)


def direct_run_traced(op: str) -> None:
    """Raises; ``torch_ops`` marks it a constant for Dynamo, so it raises while tracing."""
    raise KaioValueError(
        f"{op}: this call runs its kernels directly on the tensors (not through a torch.ops.kaio "
        "custom op), which torch.compile cannot trace; call it outside the compiled function "
        "(or in one wrapped with torch.compiler.disable)"
    )


def refuse_grad(op: str, *values: Any, why: str = "it has no backward of its own") -> None:
    """For a function that runs kernels directly on torch tensors (no custom op, so nothing
    would record a gradient): a KaioTypeError when a tensor among ``values`` requires grad,
    and :func:`refuse_traced` under ``torch.compile``."""
    refuse_traced(op, *values)
    if needs_grad(*values):
        raise KaioTypeError(
            f"{op}: records no gradient ({why}), and an input requires grad; call it under "
            "torch.no_grad() or pass detached tensors"
        )


class DeviceOps:
    """``torch.ops.kaio`` with the caller's device: each op gets ``device=`` (a
    :func:`device_label`) and, when ``grad`` is set, first checks that it has a backward."""

    def __init__(self, namespace: Any, device: str | None, grad: bool = False) -> None:
        self._namespace = namespace
        self._device = device
        self._grad = grad

    def __getattr__(self, name: str) -> Callable[..., Any]:
        op = getattr(self._namespace, name)

        def call(*args: Any) -> Any:
            if self._grad:
                require_backward(name, f"kaio::{name}")
            return op(*args, device=self._device)

        return call


def route(values: tuple[Any, ...], device: Any) -> Any:
    """What a library op called with torch ``values`` runs: ``torch.ops.kaio`` (its ops
    registered on first use: :func:`kaio_ops`) when no device is named and no grad is needed;
    :class:`DeviceOps` otherwise, eager with grad or traced by ``torch.compile`` (the device
    carried by the custom op's ``device`` argument, the backward checked when grad is needed);
    None (the op runs directly, on ``device``) when a device is named in eager mode and no grad
    is needed."""
    torch, namespace = sys.modules["torch"], kaio_ops()
    if torch.compiler.is_compiling():  # traced: Dynamo needs the ops themselves
        grad = needs_grad(*values)
        return namespace if device is None and not grad else DeviceOps(namespace, device_label(device), grad)
    if needs_grad(*values):
        return DeviceOps(namespace, device_label(device), grad=True)
    return namespace if device is None else None
