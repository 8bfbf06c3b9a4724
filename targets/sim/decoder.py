"""One ``.entry`` of a parsed module -> an ``EntryInfo`` the executor can launch.

Lays out the kernel's parameter buffer, its shared memory (the static variables it uses, then
the dynamic ``.extern`` region) and its per-thread local memory; resolves labels per ``{ }``
scope; declares registers in scope order; decodes every instruction once through the
instruction table. Any problem raises ``LoadError`` carrying the PTX line.
"""

from __future__ import annotations

import math

from .faults import DecodeError
from .inliner import InlineError, Inliner
from .instruction_table import decode_instruction
from .operands import DecodeContext
from .ops_wgmma import guard_in_flight
from .program import EntryInfo, Op, OpKind, SourceLine, Symbol
from .ptx_types import PTX_TYPES
from .syntax import (
    AddrOperand,
    FunctionDecl,
    Instruction,
    Label,
    Operand,
    ParenOperand,
    RegDecl,
    ScopeBegin,
    ScopeEnd,
    SymOperand,
    VarDecl,
    VecOperand,
)


class LoadError(Exception):
    def __init__(self, message: str, line: int, text: str = ""):
        self.message = message
        self.line = line
        self.text = text
        super().__init__(f"line {line}: {message}")


def _round_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def var_size(var: VarDecl) -> int:
    elem = PTX_TYPES[var.ptx_type].nbytes * var.vector
    return elem * math.prod(d or 0 for d in var.dims) if var.dims else elem


def var_align(var: VarDecl) -> int:
    return var.align or PTX_TYPES[var.ptx_type].nbytes * var.vector


def _referenced(body: list) -> set[str]:  # type: ignore[type-arg]
    names: set[str] = set()

    def visit(op: Operand) -> None:
        if isinstance(op, SymOperand):
            names.add(op.name)
        elif isinstance(op, AddrOperand) and isinstance(op.base, SymOperand):
            names.add(op.base.name)
        elif isinstance(op, (VecOperand, ParenOperand)):
            for item in op.items:
                visit(item)

    for st in body:
        if isinstance(st, Instruction):
            for op in st.operands:
                visit(op)
    return names


def _layout(variables: list[VarDecl], start: int = 0) -> tuple[dict[str, Symbol], int]:
    symbols: dict[str, Symbol] = {}
    offset = start
    for var in variables:
        offset = _round_up(offset, var_align(var))
        size = var_size(var)
        symbols[var.name] = Symbol(var.name, var.space, offset, size)
        offset += size
    return symbols, offset


def decode_entry(
    fn: FunctionDecl,
    module_vars: list[VarDecl],
    globals_: dict[str, Symbol],
    functions: dict[str, FunctionDecl],
    files: dict[int, str] | None = None,
) -> EntryInfo:
    """``files``: the module's ``.file`` table, which names the source lines of the ops."""
    assert fn.body is not None
    try:
        body = Inliner(functions).expand(fn)
    except InlineError as exc:
        raise LoadError(exc.message, exc.statement.line, exc.statement.text) from None
    used = _referenced(body)

    # parameters: laid out in order, each at its alignment
    params: list[tuple[str, str, int]] = []
    offsets: list[int] = []
    symbols: dict[str, Symbol] = dict(globals_)
    cursor = 0
    for p in fn.params:
        t = PTX_TYPES[p.ptx_type]
        cursor = _round_up(cursor, p.align or t.nbytes)
        size = t.nbytes * p.count
        params.append((p.name, p.ptx_type, size))
        offsets.append(cursor)
        symbols[p.name] = Symbol(p.name, "param", cursor, size)
        cursor += size

    # shared memory: static variables this kernel uses, then the dynamic region
    body_vars = [st for st in body if isinstance(st, VarDecl)]
    for var in body_vars:
        if var.space not in ("shared", "local"):
            raise LoadError(f"function-scope .{var.space} variables are not supported", var.line)
    shared_all = [v for v in module_vars if v.space == "shared" and v.name in used] + [v for v in body_vars if v.space == "shared"]
    static = [v for v in shared_all if not v.extern]
    extern = [v for v in shared_all if v.extern]
    shared_symbols, static_end = _layout(static)
    dynamic_offset = _round_up(static_end, max([16] + [var_align(v) for v in extern]))
    for v in extern:
        shared_symbols[v.name] = Symbol(v.name, "shared", dynamic_offset, 0)
    symbols.update(shared_symbols)

    # local memory: per thread
    local_vars = [v for v in module_vars if v.space == "local" and v.name in used] + [v for v in body_vars if v.space == "local"]
    local_symbols, local_bytes = _layout(local_vars)
    symbols.update(local_symbols)

    ops = _decode_body(fn, body, symbols, files or {})
    dc_types = ops[1]
    return EntryInfo(
        name=fn.name,
        params=params,
        param_offsets=offsets,
        param_bytes=cursor,
        ops=ops[0],
        register_types=dc_types,
        static_shared_bytes=static_end,
        dynamic_shared_offset=dynamic_offset,
        local_bytes=local_bytes,
        reqntid=fn.directives.get("reqntid"),
        maxntid=fn.directives.get("maxntid"),
        symbols=symbols,
    )


