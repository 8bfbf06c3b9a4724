"""What calling an object means in a kernel: a table from the callee's type to the function that
resolves the call.

The module that gives a kind of callee its meaning registers it with :func:`calls`, as a lowering
registers with ``@lowering`` in ``kaio.passes.to_ptx``: ``builtins`` for the prelude's builtins
(``@kaio.builtin`` ones too) and the casts by a kaio type, ``inline`` for ``@kaio.device``
functions, ``kernel`` for kernels (refused). ``ExpressionsMixin.call_handler`` looks the callee
up here, so the compiler imports none of them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, TypeVar

from kaio.frontend.values import Value

CallHandler = Callable[[ast.Call, list[Value], dict[str, Value]], Value]
"""Compiles one call, from its node and its evaluated arguments."""

Resolver = Callable[[Any, Any], CallHandler | None]
"""``(compiler, callee)``: the callee's handler, None when it has no meaning in a kernel, or a
``SemanticError`` (a callee the kernel may not call there)."""

R = TypeVar("R", bound=Resolver)

RESOLVERS: dict[type, Resolver] = {}


def calls(*types: type) -> Callable[[R], R]:
    """Register ``resolver`` for callees of these types (and their subclasses)."""

    def register(resolver: R) -> R:
        for t in types:
            if t in RESOLVERS:
                raise ValueError(f"two call resolvers for {t.__qualname__}")
            RESOLVERS[t] = resolver
        return resolver

    return register


def resolve_call(compiler: Any, obj: Any) -> CallHandler | None:
    """The handler of a call of ``obj`` from ``compiler``, by the nearest registered type."""
    for t in type(obj).__mro__:
        resolver = RESOLVERS.get(t)
        if resolver is not None:
            return resolver(compiler, obj)
    return None
