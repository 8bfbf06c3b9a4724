"""Arrays of a known shape indexed with several subscripts, in a device function.

A kernel's arrays are flat (``Array[T]`` takes one index). A function written for arrays with
a shape, FlexAttention's ``bias[h, kv_idx]``, is compiled from a rewritten copy of its source:
with the shapes known when the kernel is specialized, ``a[i, j]`` of an array ``a`` of shape
``(H, S)`` becomes ``a[i * S + j]`` (row-major: C-contiguous arrays), the sizes as literals. A
subscript with another number of indices than the array's dims is a compile error at its line;
one index into a multi-dimensional array stays a flat index, as before.
"""

from __future__ import annotations

import ast
import copy
import types
from collections.abc import Callable, Mapping
from typing import Any

from kaio.frontend.diagnostics import FunctionSource


def with_shapes(fn: Callable[..., Any], shapes: Mapping[str, tuple[int, ...]],
                src: FunctionSource | None = None) -> tuple[Callable[..., Any], FunctionSource]:  # fmt: skip
    """``fn`` and its source with the subscripts of the parameters in ``shapes`` (each of two
    dims or more) flattened; ``src``: the source to rewrite (default: ``fn``'s own)."""
    src = src or FunctionSource.of(fn, "device function")
    params = {a.arg for a in src.tree.args.args}
    shapes = {name: tuple(shape) for name, shape in shapes.items() if name in params and len(shape) >= 2}
    if not shapes:
        return fn, src
    tree = _Flatten(src, shapes).visit(copy.deepcopy(src.tree))
    ast.fix_missing_locations(tree)
    rewritten = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    rewritten.__qualname__ = fn.__qualname__
    dims = ", ".join(f"{name}: {shape[1:]}" for name, shape in sorted(shapes.items()))
    text = f"# {fn.__qualname__}, arrays of trailing dims {dims}\n{ast.unparse(tree)}\n"
    return rewritten, FunctionSource(rewritten, src.filename, text, src.lines, src.first_line, tree)


class _Flatten(ast.NodeTransformer):
    def __init__(self, src: FunctionSource, shapes: dict[str, tuple[int, ...]]):
        self.src, self.shapes = src, shapes

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:  # noqa: N802 (ast's visitor names)
        self.generic_visit(node)
        if not (isinstance(node.value, ast.Name) and node.value.id in self.shapes and isinstance(node.slice, ast.Tuple)):
            return node
        shape, indices = self.shapes[node.value.id], node.slice.elts
        if len(indices) != len(shape):
            raise self.src.error(node, f"`{node.value.id}` has {len(shape)} dims {shape}, indexed with {len(indices)}",
                                 hint="give one index per dim, or one flat index")  # fmt: skip
        flat: ast.expr = indices[0]
        for size, index in zip(shape[1:], indices[1:], strict=True):
            flat = ast.BinOp(ast.BinOp(flat, ast.Mult(), ast.Constant(size)), ast.Add(), index)
        node.slice = ast.copy_location(flat, node.slice)
        return node