def _source_line(ins: Instruction, files: dict[int, str]) -> SourceLine | None:
    """The source line the ``.loc`` in force at ``ins`` names (None without line info)."""
    if ins.loc is None:
        return None
    index, line = ins.loc
    return SourceLine(files.get(index, f"<.file {index}>"), line)


def _decode_body(fn: FunctionDecl, body: list, symbols: dict[str, Symbol], files: dict[int, str]) -> tuple[list[Op], list]:  # type: ignore[type-arg]
    # Pass 1: the pc of every label, per scope (labels are visible in their block and inner ones).
    labels: dict[tuple[int, str], int] = {}
    parent: dict[int, int] = {0: -1}
    stack = [0]
    pc = 0
    for st in body:
        if isinstance(st, ScopeBegin):
            parent[len(parent)] = stack[-1]
            stack.append(len(parent) - 1)
        elif isinstance(st, ScopeEnd):
            stack.pop()
        elif isinstance(st, Label):
            key = (stack[-1], st.name)
            if key in labels:
                raise LoadError(f"label {st.name} defined twice", st.line)
            labels[key] = pc
        elif isinstance(st, Instruction):
            pc += 1

    dc = DecodeContext(fn.name, symbols)
    scope_ids = [0]
    next_scope = 1

    def find_label(name: str) -> int:
        scope = scope_ids[-1]
        while scope >= 0:
            if (scope, name) in labels:
                return labels[(scope, name)]
            scope = parent[scope]
        return -1

    dc.label = find_label
    ops: list[Op] = []
    touched: list[set[int]] = []  # per op: the registers it names
    for st in body:
        try:
            if isinstance(st, ScopeBegin):
                scope_ids.append(next_scope)
                next_scope += 1
                dc.scopes.append({})
            elif isinstance(st, ScopeEnd):
                scope_ids.pop()
                dc.scopes.pop()
            elif isinstance(st, RegDecl):
                t = PTX_TYPES[st.ptx_type]
                for name in st.names:
                    dc.declare(name, t)
            elif isinstance(st, Instruction):
                dc.touched = set()
                op = decode_instruction(st, dc)
                op.source = _source_line(st, files)
                ops.append(op)
                touched.append(dc.touched)
        except DecodeError as exc:
            line = getattr(st, "line", fn.line)
            raise LoadError(str(exc), line, getattr(st, "text", "")) from None
    guard_in_flight(ops, touched, dc.async_registers, dc.wgmma_operands)
    # Falling off the end of a kernel ends the thread, as the closing brace does on hardware.
    last = ops[-1] if ops else None
    ops.append(Op(line=last.line if last else fn.line, text="(end of kernel)", klass="exit", kind=OpKind.EXIT, run=None, source=last.source if last else None))
    return ops, dc.register_types
