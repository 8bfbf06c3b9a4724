"""Splits PTX text into tokens that remember their source line.

Identifiers keep their dots (``ld.global.v4.f32``, ``%tid.x``, ``.reg``) and ``::`` parts
(``ld.shared::cta``, ``.L2::evict_last``): the opcode is one token and the decoder splits it.
A single ``:`` (after a label) and every other punctuation mark is its own token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class PtxSyntaxError(Exception):
    """Malformed PTX text; ``line`` is 1-based. The loader turns it into KaioLaunchError."""

    def __init__(self, message: str, line: int):
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "ident", "num", "str", "punct"
    text: str
    line: int


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<str>"[^"\n]*")
  | (?P<num>
        0[fF][0-9a-fA-F]{8}(?![0-9a-zA-Z_])
      | 0[dD][0-9a-fA-F]{16}(?![0-9a-zA-Z_])
      | 0[xX][0-9a-fA-F]+U?
      | 0[bB][01]+U?
      | [0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?
      | [0-9]+[eE][+-]?[0-9]+
      | [0-9]+U?
    )
  | (?P<ident>[A-Za-z_$%.](?:[A-Za-z0-9_$.]|::)*)
  | (?P<punct>[{}()\[\],;:=+\-|!@<>*])
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    line = 1
    pos = 0
    end = len(text)
    match = _TOKEN_RE.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            if text.startswith("/*", pos):
                raise PtxSyntaxError("unterminated /* comment", line)
            raise PtxSyntaxError(f"unexpected character {text[pos]!r}", line)
        kind = m.lastgroup
        value = m.group()
        if kind == "nl":
            line += 1
        elif kind == "bcomment":
            line += value.count("\n")
        elif kind not in ("ws", "lcomment"):
            tokens.append(Token(kind, value, line))  # type: ignore[arg-type]
        pos = m.end()
    return tokens


def parse_number(text: str, line: int) -> tuple[int | float, str]:
    """The value and kind of a numeric token (see ``ImmOperand``)."""
    t = text.rstrip("U")
    head = t[:2].lower()
    if head == "0f" and len(t) == 10:
        return int(t[2:], 16), "f32bits"
    if head == "0d" and len(t) == 18:
        return int(t[2:], 16), "f64bits"
    if head == "0x":
        return int(t[2:], 16), "int"
    if head == "0b":
        return int(t[2:], 2), "int"
    if "." in t or "e" in t.lower():
        return float(t), "float"
    if len(t) > 1 and t.startswith("0"):
        try:
            return int(t, 8), "int"  # PTX follows C: a leading 0 means octal
        except ValueError as exc:
            raise PtxSyntaxError(f"bad octal literal {text!r}", line) from exc
    return int(t), "int"
