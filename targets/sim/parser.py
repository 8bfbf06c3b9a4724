"""PTX text -> ``ModuleSyntax``: directives, variables, functions and their statements.

A small recursive-descent parser over the lexer's tokens. It accepts what kaio, nvcc and Triton
emit (debug sections, ``.loc``, pointer-attributed params, scoping blocks, one-element vector
operands) and rejects anything else with the line it stopped at. It checks grammar only;
meaning is the decoder's job. Of the debug directives it keeps the line info: the ``.file``
table and, on each instruction, the ``.loc`` in force (which source line it implements).
"""

from __future__ import annotations

from .lexer import PtxSyntaxError, Token, parse_number, tokenize
from .ptx_types import PTX_TYPES
from .syntax import (
    AddrOperand,
    FunctionDecl,
    ImmOperand,
    Instruction,
    Label,
    ModuleSyntax,
    NegPredOperand,
    Operand,
    PairOperand,
    TensorAddrOperand,
    ParamDecl,
    ParenOperand,
    RegDecl,
    RegOperand,
    ScopeBegin,
    ScopeEnd,
    SinkOperand,
    Statement,
    SymOperand,
    VarDecl,
    VecOperand,
)

_SPACES = {".global": "global", ".const": "const", ".shared": "shared", ".local": "local", ".param": "param"}
_LINKAGE = {".visible", ".weak", ".extern", ".common"}
# Directives that end at the end of their line rather than at a semicolon.
_LINE_DIRECTIVES = {".version", ".target", ".address_size", ".file", ".loc"}
_PERF_DIRECTIVES = {
    ".maxntid",
    ".reqntid",
    ".minnctapersm",
    ".maxnctapersm",
    ".maxnreg",
    ".reqnctapercluster",
    ".maxclusterrank",
    ".explicitcluster",
    ".noreturn",
}


def parse_module(text: str) -> ModuleSyntax:
    """Parse a whole PTX module; raises ``PtxSyntaxError`` naming the line."""
    return _Parser(tokenize(text), text.splitlines()).module()


