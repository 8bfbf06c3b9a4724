"""Syntactic facts about a function body, computed once per AST node and reused by every build.

- which constructs are unsupported (rejected at decoration, before any IR is built),
- which names a statement list assigns (the candidates for loop-carried values),
- which early exits (``return``/``break``/``continue``) a statement may take,
- which global names and module attributes a function reads (for the cache key).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

from kaio.frontend.diagnostics import FunctionSource, SemanticError

RET, BRK, CONT = "ret", "brk", "cont"

_UNSUPPORTED_STMTS: dict[type[ast.AST], tuple[str, str | None]] = {
    ast.ClassDef: ("class definitions are not supported in kernels", None),
    ast.FunctionDef: (
        "nested function definitions are not supported in kernels",
        "define the helper at module level and decorate it with @kaio.device",
    ),
    ast.AsyncFunctionDef: ("async functions are not supported in kernels", None),
    ast.AsyncFor: ("`async for` is not supported in kernels", None),
    ast.AsyncWith: ("`async with` is not supported in kernels", None),
    ast.With: ("`with` statements are not supported in kernels", None),
    ast.Try: ("`try` is not supported in kernels", "kernels cannot raise or catch exceptions"),
    ast.Raise: ("`raise` is not supported in kernels", "kernels cannot raise exceptions"),
    ast.Assert: (
        "`assert` is not supported in kernels",
        "check the condition with `if` and return early",
    ),
    ast.Delete: ("`del` is not supported in kernels", None),
    ast.Global: ("`global` is not supported in kernels", "kernels cannot write Python globals"),
    ast.Nonlocal: ("`nonlocal` is not supported in kernels", None),
    ast.Import: ("imports are not allowed inside kernels", "import at module level"),
    ast.ImportFrom: ("imports are not allowed inside kernels", "import at module level"),
    ast.Match: ("`match` is not supported in kernels", "use `if`/`elif`"),
}
_UNSUPPORTED_EXPRS: dict[type[ast.AST], tuple[str, str | None]] = {
    ast.Lambda: ("lambdas are not supported in kernels", "write a @kaio.device function"),
    ast.ListComp: ("comprehensions are not supported in kernels", "write a loop"),
    ast.SetComp: ("comprehensions are not supported in kernels", "write a loop"),
    ast.DictComp: ("comprehensions are not supported in kernels", "write a loop"),
    ast.GeneratorExp: ("generator expressions are not supported in kernels", "write a loop"),
    ast.List: ("lists are not supported in kernels", "use an array parameter or shared_mem"),
    ast.Dict: ("dicts are not supported in kernels", None),
    ast.Set: ("sets are not supported in kernels", None),
    ast.JoinedStr: ("strings are not supported in kernels", None),
    ast.NamedExpr: ("`:=` is not supported in kernels", "assign in a separate statement"),
    ast.Await: ("`await` is not supported in kernels", None),
    ast.Yield: ("generators are not supported in kernels", None),
    ast.YieldFrom: ("generators are not supported in kernels", None),
    ast.Starred: ("`*` unpacking is not supported in kernels", None),
    ast.Slice: ("slices are not supported in kernels", "index one element at a time"),
}


def check_syntax(src: FunctionSource) -> None:
    """Reject constructs the language does not have, pointing at the first one."""
    fn = src.tree
    args = fn.args
    if args.vararg or args.kwarg:
        bad = args.vararg or args.kwarg
        raise src.error(bad, "`*args` / `**kwargs` parameters are not supported")
    # A bare string statement anywhere in the body is a comment, not a value.
    comments = {id(n.value) for n in ast.walk(fn) if isinstance(n, ast.Expr) and is_comment(n)}
    for stmt in fn.body:
        for node in ast.walk(stmt):
            entry = _UNSUPPORTED_STMTS.get(type(node)) or _UNSUPPORTED_EXPRS.get(type(node))
            if entry is not None:
                raise src.error(node, entry[0], entry[1])
            if isinstance(node, ast.For | ast.While) and node.orelse:
                raise src.error(
                    node.orelse[0], "`else` on a loop is not supported", "use a flag variable"
                )
            if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
                if id(node) not in comments:
                    raise src.error(node, "strings are not supported in kernels")


def is_comment(stmt: ast.stmt) -> bool:
    """A bare string (docstring) or ``...`` statement: no code."""
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and (isinstance(stmt.value.value, str) or stmt.value.value is Ellipsis)
    )


def assigned_names(src: FunctionSource, body: Sequence[ast.stmt]) -> tuple[str, ...]:
    """Names a statement list may assign, in first-assignment order."""
    if not body:
        return ()
    key = ("assigned", id(body[0]), len(body))
    cached = src.memo.get(key)
    if cached is None:
        names: dict[str, None] = {}
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names[node.id] = None
        cached = src.memo[key] = tuple(names)
    return cached


def local_names(src: FunctionSource) -> frozenset[str]:
    """Parameters and every name the function assigns: Python makes them all local."""
    cached = src.memo.get(("locals", 0))
    if cached is None:
        fn = src.tree
        params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
        cached = frozenset(params) | frozenset(assigned_names(src, fn.body))
        src.memo[("locals", 0)] = cached
    return cached


def exits(src: FunctionSource, stmt: ast.stmt) -> frozenset[str]:
    """The early exits ``stmt`` may take: ``ret`` anywhere, ``brk``/``cont`` of the enclosing
    loop (those of loops nested inside ``stmt`` do not count)."""
    key = ("exits", id(stmt))
    cached = src.memo.get(key)
    if cached is None:
        cached = src.memo[key] = frozenset(_exits(stmt))
    return cached


def _exits(node: ast.stmt, in_loop: bool = False) -> Iterable[str]:
    if isinstance(node, ast.Return):
        yield RET
    elif isinstance(node, ast.Break) and not in_loop:
        yield BRK
    elif isinstance(node, ast.Continue) and not in_loop:
        yield CONT
    elif isinstance(node, ast.For | ast.While):
        for child in node.body:
            yield from _exits(child, True)
    else:
        for sub in ast.iter_child_nodes(node):
            if isinstance(sub, ast.stmt):
                yield from _exits(sub, in_loop)


def body_exits(src: FunctionSource, body: Sequence[ast.stmt]) -> frozenset[str]:
    result: frozenset[str] = frozenset()
    for stmt in body:
        result |= exits(src, stmt)
    return result


def has_value_return(src: FunctionSource) -> bool:
    cached = src.memo.get(("value_return", 0))
    if cached is None:
        cached = any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(src.tree))
        src.memo[("value_return", 0)] = cached
    return bool(cached)


def global_reads(src: FunctionSource) -> tuple[tuple[str, ...], ...]:
    """Dotted names the function loads that are not local (``N``, ``cfg.BLOCK``, ``helper``)."""
    cached = src.memo.get(("globals", 0))
    if cached is None:
        local = local_names(src)
        chains: dict[tuple[str, ...], None] = {}
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
                chain = _dotted(node)
                if chain is not None and chain[0] not in local:
                    chains[chain] = None
        cached = src.memo[("globals", 0)] = tuple(chains)
    return cached


def _dotted(node: ast.AST) -> tuple[str, ...] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return tuple(reversed(parts))


def for_target(node: ast.For) -> str:
    if not isinstance(node.target, ast.Name):
        raise SemanticError(
            "a loop variable must be a single name", "write `for i in range(n):`", node.target
        )
    return node.target.id
