"""PTX printer: a thin, deterministic walk over the ``ptx`` dialect.

Everything about spelling lives in the ops (``PtxInstr.ptx``); the printer only names virtual
registers (``%r1``, ``%f2``... by register class, in definition order), declares them, inlines
``ptx.const`` values as immediates where the using instruction allows it, and writes the module
header with the lowest PTX ISA version the target and the instructions used allow.

Line info comes from the ops' locations (``lower-to-ptx`` gives each instruction the location of
the Python statement it implements): one ``.file`` per source file and a ``.loc`` wherever the
statement changes, as ``nvcc -lineinfo`` writes them, so ``ptxas -lineinfo``, Nsight Compute,
cuda-gdb and kaio's simulator map instructions back to the Python line. No ``.section
.debug_*`` is needed for that.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from enum import Enum, auto
from functools import cache
from io import StringIO
from typing import IO

from kaio.dialects import ptx
from kaio.dialects.ptx_base import is_instr_class, spec_requirements
from kaio.dialects.stage_attrs import module_target
from kaio.targets.ptx.arch import DEFAULT_ARCH, MAX_PTX, get_arch, ptx_version_text
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp
from xdsl.ir import Operation, SSAValue

from kaio.errors import KaioCompileError, KaioTargetError
from kaio.ir_walk import ops_of, ops_within

# .reg declarations in this order, as nvcc does
_CLASS_ORDER = ("p", "rs", "r", "rd", "f", "fd")


def _needs_register(const: ptx.ConstOp, text: str | None) -> bool:
    """A constant needs a register unless every use takes it as an immediate (``text``, its
    :meth:`~ptx.ConstOp.immediate`)."""
    if text is None:
        return True
    for use in const.result.uses:
        user = use.operation
        if not is_instr_class(type(user)):
            return True
        position = use.index
        if user.guard is not None and position == len(user.args) - 1:
            return True
        info = user.INFO
        if position not in info.imm_args | info.imm_required:
            return True
    return False


_NOT_LISTED = object()  # a constant outside the entry: its immediate is worked out on the spot


class _Registers:
    """Names the virtual registers of one entry."""

    def __init__(self, entry: ptx.EntryOp):
        # by the value's id: an SSA value hashes by id through a Python ``__hash__``, a call per
        # look-up, and the printer looks up every operand (the values live while it prints)
        self.names: dict[int, str] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.decl_type: dict[str, str] = {}
        self.inlined: set[Operation] = set()
        # each constant's immediate text by the op's id, worked out once (an instruction's
        # immediate operand reads it again; the ops live while the printer does)
        self.immediates: dict[int, str | None] = {}
        classes = ptx.REGISTER_CLASSES
        by_id = {id(t): c for t, c in classes.items()}  # most types are these very objects
        counts = self.counts
        for op in ops_of(entry.body.block):
            if type(op) is ptx.ConstOp:
                text = self.immediates[id(op)] = op.immediate()  # type: ignore[attr-defined]
                if not _needs_register(op, text):  # type: ignore[arg-type]
                    self.inlined.add(op)
                    continue
            for result in op.results:
                prefix, decl = by_id.get(id(result._type)) or classes[result.type]  # pyright: ignore[reportPrivateUsage]
                counts[prefix] += 1
                self.decl_type[prefix] = decl
                self.names[id(result)] = f"%{prefix}{counts[prefix]}"

    def reg(self, value: SSAValue) -> str:
        name = self.names.get(id(value))
        if name is None:
            raise ValueError(f"value {value} has no register (defined outside the entry?)")
        return name

    def imm(self, value: SSAValue) -> str:
        owner = value.owner
        if type(owner) is ptx.ConstOp:
            known = self.immediates.get(id(owner), _NOT_LISTED)
            text = owner.immediate() if known is _NOT_LISTED else known  # type: ignore[attr-defined]
            if text is not None:
                return text
        return self.reg(value)

    def declarations(self) -> list[str]:
        return [
            f"\t.reg .{self.decl_type[p]} \t%{p}<{self.counts[p] + 1}>;"
            for p in _CLASS_ORDER
            if self.counts.get(p)
        ]


class _LineInfo:
    """The ``.file`` table of a module and the ``.loc`` directives of its entries."""

    def __init__(self, ops: Iterable[Operation]):
        self.files: dict[str, int] = {}
        for op in ops:
            loc = op.location
            if type(loc) is FileLineColLoc:
                self.files.setdefault(loc.filename.data, len(self.files) + 1)
        self.current: tuple[int, int, int] | None = None

    def declarations(self) -> list[str]:
        # A PTX string has no escapes: a quote or a line break in a path cannot be written.
        clean = {name: name.replace('"', "?").replace("\n", "?") for name in self.files}
        return [f'.file {index} "{clean[name]}"' for name, index in self.files.items()]

    def directive(self, op: Operation) -> str | None:
        """``.loc file line column`` when ``op`` starts another source position, else None."""
        loc = op.location
        if type(loc) is not FileLineColLoc:  # the exact type, as the file table reads it
            return None
        position = (self.files[loc.filename.data], loc.line.data, loc.column.data)
        if position == self.current:
            return None
        self.current = position
        return "\t.loc {} {} {}".format(*position)


def _param_decl(name: str, ptx_type: str) -> str:
    if ptx_type == ptx.TENSOR_MAP_PARAM:  # a CUtensorMap by value (__grid_constant__)
        return f".param .align 64 .b8 {name}[128]"
    return f".param .{ptx_type} {name}"


class _Kind(Enum):
    """How the entry's body prints an op of some class."""

    SKIP = auto()  # ptx.reg (declared by the register table), dynamic shared (at module scope)
    CONST = auto()  # printed as a mov unless every use inlines it
    ARRAY = auto()  # a declaration, before the body
    LABEL = auto()
    COMMENT = auto()
    INSTR = auto()
    OTHER = auto()  # not PTX: an error