class _Parser:
    def __init__(self, tokens: list[Token], lines: list[str]):
        self.tokens = tokens
        self.lines = lines
        self.pos = 0
        self.files: dict[int, str] = {}  # .file index -> name
        self.loc: tuple[int, int] | None = None  # the .loc in force: (.file index, line)

    # --- cursor -----------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token | None:
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            last = self.tokens[-1].line if self.tokens else 1
            raise PtxSyntaxError("unexpected end of input", last)
        self.pos += 1
        return tok

    def accept(self, text: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.text == text:
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.text != text:
            raise PtxSyntaxError(f"expected {text!r}, found {tok.text!r}", tok.line)
        return tok

    def expect_kind(self, kind: str, what: str) -> Token:
        tok = self.next()
        if tok.kind != kind:
            raise PtxSyntaxError(f"expected {what}, found {tok.text!r}", tok.line)
        return tok

    def expect_int(self) -> int:
        negative = self.accept("-")
        tok = self.expect_kind("num", "an integer")
        value, kind = parse_number(tok.text, tok.line)
        if kind != "int":
            raise PtxSyntaxError(f"expected an integer, found {tok.text!r}", tok.line)
        return -int(value) if negative else int(value)

    def skip_line(self, line: int) -> list[Token]:
        taken = []
        while (tok := self.peek()) is not None and tok.line == line:
            taken.append(self.next())
        return taken

    def skip_past(self, text: str) -> None:
        while self.next().text != text:
            pass

    def skip_braces(self) -> None:
        self.expect("{")
        depth = 1
        while depth:
            t = self.next().text
            depth += (t == "{") - (t == "}")

    def source(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def debug_directive(self, head: Token) -> None:
        """``.file index "name" [, timestamp, size]`` or ``.loc index line column [, ...]``."""
        args = [a for a in self.skip_line(head.line) if a.text != ","]
        if len(args) < 2 or args[0].kind != "num":
            raise PtxSyntaxError(f"malformed {head.text} directive", head.line)
        index = int(parse_number(args[0].text, head.line)[0])
        if head.text == ".file":
            names = [a.text[1:-1] for a in args[1:] if a.kind == "str"]  # "name" or "dir" "name"
            if not names:
                raise PtxSyntaxError(".file needs a quoted file name", head.line)
            self.files[index] = "/".join(names)
        elif args[1].kind == "num":
            self.loc = (index, int(parse_number(args[1].text, head.line)[0]))
        else:
            raise PtxSyntaxError(".loc needs a line number", head.line)

    # --- module level -----------------------------------------------------------------------

    def module(self) -> ModuleSyntax:
        mod = ModuleSyntax()
        extern = False
        while (tok := self.peek()) is not None:
            t = tok.text
            if t in (".file", ".loc"):
                self.debug_directive(self.next())
            elif t in _LINE_DIRECTIVES:
                self.next()
                args = [a.text for a in self.skip_line(tok.line) if a.text != ","]
                if t == ".version" and args:
                    mod.version = args[0]
                elif t == ".target":
                    mod.target = tuple(args)
                elif t == ".address_size" and args:
                    mod.address_size = int(args[0])
            elif t == ".section":
                self.next()
                self.next()  # section name
                self.skip_braces()
            elif t == ".pragma":
                self.skip_past(";")
            elif t in _LINKAGE:
                self.next()
                extern = extern or t == ".extern"
                continue
            elif t in (".entry", ".func"):
                mod.functions.append(self.function())
            elif t in _SPACES:
                mod.variables.extend(self.variables(extern))
            else:
                raise PtxSyntaxError(f"unexpected {t!r} at module level", tok.line)
            extern = False
        mod.files = self.files
        return mod

    def variables(self, extern: bool) -> list[VarDecl]:
        head = self.next()
        space = _SPACES[head.text]
        align: int | None = None
        vector = 1
        ptx_type: str | None = None
        while (tok := self.peek()) is not None and tok.text.startswith("."):
            self.next()
            if tok.text == ".align":
                align = self.expect_int()
            elif tok.text in (".v2", ".v4", ".v8"):
                vector = int(tok.text[2:])
            elif tok.text[1:] in PTX_TYPES:
                ptx_type = tok.text[1:]
            elif tok.text in (".ptr",) or tok.text[1:] in _SPACES.values():
                continue
            else:
                raise PtxSyntaxError(f"unknown variable attribute {tok.text!r}", tok.line)
        if ptx_type is None:
            raise PtxSyntaxError("variable declaration without a type", head.line)
        decls = []
        while True:
            name = self.expect_kind("ident", "a variable name").text
            dims: list[int | None] = []
            while self.accept("["):
                if self.accept("]"):
                    dims.append(None)
                else:
                    dims.append(self.expect_int())
                    self.expect("]")
            init = self.initializer() if self.accept("=") else None
            decls.append(VarDecl(space, ptx_type, name, align, tuple(dims), extern, init, head.line, vector))
            if not self.accept(","):
                break
        self.expect(";")
        return decls

    def initializer(self) -> tuple[ImmOperand | SymOperand, ...]:
        items: list[ImmOperand | SymOperand] = []

        def item() -> None:
            if self.accept("{"):
                if not self.accept("}"):
                    item()
                    while self.accept(","):
                        item()
                    self.expect("}")
                return
            tok = self.peek()
            if tok is not None and tok.text == "generic":
                self.next()
                self.expect("(")
                items.append(SymOperand(self.expect_kind("ident", "a symbol").text))
                self.expect(")")
                return
            op = self.operand()
            if not isinstance(op, (ImmOperand, SymOperand)):
                raise PtxSyntaxError("initializers hold constants or symbol addresses", self.tokens[self.pos - 1].line)
            items.append(op)

        item()
        return tuple(items)

    # --- functions ----------------------------------------------------------------------------

    def function(self) -> FunctionDecl:
        head = self.next()
        is_entry = head.text == ".entry"
        returns: list[ParamDecl] = []
        if not is_entry and self.peek() is not None and self.peek().text == "(":  # type: ignore[union-attr]
            returns = self.params()
        name = self.expect_kind("ident", "a function name").text
        params = self.params() if self.peek() is not None and self.peek().text == "(" else []  # type: ignore[union-attr]
        directives: dict[str, tuple[int, ...]] = {}
        while (tok := self.peek()) is not None and (tok.text in _PERF_DIRECTIVES or tok.text == ".pragma"):
            self.next()
            if tok.text == ".pragma":
                self.skip_past(";")
                continue
            values = []
            while (nxt := self.peek()) is not None and nxt.kind == "num":
                values.append(self.expect_int())
                if not self.accept(","):
                    break
            directives[tok.text[1:]] = tuple(values)
        body = None if self.accept(";") else self.body()
        return FunctionDecl(name, is_entry, params, body, head.line, directives, returns)

    def params(self) -> list[ParamDecl]:
        self.expect("(")
        params: list[ParamDecl] = []
        if self.accept(")"):
            return params
        while True:
            head = self.next()
            if head.text not in (".param", ".reg"):  # .reg params appear in .func signatures
                raise PtxSyntaxError(f"expected .param, found {head.text!r}", head.line)
            align = None
            ptx_type = None
            while (tok := self.peek()) is not None and tok.text.startswith("."):
                self.next()
                if tok.text == ".align":
                    align = self.expect_int()
                elif tok.text[1:] in PTX_TYPES:
                    ptx_type = tok.text[1:]
                elif tok.text == ".ptr" or tok.text[1:] in _SPACES.values():
                    continue
                else:
                    raise PtxSyntaxError(f"unknown parameter attribute {tok.text!r}", tok.line)
            if ptx_type is None:
                raise PtxSyntaxError("parameter without a type", head.line)
            name = self.expect_kind("ident", "a parameter name").text
            count = 1
            if self.accept("["):
                count = self.expect_int()
                self.expect("]")
            params.append(ParamDecl(name, ptx_type, align, count, head.line, head.text[1:]))
            if self.accept(")"):
                return params
            self.expect(",")

    def body(self) -> list[Statement]:
        self.expect("{")
        self.loc = None  # line info does not carry over from another function
        out: list[Statement] = []
        depth = 0
        while True:
            tok = self.next()
            t = tok.text
            if t == "{":
                depth += 1
                out.append(ScopeBegin(tok.line))
            elif t == "}":
                if depth == 0:
                    return out
                depth -= 1
                out.append(ScopeEnd(tok.line))
            elif t == ".reg":
                out.append(self.registers(tok))
            elif t in _SPACES:
                self.pos -= 1
                out.extend(self.variables(extern=False))
            elif t in (".loc", ".file"):
                self.debug_directive(tok)
            elif t == ".pragma":
                self.skip_past(";")
            elif t == "@":
                negated = self.accept("!")
                guard = self.expect_kind("ident", "a predicate register").text
                out.append(self.instruction(self.expect_kind("ident", "an instruction"), guard, negated))
            elif tok.kind == "ident" and self.peek() is not None and self.peek().text == ":":  # type: ignore[union-attr]
                self.next()
                out.append(Label(t, tok.line))
            elif tok.kind == "ident" and not t.startswith("."):
                out.append(self.instruction(tok, None, False))
            else:
                raise PtxSyntaxError(f"unexpected {t!r} in function body", tok.line)

    def registers(self, head: Token) -> RegDecl:
        ptx_type = None
        while (tok := self.peek()) is not None and tok.text.startswith("."):
            self.next()
            if tok.text[1:] in PTX_TYPES:
                ptx_type = tok.text[1:]
            else:
                raise PtxSyntaxError(f"unsupported register attribute {tok.text!r}", tok.line)
        if ptx_type is None:
            raise PtxSyntaxError(".reg without a type", head.line)
        names: list[str] = []
        while True:
            name = self.expect_kind("ident", "a register name").text
            if self.accept("<"):
                count = self.expect_int()
                self.expect(">")
                names.extend(f"{name}{i}" for i in range(count))
            else:
                names.append(name)
            if not self.accept(","):
                break
        self.expect(";")
        return RegDecl(ptx_type, tuple(names), head.line)

    # --- instructions -------------------------------------------------------------------------

    def instruction(self, op: Token, guard: str | None, negated: bool) -> Instruction:
        operands: list[Operand] = []
        if not self.accept(";"):
            while True:
                operands.append(self.operand())
                if self.accept(";"):
                    break
                self.expect(",")
        return Instruction(op.text, tuple(operands), guard, negated, op.line, self.source(op.line), self.loc)

    def operand(self) -> Operand:
        tok = self.next()
        t = tok.text
        if t == "[":
            return self.address()
        if t in ("{", "("):
            close = "}" if t == "{" else ")"
            items: list[Operand] = []
            if not self.accept(close):
                while True:
                    items.append(self.operand())
                    if self.accept(close):
                        break
                    self.expect(",")
            return VecOperand(tuple(items)) if t == "{" else ParenOperand(tuple(items))
        if t == "!":
            return NegPredOperand(self.expect_kind("ident", "a predicate register").text)
        if t == "-":
            inner = self.operand()
            if not isinstance(inner, ImmOperand):
                raise PtxSyntaxError("'-' applies only to literals", tok.line)
            return _negate(inner)
        if tok.kind == "num":
            value, kind = parse_number(t, tok.line)
            return ImmOperand(value, kind)
        if tok.kind != "ident":
            raise PtxSyntaxError(f"unexpected {t!r} in operands", tok.line)
        if t == "_":
            if self.accept("|"):
                return PairOperand("_", self.expect_kind("ident", "a predicate register").text)
            return SinkOperand()
        if self.accept("|"):
            return PairOperand(t, self.expect_kind("ident", "a predicate register").text)
        if t.startswith("%"):
            return RegOperand(t)
        offset = 0
        if self.peek() is not None and self.peek().text in ("+", "-"):  # type: ignore[union-attr]
            sign = -1 if self.next().text == "-" else 1
            offset = sign * self.expect_int()
        return SymOperand(t, offset)

    def address(self) -> AddrOperand | TensorAddrOperand:
        tok = self.next()
        base: RegOperand | SymOperand | None
        offset = 0
        if tok.kind == "num":
            base = None
            value, kind = parse_number(tok.text, tok.line)
            if kind != "int":
                raise PtxSyntaxError("an absolute address must be an integer", tok.line)
            offset = int(value)
        elif tok.kind == "ident":
            base = RegOperand(tok.text) if tok.text.startswith("%") else SymOperand(tok.text)
        else:
            raise PtxSyntaxError(f"bad address starting with {tok.text!r}", tok.line)
        while (nxt := self.peek()) is not None and nxt.text in ("+", "-"):
            self.next()
            value = self.expect_int()
            offset += -value if nxt.text == "-" else value
        if self.accept(","):  # [tmap, {x, y}]
            coords = self.operand()
            self.expect("]")
            if not isinstance(coords, VecOperand):
                raise PtxSyntaxError("a tensor address is [tensor-map, {coordinates}]", tok.line)
            return TensorAddrOperand(AddrOperand(base, offset), coords.items)
        self.expect("]")
        return AddrOperand(base, offset)


def _negate(imm: ImmOperand) -> ImmOperand:
    if imm.kind == "f32bits":
        return ImmOperand(int(imm.value) ^ (1 << 31), imm.kind)
    if imm.kind == "f64bits":
        return ImmOperand(int(imm.value) ^ (1 << 63), imm.kind)
    return ImmOperand(-imm.value, imm.kind)
