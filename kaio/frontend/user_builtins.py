"""Kernel builtins defined outside kaio: ``@kaio.builtin("name(args)")`` over a function that
builds the call's IR with a :class:`BuiltinCall`.

The decorated name is a marker, as kaio's own builtins are: kernels call it, the frontend finds
its builder by identity and runs it at compile time. In a ``@kaio.tile_kernel`` a call with a
tile argument applies the builder element by element (the tile language's rule for scalar
builtins), so one definition is a SIMT builtin and a ``kt``-style elementwise tile function
at once. Its ops lower with a ``@lowering`` rule of the user's (``kaio.passes.to_ptx``).

Example (``examples/custom_op.py`` has the op and its lowering)::

    @kaio.builtin("saturate(x)")
    def saturate(call: kaio.BuiltinCall, x):
        v = call.scalar(x, "saturate's argument")
        if v.dtype != f32:
            raise call.error(f"saturate takes f32, got {v.dtype.name}")
        return call.result(SaturateOp(v.ssa), f32)
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xdsl.ir import Operation, SSAValue

from kaio import prelude as kp
from kaio.dtypes import ScalarType
from kaio.errors import KaioTypeError
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.operators import compile_time, materialize
from kaio.frontend.typerules import default_type
from kaio.frontend.values import Const, Scalar, Value, type_name

Builder = Callable[..., Any]


@dataclass(frozen=True)
class ScalarArg:
    """A scalar argument of a builtin call as IR: its SSA value and kaio dtype."""

    ssa: SSAValue
    dtype: ScalarType


class BuiltinCall:
    """What a builtin's builder sees of the call it compiles: its arguments as IR, a way to add
    ops, to return a value and to report an error at the user's line."""

    def __init__(self, compiler: Any, node: ast.Call, name: str):
        self._compiler = compiler
        self._node = node
        self.name = name

    def scalar(self, value: Any, what: str, dtype: ScalarType | None = None) -> ScalarArg:
        """``value`` (an argument, or a Python number) as a scalar of the IR; a literal takes
        ``dtype`` (else its default type: i32, f32, bool)."""
        if isinstance(value, (bool, int, float)):
            value = Const(value)
        if isinstance(value, Scalar):
            if dtype is not None and value.type is not dtype:
                raise self.error(f"{what} must be {dtype.name}, got {value.type.name}")
            return ScalarArg(value.ssa, value.type)
        if isinstance(value, Const):
            t = dtype or default_type(value)
            return ScalarArg(materialize(self._compiler.em, value, t), t)
        raise self.error(f"{what} must be a scalar, got {type_name(value)}")

    def constant(self, value: Any, what: str) -> int | float | bool:
        """``value`` as a compile-time number (a literal, a constexpr)."""
        c = compile_time(value) if isinstance(value, (Scalar, Const)) else None
        if c is None:
            raise self.error(f"{what} must be known at compile time, got {type_name(value)}")
        return c.value

    def emit(self, op: Operation) -> SSAValue:
        """Add ``op`` where the call is; its (single) result."""
        return self._compiler.em.value(op)

    def result(self, op_or_value: Operation | SSAValue, dtype: ScalarType) -> Value:
        """The call's value: ``op``'s result (the op is added) or an SSA value, of ``dtype``."""
        ssa = self.emit(op_or_value) if isinstance(op_or_value, Operation) else op_or_value
        return Scalar(ssa, dtype)

    def error(self, message: str, hint: str | None = None) -> Exception:
        """An error at the call's line, to ``raise``."""
        return SemanticError(message, hint, self._node)


_BUILDERS: dict[kp.Builtin, tuple[Builder, inspect.Signature]] = {}  # markers hash by identity


def builtin(signature: str) -> Callable[[Builder], kp.Builtin]:
    """Decorator: the function ``(call, *args)`` builds the IR of calls of a new kernel builtin;
    ``signature`` (``"saturate(x)"``) names it in errors. Returns the marker kernels call."""
    if not isinstance(signature, str) or "(" not in signature:
        raise KaioTypeError(f"kaio.builtin: `signature` must read like \"name(args)\", got {signature!r}")

    def register(build: Builder) -> kp.Builtin:
        if not callable(build):
            raise KaioTypeError(f"kaio.builtin: decorate a function, got {build!r}")
        params = list(inspect.signature(build).parameters.values())
        if not params:
            raise KaioTypeError(f"kaio.builtin: {build.__qualname__} must take the BuiltinCall first")
        marker = kp.Builtin(signature.split("(")[0], signature)
        _BUILDERS[marker] = (build, inspect.Signature(params[1:]))
        return marker

    return register


def user_builtin_handler(obj: kp.Builtin) -> Callable[..., Value] | None:
    """The handler ``(compiler, node, args, kwargs)`` of a marker made by :func:`builtin`."""
    found = _BUILDERS.get(obj)
    if found is None:
        return None
    marker, (build, signature) = obj, found

    def handle(compiler: Any, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:
            raise SemanticError(f"`{marker.signature}`: {e}", None, node) from None
        value = build(BuiltinCall(compiler, node, marker.name), *args, **kwargs)
        if not isinstance(value, (Scalar, Const)):
            raise SemanticError(
                f"the builtin `{marker.signature}` returned {value!r}, not call.result(...)", None, node
            )
        return value

    return handle
