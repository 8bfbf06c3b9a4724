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
from kaio.ops_library.autograd import register_autograd
from kaio.ops_library.torch_checks import check_matmul

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


# --- the library ops ---------------------------------------------------------------------------


@torch.library.custom_op("kaio::matmul", mutates_args=())
def _matmul(
    a: Tensor, b: Tensor, alpha: float = 1.0, beta: float = 0.0, config: str | None = None,
    bias: Tensor | None = None, activation: str | None = None, *, device: str | None = None,
) -> Tensor:  # fmt: skip
    from kaio.ops_library import matmul
    from kaio.ops_library.autograd import op_device

    check_matmul(a, b, bias, activation)
    return matmul.run(a, b, alpha=alpha, beta=beta, config=config, bias=bias, activation=activation,  # type: ignore[no-any-return]
                      device=op_device(device))  # fmt: skip


@_matmul.register_fake
def _(a: Tensor, b: Tensor, alpha: float = 1.0, beta: float = 0.0, config: str | None = None,
      bias: Tensor | None = None, activation: str | None = None, *, device: str | None = None,
      ) -> Tensor:  # fmt: skip
    check_matmul(a, b, bias, activation)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.float32)


@torch.library.custom_op("kaio::matmul_backward", mutates_args=())
def _matmul_backward(grad: Tensor, a: Tensor, b: Tensor, alpha: float, bias_dtype: torch.dtype | None, *,
                     device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """dA, dB and dbias (an empty tensor without a bias) of ``alpha * A @ B + bias``."""
    from kaio.ops_library.autograd import op_device
    from kaio.ops_library.matmul_backward import matmul_backward
    from kaio.runtime import tensors

    bias = None if bias_dtype is None else tensors.kaio_type(bias_dtype)
    da, db, dbias = matmul_backward(grad, a, b, alpha=alpha, bias=bias, device=op_device(device))
    return da, db, dbias if dbias is not None else grad.new_empty((0,))


@_matmul_backward.register_fake
def _(grad: Tensor, a: Tensor, b: Tensor, alpha: float, bias_dtype: torch.dtype | None, *,
      device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    check_matmul(a, b, None, None)
    n = b.shape[1] if bias_dtype is not None else 0
    return torch.empty_like(a), torch.empty_like(b), grad.new_empty((n,), dtype=bias_dtype or grad.dtype)


def _activation_slope(pre: Tensor, activation: str) -> Tensor:
    """d act / d pre for the fused epilogue's activations (gelu in tanh form, as the kernel)."""
    if activation == "relu":
        return (pre > 0).to(pre.dtype)
    if activation == "silu":
        s = torch.sigmoid(pre)
        return s * (1 + pre * (1 - s))
    k = 0.7978845608028654
    t = torch.tanh(k * (pre + 0.044715 * pre**3))
    return 0.5 * (1 + t) + 0.5 * pre * (1 - t * t) * k * (1 + 3 * 0.044715 * pre * pre)


def _matmul_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    a, b, alpha, _beta, config, bias, activation = inputs  # beta scales a C that is zero here
    ctx.alpha, ctx.config, ctx.activation = alpha, config, activation
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.save_for_backward(a, b, bias)


def _matmul_grad(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    a, b, bias = ctx.saved_tensors
    grad = grad.contiguous()
    if ctx.activation is not None:  # the pre-activation, recomputed rather than saved
        pre = torch.ops.kaio.matmul(a, b, ctx.alpha, 0.0, ctx.config, bias, None, device=ctx.kaio_device)
        grad = grad * _activation_slope(pre, ctx.activation)
    da, db, dbias = torch.ops.kaio.matmul_backward(grad, a, b, ctx.alpha, ctx.bias_dtype, device=ctx.kaio_device)
    return da, db, None, None, None, (dbias if bias is not None else None), None


register_autograd(_matmul, _matmul_grad, _matmul_setup)


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
    *,
    device: str | None = None,
) -> None:
    from kaio.ops_library import matmul
    from kaio.ops_library.autograd import op_device

    check_matmul(a, b, bias, activation)
    matmul.run(a, b, out, alpha=alpha, beta=beta, config=config, bias=bias, activation=activation,
               device=op_device(device))  # fmt: skip


@_matmul_out.register_fake
def _(a: Tensor, b: Tensor, out: Tensor, alpha: float = 1.0, beta: float = 0.0,
      config: str | None = None, bias: Tensor | None = None, activation: str | None = None, *,
      device: str | None = None) -> None:  # fmt: skip
    check_matmul(a, b, bias, activation)  # out's shape, type and overlap: the real op only
    return None


def matmul_op(
    a: Tensor, b: Tensor, *, alpha: float = 1.0, beta: float = 0.0, bias: Tensor | None = None,
    activation: str | None = None, config: Any = None, device: Any = None,
) -> Tensor:  # fmt: skip
    """``kaio.ops_library.matmul(a, b)`` for torch tensors: ``torch.ops.kaio.matmul`` (f32 result
    allocated by torch on the inputs' device). ``device=`` with tensors that require grad, or
    traced by ``torch.compile``: the custom op on that device, its backward too
    (``kaio.ops_library.autograd``); eager without grad, the op directly."""
    from kaio.ops_library.autograd import route

    ops = route(torch.ops.kaio, (a, b, bias), device)
    if ops is None:  # device= in eager mode without grad: run the op directly
        from kaio.ops_library import matmul

        return matmul.run(a, b, alpha=alpha, beta=beta, bias=bias, activation=activation, config=config, device=device)  # type: ignore[no-any-return]
    return ops.matmul(a, b, float(alpha), float(beta), config, bias, activation)  # type: ignore[no-any-return]


def matmul_out_op(
    a: Tensor, b: Tensor, out: Tensor, *, alpha: float = 1.0, beta: float = 0.0,
    bias: Tensor | None = None, activation: str | None = None, config: Any = None, device: Any = None,
) -> Tensor:  # fmt: skip
    """``kaio.ops_library.matmul(a, b, out=c)`` for torch tensors: ``torch.ops.kaio.matmul_out``
    (writes ``out``, returns it; ``device=`` carried as the matmul op's). Tensors that require
    grad are refused: an op writing ``out`` records no gradient (torch refuses ``out=`` with
    autograd too)."""
    from kaio.ops_library.autograd import needs_grad

    if needs_grad(a, b, out, bias):
        raise KaioTypeError(
            "matmul: `out=` records no gradient and an input requires grad; call matmul(a, b) "
            "without out= (or under torch.no_grad())"
        )
    if device is not None and not torch.compiler.is_compiling():  # eager: the op directly
        from kaio.ops_library import matmul

        return matmul.run(a, b, out, alpha=alpha, beta=beta, bias=bias, activation=activation, config=config, device=device)  # type: ignore[no-any-return]
    from kaio.ops_library.autograd import device_label

    torch.ops.kaio.matmul_out(a, b, out, float(alpha), float(beta), config, bias, activation, device=device_label(device))
    return out


# the memory-bound library ops (torch.ops.kaio.softmax, layer_norm, rms_norm, add_rms_norm, rope,
# gated_activation, cross_entropy): registered by their own module, loaded here
import kaio.ops_library.torch_ops  # noqa: E402, F401
