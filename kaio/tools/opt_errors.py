"""The one-line messages ``kaio-opt`` prints for errors in its input, instead of tracebacks.

A user who gave ``kaio-opt`` a missing or binary file, a malformed or unknown pass, IR that does
not parse or verify, or nesting deeper than Python's recursion limit needs the problem and where
it is (``file:line:col`` for parse errors, the pass for pipeline failures), not the tool's
Python stack. :func:`one_line` renders any such exception as one line; ``--traceback`` keeps
the traceback for a bug report.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from kaio.errors import KaioCompileError, KaioError


class OptInputError(Exception):
    """An error in what the user gave ``kaio-opt``; the message is the line printed."""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def one_line(error: BaseException, where: str) -> str:
    """``error`` as one line. ``where`` (e.g. "in pass 'cse'") says what kaio-opt was doing; it
    leads the errors that carry no position of their own."""
    if isinstance(error, OptInputError):
        return str(error)
    if isinstance(error, ParseError):
        loc = error.span.get_location()
        return f"{loc.file}:{loc.line}:{loc.col}: {_first_line(error.msg)}"
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    return f"{where}: {_message(error)}"


def _message(error: BaseException) -> str:
    if isinstance(error, KaioCompileError):
        text = error.message
        if error.filename is not None:
            text = f"{error.filename}:{error.line}: {text}"
        return f"{text} (hint: {error.hint})" if error.hint else text
    if isinstance(error, KaioError):
        return " ".join(str(error).split())
    if isinstance(error, DiagnosticException):  # a verifier failure: its first line says what
        return _first_line(str(error))
    if isinstance(error, RecursionError):
        return "the IR is nested too deeply for Python's recursion limit"
    if isinstance(error, OSError):
        return str(error.strerror or error)
    summary = _first_line(str(error))
    return f"{type(error).__name__}: {summary} (run with --traceback for the details)"


def pipeline_message(spec: str, error: ArgSpecParseError | ValueError, known: Iterable[str]) -> str:
    """The one line for a ``-p`` pipeline xDSL refused: malformed (with the column), or naming
    a pass that is not registered (with the closest known names)."""
    if isinstance(error, ArgSpecParseError):
        lines = str(error).splitlines()
        caret = next((line for line in lines if line.strip().startswith("^")), None)
        column = f" at column {caret.index('^') + 1}" if caret is not None else ""
        return f"malformed pass pipeline {spec!r}{column}: {lines[-1].strip()}"
    unknown = _unknown_passes(spec, set(known))
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, list(known), n=3)
        hint = (
            f"did you mean {' or '.join(repr(c) for c in close)}?"
            if close
            else "`kaio-opt --help` lists the passes"
        )
        return f"unknown pass {name!r} in pipeline {spec!r} ({hint})"
    return f"pass pipeline {spec!r}: {_first_line(str(error))}"


def _unknown_passes(spec: str, known: set[str]) -> list[str]:
    from xdsl.utils.arg_spec import parse_pipeline

    try:
        return [p.name for p in parse_pipeline(spec) if p.name not in known]
    except (ArgSpecParseError, ValueError):
        return []


def check_float_literals(text: str, name: str) -> None:
    """Refuse a float literal too large for a double (``1.0e+99999``): Python's ``float`` reads
    it as infinity without a word, and the IR would silently hold inf. A ParseError at the
    literal (the input already parsed, so lexing it again cannot fail otherwise)."""
    lexer = MLIRLexer(Input(text, name))
    while (token := lexer.lex()).kind is not MLIRTokenKind.EOF:
        if token.kind is MLIRTokenKind.FLOAT_LIT and abs(float(token.span.text)) == float("inf"):
            raise ParseError(
                token.span, f"float literal {token.span.text} overflows a 64-bit float"
            )
