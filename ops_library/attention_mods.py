"""Score and mask functions of attention (FlexAttention's ``score_mod`` and ``mask_mod``),
compiled into the forward kernel.

A user writes each as an ordinary Python function of one score, with FlexAttention's meaning:
``score_mod(score, b, h, q_idx, kv_idx, *mod_args) -> score`` sees the scaled score
(``q . k * scale``) and ``mask_mod(b, h, q_idx, kv_idx, *mod_args) -> bool`` says whether query
``q_idx`` sees key ``kv_idx``. The kernel calls it on whole tiles of scores as a ``@kaio.device``
function, so it is compiled element by element with the scalar semantics (kaio's operators,
``kt.where``, ``kt.tanh`` and the other math builtins, loads ``docs[q_idx]`` of the arrays in
``mod_args``). The kernel has :data:`MAX_MOD_ARGS` array slots; an adapter of the function's
arity passes it the slots it takes, and declares the result type (``f32`` or ``bool``) so a
function that returns anything else is a compile error naming it.

The backward needs ``d score_mod / d score`` too: :func:`mods_of` with ``grad=True`` adds the
derivative kaio derives from the function's syntax (:mod:`kaio.frontend.derivative`), or
refuses, naming the construct it cannot differentiate.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import kaio
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.prelude import bool_, f32  # the adapters' return annotations, read when compiled

MAX_MOD_ARGS = 4
SCORE_PARAMS = ("score", "b", "h", "q_idx", "kv_idx")
MASK_PARAMS = ("b", "h", "q_idx", "kv_idx")


@dataclass(frozen=True)
class AttentionMods:
    """What the forward kernel is specialized for: the adapted functions and the element types
    of the ``mod_args`` arrays (unused slots: i32)."""

    score: Any = None
    mask: Any = None
    arg_types: tuple[dtypes.ScalarType, ...] = (dtypes.i32,) * MAX_MOD_ARGS
    score_grad: Any = None  # d score / d its first argument, for the backward (``grad=True``)

    @property
    def any(self) -> bool:
        return self.score is not None or self.mask is not None


NO_MODS = AttentionMods()


def mods_of(op: str, score_mod: Any, mask_mod: Any, arg_types: tuple[dtypes.ScalarType, ...],
            grad: bool = False, arg_shapes: tuple[tuple[int, ...], ...] = ()) -> AttentionMods:  # fmt: skip
    """The kernel's specialization for these functions and ``mod_args`` element types (and
    shapes: an array of two dims or more is indexed ``bias[h, kv_idx]``, its trailing sizes
    compiled in), each function checked to take its parameters and one per ``mod_args`` entry;
    with ``grad``, the score function's derivative too (the backward's)."""
    if len(arg_types) > MAX_MOD_ARGS:
        raise KaioTypeError(f"{op}: `mod_args` holds at most {MAX_MOD_ARGS} arrays, got {len(arg_types)}")
    if score_mod is None and mask_mod is None:
        if arg_types:
            raise KaioTypeError(f"{op}: `mod_args` are the arguments of a `score_mod` or `mask_mod`, and neither is given")
        return NO_MODS
    n = len(arg_types)
    slots = tuple(arg_types) + (dtypes.i32,) * (MAX_MOD_ARGS - n)
    # only a multi-dimensional array's shape specializes the kernel (a 1-D one is indexed flat)
    shapes = tuple(tuple(int(d) for d in s) if len(s) >= 2 else None for s in arg_shapes) if arg_shapes else (None,) * n
    score = _adapted(score_mod, n, "score", shapes) if _checked(op, "score_mod", score_mod, SCORE_PARAMS, n) else None
    mask = _adapted(mask_mod, n, "mask", shapes) if _checked(op, "mask_mod", mask_mod, MASK_PARAMS, n) else None
    score_grad = _adapted(score_mod, n, "score_grad", shapes) if grad and score is not None else None
    return AttentionMods(score, mask, slots, score_grad)


def _checked(op: str, name: str, fn: Any, params: tuple[str, ...], n: int) -> bool:
    """Whether ``fn`` is given; a KaioTypeError if it is not a function of ``params`` and ``n``
    ``mod_args``."""
    if fn is None:
        return False
    want = f"{name}({', '.join(params)}{', *mod_args' if n else ''})"
    if not inspect.isfunction(fn):
        raise KaioTypeError(f"{op}: `{name}` must be a Python function {want}, got {type(fn).__name__}")
    try:
        inspect.signature(fn).bind(*range(len(params) + n))
    except TypeError:
        raise KaioTypeError(
            f"{op}: `{name}` must take {len(params) + n} positional arguments, {want} "
            f"({n} `mod_args`), but its signature is {fn.__name__}{inspect.signature(fn)}"
        ) from None
    return True


@cache
def _adapted(fn: Callable[..., Any], n: int, kind: str, shapes: tuple[tuple[int, ...] | None, ...]) -> Any:
    """``fn`` as a device function of the kernel's fixed slots, returning f32 (a score, or
    its derivative by the score: ``kind`` "score_grad") or bool (a mask). One per (function,
    arity, kind, multi-dimensional shapes): the kernel's cache key reads its source. The ``if``
    on ``n`` (a Python int) is decided when the kernel is compiled."""
    from kaio.frontend.flat_index import with_shapes
    from kaio.frontend.inline import DeviceFunction

    fixed = len(MASK_PARAMS) if kind == "mask" else len(SCORE_PARAMS)
    names = list(inspect.signature(fn).parameters)[fixed : fixed + n]
    shaped = {name: shape for name, shape in zip(names, shapes, strict=True) if shape is not None}
    # named so that a compile error on a call below reads as the user's function's
    if kind == "score_grad":
        from kaio.frontend.derivative import derivative

        source = with_shapes(fn, shaped)[1] if shaped else None
        score_mod = mask_mod = derivative(fn, next(iter(inspect.signature(fn).parameters)), source)
    elif shaped:
        score_mod = mask_mod = DeviceFunction.of_source(*with_shapes(fn, shaped))
    else:
        score_mod = mask_mod = kaio.device(fn)

    def score(s, b, h, q, k, x0, x1, x2, x3) -> f32:  # type: ignore[no-untyped-def]
        if n == 0:
            return score_mod(s, b, h, q, k)
        if n == 1:
            return score_mod(s, b, h, q, k, x0)
        if n == 2:
            return score_mod(s, b, h, q, k, x0, x1)
        if n == 3:
            return score_mod(s, b, h, q, k, x0, x1, x2)
        return score_mod(s, b, h, q, k, x0, x1, x2, x3)

    def mask(b, h, q, k, x0, x1, x2, x3) -> bool_:  # type: ignore[no-untyped-def]
        if n == 0:
            return mask_mod(b, h, q, k)
        if n == 1:
            return mask_mod(b, h, q, k, x0)
        if n == 2:
            return mask_mod(b, h, q, k, x0, x1)
        if n == 3:
            return mask_mod(b, h, q, k, x0, x1, x2)
        return mask_mod(b, h, q, k, x0, x1, x2, x3)

    return kaio.device(mask if kind == "mask" else score)


# The custom ops' schemas (torch.ops.kaio.attention) carry no Python functions: a call names its
# score and mask functions by a key, and the op looks them up here. One key per (function pair)
# object for the life of the process (the registry holds them, so an id is never reused).
_BY_KEY: dict[str, tuple[Any, Any]] = {}


def mods_key(score_mod: Any, mask_mod: Any) -> str | None:
    """The key ``torch.ops.kaio.attention`` takes for these functions (None: neither)."""
    if score_mod is None and mask_mod is None:
        return None
    key = "|".join("-" if f is None else f"{getattr(f, '__qualname__', type(f).__name__)}@{id(f):x}" for f in (score_mod, mask_mod))
    _BY_KEY.setdefault(key, (score_mod, mask_mod))
    return key


def mod_arg_slots(op: str, mod_args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``mod_args`` as the custom ops' four optional tensors (the given ones first)."""
    if len(mod_args) > MAX_MOD_ARGS:
        raise KaioTypeError(f"{op}: `mod_args` holds at most {MAX_MOD_ARGS} arrays, got {len(mod_args)}")
    return (*mod_args, *(None,) * (MAX_MOD_ARGS - len(mod_args)))


def mods_of_key(op: str, key: str | None) -> tuple[Any, Any]:
    """(score_mod, mask_mod) of a key :func:`mods_key` made; a KaioValueError for another."""
    if key is None:
        return None, None
    if key not in _BY_KEY:
        raise KaioValueError(f"{op}: `mods` {key!r} names no score or mask function of this process (made by mods_key)")
    return _BY_KEY[key]
