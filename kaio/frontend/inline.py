"""``@kaio.device`` functions, inlined at every call.

A device function's body is compiled into the caller, in its own scope, with the arguments'
values (runtime or compile-time) as parameters. Annotated parameters are checked (a literal
adapts); unannotated ones accept any value, like a C++ template. ``return`` anywhere sets the
function's ``%ret`` flag and its value ``%rv``: the same structured lowering as a kernel's
early exit.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable
from typing import Any

from kaio.dtypes import ArrayType as KaioArrayType
from kaio.dtypes import ConstexprType, ScalarType, _Constexpr, bool_
from kaio.frontend.analysis import check_syntax, has_value_return
from kaio.frontend.call_handlers import CallHandler, calls
from kaio.frontend.context import CompilerBase, Env, annotation_value, python_value
from kaio.frontend.diagnostics import FunctionSource, SemanticError
from kaio.frontend.function_compiler import FunctionCompiler
from kaio.frontend.scope import RET, Scope, return_slots
from kaio.frontend.typerules import adapt
from kaio.frontend.values import (
    ArrayRef,
    Const,
    NoneValue,
    Scalar,
    TupleValue,
    Undefined,
    Value,
    type_name,
)


class DeviceFunction:
    """A function kernels can call: ``@kaio.device``. Its body is checked for unsupported
    syntax when decorated and compiled (inlined) at each call."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.source = FunctionSource.of(fn, "device function")
        check_syntax(self.source)
        self.signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    @classmethod
    def of_source(cls, fn: Callable[..., Any], source: FunctionSource) -> DeviceFunction:
        """A device function compiled from ``source`` (a tree kaio built, e.g. a derivative)
        in ``fn``'s environment and with its signature."""
        self = cls.__new__(cls)
        self.fn, self.source = fn, source
        check_syntax(source)
        self.signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from kaio.errors import KaioError

        raise KaioError(
            f"@kaio.device function `{self.fn.__qualname__}` can only be called from a kernel "
            "or another device function"
        )

    def __repr__(self) -> str:
        return f"<kaio device function {self.fn.__qualname__}>"


@calls(DeviceFunction)
def device_call_handler(caller: CompilerBase, obj: DeviceFunction) -> CallHandler:
    return functools.partial(inline_call, caller, obj)


def inline_call(
    caller: CompilerBase,
    dfn: DeviceFunction,
    node: ast.Call,
    args: list[Value],
    kwargs: dict[str, Value],
) -> Value:
    state = caller.state
    if dfn in state.inlining:
        raise SemanticError(
            f"recursive call of device function `{dfn.fn.__name__}`",
            "device functions are inlined; recursion is not supported",
        )
    try:
        bound = dfn.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise SemanticError(f"bad call of `{dfn.fn.__name__}`: {exc}") from None
    src = dfn.source
    env = Env(dfn.fn)
    try:
        scope, return_type = _bind(dfn, env, bound.arguments)
    except SemanticError as e:
        if e.node is not None and e.source is None:
            e.source = src  # an annotation in the device function's own file
        raise
    # the caller's own compiler: a device function called from a tile kernel knows the kt
    # builtins (on one element, kt.where is a select), as the kernel's body does
    compiler = type(caller) if isinstance(caller, FunctionCompiler) else FunctionCompiler
    callee = compiler(state, src, env, scope, is_kernel=False, return_type=return_type)
    caller_current = state.current
    state.inlining.append(dfn)
    try:
        callee.visit_body(src.tree.body)
    finally:
        state.inlining.pop()
        state.current = caller_current
        if caller_current is not None:
            csrc, cnode = caller_current
            if isinstance(cnode, ast.stmt):  # the rest of the caller's statement is its own
                caller.em.mark(csrc.filename, cnode.lineno, cnode.col_offset + 1, csrc.statement_text(cnode))
    if not has_value_return(src):
        return NoneValue()
    returned = callee.scope.get(RET)
    results = [callee.scope.get(slot) for slot in return_slots(callee.return_arity)]
    if not (isinstance(returned, Const) and returned.value is True) or None in results:
        raise src.error(
            src.tree,
            f"device function `{dfn.fn.__name__}` may reach its end without returning a value",
            "end every path with `return value`",
        )
    assert all(isinstance(r, Scalar | Const) for r in results)
    if callee.return_arity is None:
        return results[0]  # type: ignore[return-value]
    return TupleValue(tuple(results))  # type: ignore[arg-type]