@cache
def _kind(cls: type[Operation]) -> _Kind:
    """Per op class, once: isinstance on xDSL's ABC-derived ops is slow, and runs per op."""
    if issubclass(cls, ptx.RegOp | ptx.DynamicSharedDeclOp):
        return _Kind.SKIP
    if issubclass(cls, ptx.ArrayDecl):
        return _Kind.ARRAY
    if issubclass(cls, ptx.LabelOp):
        return _Kind.LABEL
    if issubclass(cls, ptx.CommentOp):
        return _Kind.COMMENT
    if issubclass(cls, ptx.ConstOp):
        return _Kind.CONST
    return _Kind.INSTR if issubclass(cls, ptx.PtxInstr) else _Kind.OTHER


def _print_entry(entry: ptx.EntryOp, out: IO[str], comments: bool, lines: _LineInfo) -> None:
    regs = _Registers(entry)
    lines.current = None
    name = entry.sym_name.data
    for op in ops_of(entry.body.block):  # dynamic shared memory is declared at module scope
        if type(op) is ptx.DynamicSharedDeclOp:
            out.write(op.ptx(regs.reg, regs.imm) + "\n\n")
    params = ",\n".join(f"\t{_param_decl(n, t)}" for n, t in entry.params)
    out.write(f".visible .entry {name}(\n{params}\n)\n" if params else f".visible .entry {name}()\n")
    if entry.maxntid is not None:
        out.write(".maxntid " + ", ".join(str(int(d)) for d in entry.maxntid.get_values()) + "\n")
    if entry.maxnreg is not None:
        out.write(f".maxnreg {entry.maxnreg.value.data}\n")
    out.write("{\n")
    for line in regs.declarations():
        out.write(line + "\n")
    body: list[str] = []
    for op in ops_of(entry.body.block):
        kind = _kind(type(op))
        if kind is _Kind.SKIP or (kind is _Kind.CONST and op in regs.inlined):
            continue
        if kind is _Kind.ARRAY:
            out.write("\t" + op.ptx(regs.reg, regs.imm) + "\n")  # type: ignore[attr-defined]
            continue
        if kind is _Kind.LABEL:
            body.append(op.ptx(regs.reg, regs.imm))  # type: ignore[attr-defined]
            continue
        if kind is _Kind.COMMENT and not comments:
            continue
        if kind is _Kind.OTHER:
            raise ValueError(f"'{op.name}' is not a PTX instruction; lower it before printing")
        loc = lines.directive(op)
        if loc is not None and kind is _Kind.COMMENT:
            body.append(f"{loc}  {op.ptx(regs.reg, regs.imm)}")  # type: ignore[attr-defined]  # the statement's text
            continue
        if loc is not None:
            body.append(loc)
        body.append("\t" + op.ptx(regs.reg, regs.imm))  # type: ignore[attr-defined]
    out.write("\n")
    out.write("\n".join(body))
    out.write("\n}\n")


def print_ptx(module: ModuleOp, arch: str | None = None, comments: bool = True) -> str:
    """PTX text of every ``ptx.entry`` in the module, for ``arch`` (e.g. ``"sm_80"``; None: the
    module's ``kaio.target``, else sm_80; given, it must be the module's).

    ``comments``: write each Python statement's text beside its ``.loc`` (the ``.file`` and
    ``.loc`` line info is written either way).

    Raises KaioTargetError if an instruction needs a newer GPU than ``arch``.
    """
    held = module_target(module)
    target = get_arch(arch or held or DEFAULT_ARCH)
    if held is not None and get_arch(held).name != target.name:
        raise KaioCompileError(f"print_ptx: the module compiles for {held} (its kaio.target), not {target.name}")
    ops = ops_within(module)  # one walk for the requirements and the line table
    needed = [req for op in ops if is_instr_class(type(op)) for req in spec_requirements(op)]  # type: ignore[arg-type]
    for req in needed:
        if not req.met_by(target.sm, target.arch_specific):
            raise req.error(target.name)
    version = max([target.min_ptx, *(req.min_ptx for req in needed)])
    if version > MAX_PTX:
        raise KaioTargetError(
            "PTX ISA " + ptx_version_text(version),
            target.sm,
            target.name,
            f"the module needs PTX ISA {ptx_version_text(version)}, newer than the "
            f"{ptx_version_text(MAX_PTX)} kaio emits",
        )
    from kaio import __version__

    out = StringIO()
    out.write(f"//\n// Generated by kaio {__version__}\n//\n\n")
    out.write(f".version {ptx_version_text(version)}\n.target {target.name}\n.address_size 64\n")
    lines = _LineInfo(ops)
    if lines.files:
        out.write("\n" + "\n".join(lines.declarations()) + "\n")
    for op in module.ops:
        if isinstance(op, ptx.EntryOp):
            out.write("\n")
            _print_entry(op, out, comments, lines)
    return out.getvalue()
