"""kaio inside PyTorch programs: the library ops as ``torch.library`` custom ops, and a decorator
that makes a user's kernel wrapper one.

    import kaio.torch                                   # registers torch.ops.kaio.*

    @torch.compile(fullgraph=True)
    def f(a, b):
        return torch.relu(kaio.ops_library.matmul(a, b))   # one opaque op in the graph

    @kaio.torch.custom_op("mylib::add_one", mutates_args=("x",))
    def add_one(x: torch.Tensor) -> None:
        add_one_kernel[kaio.cdiv(x.numel(), 256)](x, x.numel())

    @kaio.torch.custom_op("mylib::bias_gelu", mutates_args=(), fake=..., backward=bias_gelu_grad)
    def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor: ...   # trainable

    def bias_gelu_grad(saved, grad):              # saved.x, saved.bias, saved.output
        dx = ...                                  # another kaio kernel
        return dx, dx.sum(0)                      # one gradient per argument

Custom ops are what ``torch.compile`` (and ``torch.export``, and torch.distributed programs)
treat as a black box: Dynamo does not trace into them, and their *fake* implementation tells it
the shape, dtype and device of the results without running anything. ``kaio.ops_library.matmul``
called with torch tensors goes through ``torch.ops.kaio.matmul`` (or ``matmul_out`` with
``out=``) by itself, so the same code runs eagerly and compiled.

Importing this module imports torch and registers the library ops (``register_torch_ops``: the
list in ``kaio.ops_library.torch_registration``, which an op's first call with torch tensors runs
too, so importing this module first is not required); ``import kaio`` never imports torch
(``kaio.torch`` loads on first attribute access).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from kaio.errors import KaioTypeError
from kaio.ops_library.matmul import matmul_op, matmul_out_op
from kaio.ops_library.torch_registration import register_torch_ops

__all__ = ["Saved", "custom_op", "matmul_op", "matmul_out_op"]


def custom_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: str | Iterable[str],
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    fake: Callable[..., Any] | None = None,
    backward: Callable[..., Any] | None = None,
) -> Any:
    """``torch.library.custom_op`` for kaio kernel wrappers (``"namespace::name"``; type
    annotations give the schema, as torch requires).

    ``fake``: the fake (meta) implementation ``torch.compile`` traces with; it gets tensors
    without data and returns empty results of the right shape, dtype and device. A wrapper
    annotated ``-> None`` (it writes its ``mutates_args`` in place) needs none: kaio registers one
    that does nothing. Otherwise register it later with ``@op.register_fake``.

    ``backward``: makes the op trainable. ``backward(saved, *grads)`` gets a :class:`Saved`
    (the op's arguments by name and its ``output``, as the forward saw them) and one gradient
    per result (None where a result got none), and returns one gradient per argument, in order:
    a tensor of that argument's shape, or None (non-tensor arguments, or no gradient); a
    shorter tuple ends with Nones, and a lone tensor is the first argument's gradient. Every
    tensor argument and result is saved for the backward (through ``ctx.save_for_backward``).
    The backward runs as a custom op of its own, ``<name>_backward`` (AOT autograd and
    ``torch.compile`` see it as one opaque op, as they see the forward), so it may launch
    kernels, allocate and read shapes as plain ints.
    Ops that mutate an argument (``mutates_args``) cannot take one: torch records no gradient
    for writes in place. Without ``backward``, an op called with tensors that require grad
    raises at ``backward()`` (torch's rule for custom ops): no gradient is dropped.
    """

    if backward is not None and not callable(backward):
        raise KaioTypeError(f"kaio.torch.custom_op({name!r}): backward must be a function, got {backward!r}")
    if backward is not None and (mutates_args == "unknown" or (not isinstance(mutates_args, str) and tuple(mutates_args))):
        raise KaioTypeError(
            f"kaio.torch.custom_op({name!r}): backward= needs an op that returns its results "
            f"(mutates_args=()), not one writing {mutates_args!r} in place"
        )

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
        if backward is not None:
            _register_backward(name, op, backward)
        return op

    return register if fn is None else register(fn)


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


class Saved:
    """What a ``custom_op`` backward gets: the forward's arguments as attributes named after
    its parameters, and ``output`` (its result, a tensor or a tuple)."""

    def __init__(self, arguments: dict[str, Any], output: Any) -> None:
        self.__dict__.update(arguments)
        self.output = output

    def __repr__(self) -> str:
        return f"Saved({', '.join(sorted(self.__dict__))})"


def _register_backward(name: str, op: Any, backward: Callable[..., Any]) -> None:
    """``torch.library.register_autograd`` for a kaio ``backward(saved, *grads)``.

    The user's backward launches kernels, which AOT autograd cannot trace: it runs as a second
    custom op, ``<name>_backward``, taking the forward's arguments, its results and their
    gradients and returning one gradient per tensor argument passed (its fake: empty tensors of
    their shapes). Compiled, the backward graph holds that one opaque op."""
    schema = op._opoverload._schema
    params = [a.name for a in schema.arguments]
    if any(str(r.type) != "Tensor" for r in schema.returns):
        raise KaioTypeError(f"kaio.torch.custom_op({name!r}): backward= needs an op returning tensors, got {schema}")
    outputs, tuple_output = len(schema.returns), str(schema).rstrip().endswith(")")
    signature = ", ".join(
        [*_schema_arguments(str(schema)), *(f"Tensor output{i}" for i in range(outputs)),
         *(f"Tensor? grad{i}" for i in range(outputs))]
    )  # fmt: skip

    def run_backward(*args: Any) -> list[Tensor]:
        inputs, outs, grads = args[: len(params)], args[len(params) : len(params) + outputs], args[len(params) + outputs :]
        saved = Saved(dict(zip(params, inputs, strict=True)), outs if tuple_output else outs[0])
        result = backward(saved, *grads)
        result = (result,) if result is None or isinstance(result, Tensor) else tuple(result)
        if len(result) > len(params):
            raise KaioTypeError(f"{name} backward: returned {len(result)} gradients for {len(params)} arguments {params}")
        result = (*result, *(None,) * (len(params) - len(result)))
        return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, result, strict=True)
                if isinstance(x, Tensor)]  # fmt: skip

    def fake_backward(*args: Any) -> list[Tensor]:
        return [torch.empty_like(x) for x in args[: len(params)] if isinstance(x, Tensor)]

    grad_op = torch.library.custom_op(f"{name}_backward", run_backward, mutates_args=(), schema=f"({signature}) -> Tensor[]")
    grad_op.register_fake(fake_backward)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        values = (*inputs, *(output if isinstance(output, tuple) else (output,)))
        tensors = [isinstance(v, Tensor) for v in values]
        ctx.save_for_backward(*(v for v, t in zip(values, tensors, strict=True) if t))
        ctx.kaio_values = [None if t else v for v, t in zip(values, tensors, strict=True)]
        ctx.kaio_tensors = tensors

    def grad(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        saved = iter(ctx.saved_tensors)
        values = [next(saved) if t else v for v, t in zip(ctx.kaio_values, ctx.kaio_tensors, strict=True)]
        per_tensor = iter(grad_op(*values, *grads))
        return tuple(next(per_tensor) if isinstance(v, Tensor) else None for v in values[: len(params)])

    op.register_autograd(grad, setup_context=setup_context)


def _schema_arguments(schema: str) -> list[str]:
    """``"Type name"`` of each argument of a schema string, without defaults."""
    inside = schema[schema.index("(") + 1 : schema.index(") ->")]
    parts, depth, current = [], 0, ""
    for ch in inside:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return [p.split("=")[0].strip() for p in parts]


# the library ops: torch.ops.kaio.*, each module of the torch layer registering its own
register_torch_ops()
