"""kaio inside PyTorch programs: the library ops as ``torch.library`` custom ops, and a decorator
that makes a user's kernel wrapper one.

    import kaio.torch                                   # registers torch.ops.kaio.*

    @torch.compile(fullgraph=True)
    def f(a, b):
        return torch.relu(kaio.ops_library.matmul(a, b))   # one opaque op in the graph

    @kaio.torch.custom_op("mylib::add_one", mutates_args=("x",))
    def add_one(x: torch.Tensor) -> None:
        add_one_kernel[kaio.cdiv(x.numel(), 256)](x, x.numel())

Custom ops are what ``torch.compile`` (and ``torch.export``, and torch.distributed programs)
treat as a black box: Dynamo does not trace into them, and their *fake* implementation tells it
the shape, dtype and device of the results without running anything. ``kaio.ops_library.matmul``
called with torch tensors goes through ``torch.ops.kaio.matmul`` (or ``matmul_out`` with
``out=``) by itself, so the same code runs eagerly and compiled.

Importing this module imports torch; ``import kaio`` never does (``kaio.torch`` loads on first
attribute access).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from kaio.errors import KaioTypeError
from kaio.ops_library.torch_checks import check_matmul

__all__ = ["custom_op", "matmul_op", "matmul_out_op"]


def custom_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: str | Iterable[str],
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    fake: Callable[..., Any] | None = None,
) -> Any:
    """``torch.library.custom_op`` for kaio kernel wrappers (``"namespace::name"``; type
    annotations give the schema, as torch requires).

    ``fake``: the fake (meta) implementation ``torch.compile`` traces with; it gets tensors
    without data and returns empty results of the right shape, dtype and device. A wrapper
    annotated ``-> None`` (it writes its ``mutates_args`` in place) needs none: kaio registers one
    that does nothing. Otherwise register it later with ``@op.register_fake``.
    """

    def register(func: Callable[..., Any]) -> Any:
        try:
            op = torch.library.custom_op(
                name, func, mutates_args=mutates_args, device_types=device_types, schema=schema
            )
        except (ValueError, RuntimeError) as exc:
            raise KaioTypeError(f"kaio.torch.custom_op({name!r}): {exc}") from None
        if fake is not None:
            op.register_fake(fake)
        elif inspect.signature(func).return_annotation in (None, "None"):
            op.register_fake(_nothing)
        return op

    return register if fn is None else register(fn)


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


# --- the library ops ---------------------------------------------------------------------------


@torch.library.custom_op("kaio::matmul", mutates_args=())
def _matmul(
    a: Tensor, b: Tensor, alpha: float = 1.0, beta: float = 0.0, config: str | None = None,
    bias: Tensor | None = None, activation: str | None = None,
) -> Tensor:  # fmt: skip
    from kaio.ops_library import matmul
    from kaio.ops_library.autograd import scoped_device

    check_matmul(a, b, bias, activation)
    return matmul.run(a, b, alpha=alpha, beta=beta, config=config, bias=bias, activation=activation,  # type: ignore[no-any-return]
                      device=scoped_device())  # fmt: skip


@_matmul.register_fake
def _(a: Tensor, b: Tensor, alpha: float = 1.0, beta: float = 0.0, config: str | None = None,
      bias: Tensor | None = None, activation: str | None = None) -> Tensor:  # fmt: skip
    check_matmul(a, b, bias, activation)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.float32)


@torch.library.custom_op("kaio::matmul_out", mutates_args=("out",))
def _matmul_out(
    a: Tensor,
    b: Tensor,
    out: Tensor,
    alpha: float = 1.0,
    beta: float = 0.0,
    config: str | None = None,
    bias: Tensor | None = None,
    activation: str | None = None,
) -> None:
    from kaio.ops_library import matmul

    check_matmul(a, b, bias, activation)
    matmul.run(a, b, out, alpha=alpha, beta=beta, config=config, bias=bias, activation=activation)


@_matmul_out.register_fake
def _(a: Tensor, b: Tensor, out: Tensor, alpha: float = 1.0, beta: float = 0.0,
      config: str | None = None, bias: Tensor | None = None, activation: str | None = None) -> None:  # fmt: skip
    check_matmul(a, b, bias, activation)  # out's shape, type and overlap: the real op only
    return None


def matmul_op(
    a: Tensor, b: Tensor, *, alpha: float = 1.0, beta: float = 0.0, bias: Tensor | None = None,
    activation: str | None = None, config: Any = None, device: Any = None,
) -> Tensor:  # fmt: skip
    """``kaio.ops_library.matmul(a, b)`` for torch tensors: ``torch.ops.kaio.matmul`` (f32 result
    allocated by torch on the inputs' device). ``device=`` with tensors that require grad: the
    custom op on that device (``kaio.ops_library.autograd``); without grad, the op directly."""
    from kaio.ops_library.autograd import route

    ops = route(torch.ops.kaio, (a, b, bias), device)
    if ops is None:  # a kaio device is no schema type: run the op directly
        from kaio.ops_library import matmul

        return matmul.run(a, b, alpha=alpha, beta=beta, bias=bias, activation=activation, config=config, device=device)  # type: ignore[no-any-return]
    return ops.matmul(a, b, float(alpha), float(beta), config, bias, activation)  # type: ignore[no-any-return]


def matmul_out_op(
    a: Tensor, b: Tensor, out: Tensor, *, alpha: float = 1.0, beta: float = 0.0,
    bias: Tensor | None = None, activation: str | None = None, config: Any = None, device: Any = None,
) -> Tensor:  # fmt: skip
    """``kaio.ops_library.matmul(a, b, out=c)`` for torch tensors: ``torch.ops.kaio.matmul_out``
    (writes ``out``, returns it). Tensors that require grad are refused: an op writing ``out``
    records no gradient (torch refuses ``out=`` with autograd too)."""
    from kaio.ops_library.autograd import needs_grad

    if needs_grad(a, b, out, bias):
        raise KaioTypeError(
            "matmul: `out=` records no gradient and an input requires grad; call matmul(a, b) "
            "without out= (or under torch.no_grad())"
        )
    if device is not None:
        from kaio.ops_library import matmul

        return matmul.run(a, b, out, alpha=alpha, beta=beta, bias=bias, activation=activation, config=config, device=device)  # type: ignore[no-any-return]
    torch.ops.kaio.matmul_out(a, b, out, float(alpha), float(beta), config, bias, activation)
    return out


# the memory-bound library ops (torch.ops.kaio.softmax, layer_norm, rms_norm, add_rms_norm, rope,
# gated_activation, cross_entropy): registered by their own module, loaded here
import kaio.ops_library.torch_ops  # noqa: E402, F401
