"""Where errors point: a function's source, its AST with file positions, and error construction.

Semantic helpers deep in the frontend do not know which AST node they are compiling; they raise
``SemanticError`` with a message and a hint, and the innermost visitor that does know attaches
the node. At the top of a build the error becomes a ``KaioCompileError`` pointing into the file
of the function (kernel or device helper) the node belongs to.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kaio.errors import KaioCompileError


class SemanticError(Exception):
    """A user error found while compiling; ``node``/``source`` are filled in on the way up."""

    def __init__(self, message: str, hint: str | None = None, node: ast.AST | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.node = node
        self.source: FunctionSource | None = None

    def locate(self, node: ast.AST, source: FunctionSource) -> SemanticError:
        if self.node is None:
            self.node = node
        if self.source is None:
            self.source = source
        return self

    def to_compile_error(self) -> KaioCompileError:
        if self.source is None:
            return KaioCompileError(self.message, hint=self.hint)
        return self.source.error(self.node, self.message, self.hint)


def _dedent_line(line: str, indent: int) -> str:
    if not line.strip():
        return "\n"  # keep blank lines: line numbers must not move
    if line[:indent].isspace():
        return line[indent:]
    return line.lstrip()  # a continuation line indented less than the def


@dataclass
class FunctionSource:
    """A Python function's source text and AST, positioned as in its file."""

    fn: Callable[..., Any]
    filename: str
    text: str  # exactly what inspect returned: what the cache key hashes
    lines: list[str]  # the file's lines as inspect saw them (1-based via ``line - first_line``)
    first_line: int
    tree: ast.FunctionDef
    # Per-node analysis results (assigned names, exits) computed once and reused by every build.
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    @classmethod
    def of(cls, fn: Callable[..., Any], what: str) -> FunctionSource:
        try:
            lines, first_line = inspect.getsourcelines(fn)
            filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
        except (OSError, TypeError) as exc:
            raise KaioCompileError(
                f"cannot read the source of {what} `{getattr(fn, '__qualname__', fn)}`",
                hint="kernels and device functions must be defined in a file (not typed into "
                "a REPL or built with exec)",
            ) from exc
        first_line = max(first_line, 1)
        text = "".join(lines)
        indent = len(lines[0]) - len(lines[0].lstrip())
        # Strip the definition's own indentation so nested definitions parse; columns are
        # shifted back below so errors point at the right place in the file.
        body = text if indent == 0 else "".join(_dedent_line(ln, indent) for ln in lines)
        try:
            module = ast.parse(body, filename=filename)
        except SyntaxError as exc:  # pragma: no cover - Python already compiled this function
            raise KaioCompileError(f"cannot parse {what}: {exc.msg}", filename=filename) from exc
        tree = module.body[0]
        if not isinstance(tree, ast.FunctionDef):
            raise KaioCompileError(
                f"{what} must be a plain `def` function",
                filename=filename,
                line=first_line,
                source_line=lines[0],
            )
        for node in ast.walk(tree):
            if hasattr(node, "lineno"):
                node.lineno += first_line - 1
                end = getattr(node, "end_lineno", None)
                if end is not None:
                    node.end_lineno = end + first_line - 1  # type: ignore[attr-defined]
                node.col_offset += indent  # type: ignore[attr-defined]
                end_col = getattr(node, "end_col_offset", None)
                if end_col is not None:
                    node.end_col_offset = end_col + indent  # type: ignore[attr-defined]
        return cls(fn, filename, text, lines, first_line, tree)

    def line_text(self, line: int) -> str | None:
        i = line - self.first_line
        if 0 <= i < len(self.lines):
            return self.lines[i].rstrip("\n")
        return None

    def error(
        self, node: ast.AST | None, message: str, hint: str | None = None
    ) -> KaioCompileError:
        if node is None or not hasattr(node, "lineno"):
            return KaioCompileError(
                message, filename=self.filename, line=self.first_line, hint=hint,
                source_line=self.line_text(self.first_line),
            )  # fmt: skip
        line: int = node.lineno
        col: int = node.col_offset  # type: ignore[attr-defined]
        end_col: int | None = None
        if getattr(node, "end_lineno", None) == line:
            end_col = node.end_col_offset  # type: ignore[attr-defined]
        return KaioCompileError(
            message,
            filename=self.filename,
            line=line,
            col=col,
            end_col=end_col,
            source_line=self.line_text(line),
            hint=hint,
        )

    def statement_text(self, node: ast.stmt) -> str:
        return (self.line_text(node.lineno) or "").strip()