def _bind(
    dfn: DeviceFunction, env: Env, arguments: dict[str, Any]
) -> tuple[Scope, ScalarType | tuple[ScalarType, ...] | None]:
    """The device function's starting scope (checked parameters, flags) and return type."""
    params = _parameters(dfn.source.tree)
    scope = Scope()
    for name, param in dfn.signature.parameters.items():
        value = arguments[name] if name in arguments else python_value(param.default)
        annotation = params[name].annotation
        expected = annotation_value(annotation, env) if annotation is not None else None
        try:
            scope.bind(name, _check_argument(value, expected, name))
        except SemanticError as e:
            e.message = f"argument `{name}` of `{dfn.fn.__name__}`: {e.message}"
            raise
    return_type = _return_type(dfn.source, env)
    scope.bind(RET, Const(False, bool_))
    if return_type is not None:
        # Defined on every path, so returns inside loops and branches merge cleanly.
        declared = return_type if isinstance(return_type, tuple) else (return_type,)
        arity = len(return_type) if isinstance(return_type, tuple) else None
        for slot, t in zip(return_slots(arity), declared, strict=True):
            scope.bind(slot, Const(0.0 if t.is_float else 0, t))
    return scope, return_type


def _parameters(fn: ast.FunctionDef) -> dict[str, ast.arg]:
    a = fn.args
    return {p.arg: p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def _check_argument(value: Value, expected: Any, name: str) -> Value:
    if isinstance(value, NoneValue | Undefined):
        raise SemanticError(f"no value for `{name}`")
    if expected is None:
        return value
    if isinstance(expected, ScalarType):
        if isinstance(value, Const) and value.type is None:
            return adapt(value, expected)
        if isinstance(value, Scalar | Const) and value.type is expected:
            return value
        raise SemanticError(f"expected {expected.name}, got {type_name(value)}", "cast it")
    if isinstance(expected, KaioArrayType):
        if not isinstance(value, ArrayRef) or value.elem is not expected.elem:
            raise SemanticError(f"expected {expected!r}, got {type_name(value)}")
        if expected.mutable and not value.kaio_type.mutable:
            raise SemanticError(f"expected {expected!r}, got the read-only {value.kaio_type!r}")
        return ArrayRef(value.ssa, expected, value.name)  # an Array parameter is a read-only view
    if isinstance(expected, _Constexpr | ConstexprType):
        if not isinstance(value, Const):
            raise SemanticError(f"expected a compile-time value, got a runtime {type_name(value)}")
        t = expected.elem if isinstance(expected, ConstexprType) else None
        return adapt(value, t) if t is not None and value.type is None else value
    raise SemanticError(f"unsupported parameter annotation {expected!r}")


def _return_type(src: FunctionSource, env: Env) -> ScalarType | tuple[ScalarType, ...] | None:
    node = src.tree.returns
    if node is None:
        return None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):  # tuple[f32, i32]
        if annotation_value(node.value, env) is not tuple:
            raise SemanticError("a device function returns a kaio scalar type or a tuple of them", None, node)
        elements = [annotation_value(e, env) for e in node.slice.elts]
        if not all(isinstance(e, ScalarType) for e in elements):
            raise SemanticError("a returned tuple holds kaio scalar types", None, node)
        return tuple(elements)
    t = annotation_value(node, env)
    if t is None:
        return None
    if not isinstance(t, ScalarType):
        raise SemanticError("a device function returns a kaio scalar type", None, node)
    return t
