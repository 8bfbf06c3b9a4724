"""Integer expressions of a kernel's arguments, from kaio's Python spelling to C.

Two facts of an export are expressions of the runtime arguments: a tensor map's extents and
strides (the recipe ``pipeline-tma`` left: ``+ - * //``, parentheses, integers, scalar parameter
names; see :mod:`kaio.runtime.tensor_maps`) and the grid rule (the same, plus ``cdiv``, ``min``
and ``max``, and the variant's constexpr values by name). Both are evaluated in C in 64-bit
integers with Python's meaning: ``//`` floors, ``cdiv(a, b)`` is ``-(-a // b)``.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from collections.abc import Mapping, Sequence
from typing import Any

from kaio.errors import KaioTypeError

_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_CALLS = {"cdiv": "kaio_cdiv", "min": "kaio_min", "max": "kaio_max"}

# The helpers the translated expressions call (static: each generated file has its own copy),
# in dependency order.
C_HELPERS = {
    "kaio_floordiv": """\
static int64_t kaio_floordiv(int64_t a, int64_t b) {
    int64_t q;
    if (b == 0) return 0; /* a zero divisor: the launch refuses the result (grid < 1) */
    q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
""",
    "kaio_cdiv": "static int64_t kaio_cdiv(int64_t a, int64_t b) { return -kaio_floordiv(-a, b); }\n",
    "kaio_min": "static int64_t kaio_min(int64_t a, int64_t b) { return a < b ? a : b; }\n",
    "kaio_max": "static int64_t kaio_max(int64_t a, int64_t b) { return a > b ? a : b; }\n",
}


def helpers_for(code: str) -> str:
    """The helpers ``code`` calls (a C compiler warns of unused static functions)."""
    used = {name for name in C_HELPERS if name + "(" in code}
    if "kaio_cdiv" in used:
        used.add("kaio_floordiv")
    return "".join(text for name, text in C_HELPERS.items() if name in used)


def to_c(text: str, arguments: Sequence[str] | Mapping[str, str], constants: Mapping[str, Any] | None = None,
         *, what: str, calls: bool = False) -> str:  # fmt: skip
    """``"cdiv(m, BM) * 2"`` -> ``"(kaio_cdiv((int64_t)m, 128) * 2)"``.

    ``arguments``: the integer runtime parameters (C variables of the same name); ``constants``:
    names replaced by their integer value (constexprs); ``calls``: whether ``cdiv``/``min``/
    ``max`` may appear (grid rules). Anything else is a KaioTypeError naming ``what``."""
    constants = constants or {}
    c_names = dict(arguments) if isinstance(arguments, Mapping) else {}

    def bad(detail: str) -> KaioTypeError:
        return KaioTypeError(f"{what}: {detail} in {text!r} (an integer expression of the "
                             f"integer arguments {', '.join(arguments) or '(none)'}"
                             + (", the constexprs, cdiv, min and max" if calls else "") + ")")

    def build(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return f"INT64_C({node.value})"
        if isinstance(node, ast.Name):
            if node.id in arguments:
                return f"(int64_t){c_names.get(node.id, node.id)}"
            value = constants.get(node.id)
            if type(value) is int:
                return f"INT64_C({value})"
            raise bad(f"`{node.id}` is not an integer argument" + (" or constexpr" if calls else ""))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return f"({build(node.left)} {_BINARY[type(node.op)]} {build(node.right)})"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
            return f"kaio_floordiv({build(node.left)}, {build(node.right)})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"(-{build(node.operand)})"
        if (calls and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _CALLS and len(node.args) == 2 and not node.keywords):  # fmt: skip
            return f"{_CALLS[node.func.id]}({build(node.args[0])}, {build(node.args[1])})"
        raise bad(f"`{ast.unparse(node)}` is not allowed")

    if not isinstance(text, str):
        raise KaioTypeError(f"{what}: expected an expression string, got {type(text).__name__}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise bad("a syntax error") from None
    return build(tree.body)


_PYTHON_CALLS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}
_ALLOWED = (ast.Expression, ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp, ast.Call, ast.Add, ast.Sub,
            ast.Mult, ast.FloorDiv, ast.USub, ast.Load)  # fmt: skip


@lru_cache(maxsize=256)
def _python_code(text: str) -> Any:
    tree = ast.parse(text.strip(), mode="eval")
    if not all(isinstance(node, _ALLOWED) for node in ast.walk(tree)):
        raise KaioTypeError(f"not an integer expression: {text!r}")
    return compile(tree, "<kaio expression>", "eval")


def evaluate(text: str, values: Mapping[str, int]) -> int:
    """The same expression in Python (kaio's own launch of a library op reads its grid rule
    through this): names from ``values``, Python's ``//``, ``cdiv``, ``min``, ``max``."""
    return int(eval(_python_code(text), {"__builtins__": {}}, {**_PYTHON_CALLS, **values}))
