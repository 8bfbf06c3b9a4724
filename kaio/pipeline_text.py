"""Pipeline strings -> passes, with errors that point at the column where the string goes wrong.

xDSL's parser raises ``ArgSpecParseError`` (a ``BaseException``, not an ``Exception``) or bare
``ValueError``s without a position; kaio raises :class:`~kaio.errors.KaioPipelineError`
rendered like a compile error: ``pipeline:1:14: error: ...``, the string, a caret.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass

from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec, PipelineLexer, SpecTokenKind, parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError

from kaio.errors import KaioError, KaioPipelineError
from kaio.pass_contracts import check_options

_XDSL_POSITION = re.compile(r"pass-pipeline:(\d+):(\d+)")


def parse_passes(spec: str, available: dict[str, Callable[[], type[ModulePass]]]) -> tuple[ModulePass, ...]:
    """The passes ``spec`` names, each made from its options and checked against its contract."""
    if not isinstance(spec, str):
        raise KaioPipelineError(f"a pipeline string must be a str, got {type(spec).__name__}")
    try:
        specs = list(parse_pipeline(spec))
    except ArgSpecParseError as e:
        message = str(e)
        where = _XDSL_POSITION.search(message)
        reason = [line.strip() for line in message.splitlines() if line.strip()][-1]
        raise _error(spec, int(where.group(2)) - 1 if where else 0, reason[0].lower() + reason[1:]) from None
    names = list(_pass_names(spec))
    if spec.strip().endswith(","):
        raise _error(spec, len(spec.rstrip()) - 1, "expected a pass name after this comma")
    passes = []
    for arg_spec, (column, options) in zip(specs, names):
        passes.append(_make(spec, column, arg_spec, options, available))
    return tuple(passes)


def _make(
    spec: str,
    column: int,
    arg_spec: ArgSpec,
    options: list[tuple[int, str]],
    available: dict[str, Callable[[], type[ModulePass]]],
) -> ModulePass:
    name = arg_spec.name
    if name not in available:
        close = difflib.get_close_matches(name, list(available), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise _error(spec, column, f"unknown pass '{name}'{hint}", "see kaio.pipeline.available_passes(); kaio.register_pass adds yours")
    cls = available[name]()
    known = [f.name for f in fields(cls) if f.init] if is_dataclass(cls) else []
    seen: set[str] = set()
    for option_column, option in options:
        key = option.replace("-", "_")
        if key in seen:
            raise _error(spec, option_column, f"pass '{name}': option '{option}' is given twice")
        seen.add(key)
        if key not in known:
            listed = ", ".join(known) or "none"
            raise _error(spec, option_column, f"pass '{name}' has no option '{option}' (its options: {listed})")
    try:
        made = cls.from_pass_spec(arg_spec)
        check_options(made)
    except KaioPipelineError as e:
        raise _error(spec, column, e.message) from None
    except KaioError:
        raise
    except Exception as e:  # xDSL's option conversion, or the pass's own checks
        raise _error(spec, column, f"pass '{name}': bad options: {e}") from None
    return made


def _pass_names(spec: str) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """Each pass's column and its option names with theirs (the string parses: checked first)."""
    depth = 0
    previous = SpecTokenKind.COMMA
    current: list[tuple[int, str]] | None = None
    start = 0
    lexer = PipelineLexer(spec)
    while (token := lexer.lex()).kind is not SpecTokenKind.EOF:
        if token.kind is SpecTokenKind.L_BRACE:
            depth += 1
        elif token.kind is SpecTokenKind.R_BRACE:
            depth -= 1
        elif token.kind is SpecTokenKind.IDENT and depth == 0:
            if current is not None:
                yield start, current
            start, current = token.span.start, []
        elif token.kind is SpecTokenKind.IDENT and previous in (SpecTokenKind.L_BRACE, SpecTokenKind.SPACE):
            assert current is not None
            current.append((token.span.start, token.span.text))
        previous = token.kind
    if current is not None:
        yield start, current


def _error(spec: str, column: int, message: str, hint: str | None = None) -> KaioPipelineError:
    return KaioPipelineError(
        message, filename="pipeline", line=1, col=column, end_col=column + 1, source_line=spec, hint=hint
    )
