"""The parsed form of a PTX module: what the text says, before any decoding.

The parser produces these plain records; the decoder turns each function body into an
executable program. Keeping the two apart means the parser knows nothing about semantics and
the decoder never looks at characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# --- operands --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegOperand:
    """``%r1``, or a special register such as ``%tid.x``."""

    name: str


@dataclass(frozen=True)
class NegPredOperand:
    """``!%p`` as a source operand (setp's combining predicate, vote's input)."""

    name: str


@dataclass(frozen=True)
class PairOperand:
    """``%p|%q``: setp's two destinations, shfl's value and in-range predicate."""

    first: str
    second: str


@dataclass(frozen=True)
class ImmOperand:
    """A literal. ``kind``: ``int``; ``f32bits``/``f64bits`` (``0f``/``0d`` hex); ``float``."""

    value: int | float
    kind: str


@dataclass(frozen=True)
class SymOperand:
    """A variable, label or function name, optionally ``+ offset`` bytes."""

    name: str
    offset: int = 0


@dataclass(frozen=True)
class AddrOperand:
    """``[base + offset]``; base is a register, a symbol, or None for ``[1234]``."""

    base: RegOperand | SymOperand | None
    offset: int


@dataclass(frozen=True)
class TensorAddrOperand:
    """``[tmap, {x, y}]``: a tensor map's address and the box coordinates (cp.async.bulk.tensor)."""

    address: AddrOperand
    coords: tuple[Operand, ...]


@dataclass(frozen=True)
class SinkOperand:
    """``_``: a destination whose value is discarded."""


@dataclass(frozen=True)
class VecOperand:
    """``{%r1, %r2, _}``: vector load/store data, mov pack/unpack."""

    items: tuple[Operand, ...]


@dataclass(frozen=True)
class ParenOperand:
    """``(a, b)``: only call uses these; kept so the error names the call, not the parser."""

    items: tuple[Operand, ...]


Operand = (
    RegOperand
    | NegPredOperand
    | PairOperand
    | ImmOperand
    | SymOperand
    | AddrOperand
    | TensorAddrOperand
    | SinkOperand
    | VecOperand
    | ParenOperand
)


# --- statements ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    opcode: str  # the whole dotted spelling, e.g. "ld.global.v4.f32"
    operands: tuple[Operand, ...]
    guard: str | None
    guard_negated: bool
    line: int
    text: str  # the source line, stripped, for error messages
    loc: tuple[int, int] | None = None  # (.file index, line) of the .loc in force: the program's source line

    @property
    def mnemonic(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> list[str]:
        return self.opcode.split(".")[1:]


@dataclass(frozen=True)
class Label:
    name: str
    line: int


@dataclass(frozen=True)
class ScopeBegin:
    line: int


@dataclass(frozen=True)
class ScopeEnd:
    line: int


@dataclass(frozen=True)
class RegDecl:
    """``.reg .b32 %r<100>;`` already expanded to the names it declares."""

    ptx_type: str
    names: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class VarDecl:
    """A state-space variable: ``.shared .align 16 .b8 smem[4096];`` and friends.

    ``dims`` holds one entry per ``[n]``; None for ``[]`` (only extern shared has it).
    ``init`` is the flattened initializer, if any.
    """

    space: str  # "shared", "global", "const", "local", "param"
    ptx_type: str
    name: str
    align: int | None
    dims: tuple[int | None, ...]
    extern: bool
    init: tuple[ImmOperand | SymOperand, ...] | None
    line: int
    vector: int = 1


Statement = Instruction | Label | ScopeBegin | ScopeEnd | RegDecl | VarDecl


@dataclass(frozen=True)
class ParamDecl:
    name: str
    ptx_type: str
    align: int | None
    count: int  # array elements, 1 for a scalar
    line: int
    space: str = "param"  # "reg" for a .func parameter passed in a register


@dataclass
class FunctionDecl:
    """An ``.entry`` (kernel) or a ``.func``; ``body`` is None for a declaration."""

    name: str
    is_entry: bool
    params: list[ParamDecl]
    body: list[Statement] | None
    line: int
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)
    returns: list[ParamDecl] = field(default_factory=list)  # a .func's return parameters


@dataclass
class ModuleSyntax:
    version: str | None = None
    target: tuple[str, ...] = ()
    address_size: int = 64
    files: dict[int, str] = field(default_factory=dict)  # the .file table the .loc lines index
    variables: list[VarDecl] = field(default_factory=list)
    functions: list[FunctionDecl] = field(default_factory=list)
