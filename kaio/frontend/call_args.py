"""Binding a builtin call's arguments to its parameter names (shared by every builtin table)."""

from __future__ import annotations

import ast

from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.values import Value

__all__ = ["_arg_node", "_signature"]


def _signature(node: ast.Call, args: list[Value], kwargs: dict[str, Value], spec: str, names: list[str],
               defaults: dict[str, Value] | None = None) -> list[Value]:  # fmt: skip
    """Bind a call's arguments to ``names`` (positional or keyword), with ``defaults``."""
    defaults = defaults or {}
    if len(args) > len(names):
        raise SemanticError(f"`{spec}` takes {len(names)} argument(s), got {len(args)}", None, node)
    bound: dict[str, Value] = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise SemanticError(f"`{spec}` got an unexpected keyword argument `{key}`", None, node)
        bound[key] = value
    result: list[Value] = []
    for n in names:
        if n in bound:
            result.append(bound[n])
        elif n in defaults:
            result.append(defaults[n])
        else:
            raise SemanticError(f"`{spec}` is missing the argument `{n}`", None, node)
    return result


def _arg_node(node: ast.Call, i: int) -> ast.AST:
    return node.args[i] if i < len(node.args) else node
