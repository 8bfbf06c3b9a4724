"""An xDSL parser that remembers where in the text each op began, so an op that parses but
does not verify is reported at its ``file:line:col`` (as a parse error is), not only by name."""

from __future__ import annotations

from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.lexer import Span


class PositionedParser(Parser):
    """``positions[op]``: the span of the first token of ``op``'s text (its results, or its name)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.positions: dict[Operation, Span] = {}

    def parse_operation(self) -> Operation:
        start = self._current_token.span  # pyright: ignore[reportPrivateUsage]
        op = super().parse_operation()
        self.positions[op] = start
        return op

    def op_start(self) -> Span:
        """Where the op the parser has just read began (for an error raised while building it)."""
        return line_before(self._current_token.span)  # pyright: ignore[reportPrivateUsage]


def line_before(span: Span[str]) -> Span[str]:
    """The start of the last line with text before ``span``: where the op the parser had just
    read begins (the parser's own position is already on the next token, often the next line)."""
    text = span.input.content
    end = len(text[: span.start].rstrip())
    start = text.rfind("\n", 0, end) + 1
    start += len(text[start:end]) - len(text[start:end].lstrip())
    return Span(start, start, span.input)
