"""``call`` support: every direct call is replaced by the callee's body at decode time.

nvcc calls ``.func`` device functions it does not inline and passes arguments through
``.param`` variables declared in a ``{ }`` block around the call::

    { .param .b64 param0;  st.param.b64 [param0], %rd1;
      .param .b32 retval0; call.uni (retval0), f, (param0);
      ld.param.b32 %r2, [retval0]; }

The inliner rewrites a body before decoding, so the executor never sees a call:

* every ``.param`` variable declared inside a body becomes a per-thread ``.local`` variable with a
  unique name, and the ld.param/st.param that name it become ld.local/st.local;
* a call becomes ``{ callee body }`` in a scope of its own (the callee's registers and labels
  shadow the caller's), with the callee's ``.param`` formals renamed to the caller's argument
  variables, ``.reg`` formals declared and copied with ``mov``, ``ret`` turned into a branch to
  the end of the inlined body, and a guarded call (``@%p call``) branched around;
* a callee's ``.local`` variables get fresh names per call site (each call has its own frame);
  its function-scope ``.shared`` variables are declared once (one per CTA, as on hardware).

Recursive and indirect calls, and calls of functions without a body (``vprintf``), are rejected.
"""

from __future__ import annotations

from dataclasses import replace

from .syntax import (
    AddrOperand,
    FunctionDecl,
    Instruction,
    Label,
    Operand,
    ParamDecl,
    ParenOperand,
    RegDecl,
    RegOperand,
    ScopeBegin,
    ScopeEnd,
    Statement,
    SymOperand,
    VarDecl,
    VecOperand,
)

MAX_DEPTH = 32


class InlineError(Exception):
    def __init__(self, message: str, statement: Instruction):
        self.message = message
        self.statement = statement
        super().__init__(message)


class Inliner:
    def __init__(self, functions: dict[str, FunctionDecl]):
        self.functions = functions
        self.sites = 0  # call sites and renamed variables so far: makes names unique
        self.shared_declared: set[str] = set()

    def expand(self, fn: FunctionDecl) -> list[Statement]:
        """``fn``'s body with every call inlined (the body itself if it has no call)."""
        assert fn.body is not None
        if not any(isinstance(st, (Instruction, VarDecl)) and _needs_work(st) for st in fn.body):
            return fn.body
        return self._body(fn.body, {}, (fn.name,), None)

    def _fresh(self, name: str) -> str:
        self.sites += 1
        return f"{name}$inl{self.sites}"

    def _body(self, body: list[Statement], formals: dict[str, str], stack: tuple[str, ...], ret_label: str | None) -> list[Statement]:
        out: list[Statement] = []
        scopes = [dict(formals)]  # variable renames visible here
        for st in body:
            if isinstance(st, ScopeBegin):
                scopes.append(dict(scopes[-1]))
                out.append(st)
            elif isinstance(st, ScopeEnd):
                scopes.pop()
                out.append(st)
            elif isinstance(st, VarDecl):
                decl = self._variable(st, scopes[-1], inlined=len(stack) > 1)
                if decl is not None:
                    out.append(decl)
            elif isinstance(st, Instruction):
                ins = _rename(st, scopes[-1])
                if ins.mnemonic == "call":
                    out.extend(self._call(ins, stack))
                elif ins.mnemonic == "ret" and ret_label is not None:
                    out.append(replace(ins, opcode="bra", operands=(SymOperand(ret_label),)))
                else:
                    out.append(ins)
            else:
                out.append(st)
        return out

    def _variable(self, var: VarDecl, renames: dict[str, str], inlined: bool) -> VarDecl | None:
        if var.space == "param" or (var.space == "local" and inlined):
            renames[var.name] = self._fresh(var.name)
            return replace(var, name=renames[var.name], space="local")
        if var.space == "shared" and inlined:
            if var.name in self.shared_declared:
                return None
            self.shared_declared.add(var.name)
        return var

    def _call(self, ins: Instruction, stack: tuple[str, ...]) -> list[Statement]:
        ops = list(ins.operands)
        results: list[Operand] = []
        if ops and isinstance(ops[0], ParenOperand):
            results = list(ops.pop(0).items)  # type: ignore[union-attr]  # checked just above
        target = ops.pop(0) if ops else None
        if not isinstance(target, SymOperand) or target.offset:
            raise InlineError("indirect calls (through a register) are not supported", ins)
        name = target.name
        args: list[Operand] = []
        if ops and isinstance(ops[0], ParenOperand):
            args = list(ops.pop(0).items)  # type: ignore[union-attr]
        if ops:
            raise InlineError("calls with a prototype or a target list (indirect calls) are not supported", ins)
        callee = self.functions.get(name)
        if callee is None or callee.is_entry:
            raise InlineError(f"call of {name}, which is not a .func of this module", ins)
        if callee.body is None:
            raise InlineError(f"call of {name}, which has no body in this module (an external function cannot run on the simulator)", ins)
        if name in stack:
            raise InlineError(f"recursive call of {name} ({' -> '.join(stack + (name,))}): the simulator inlines calls", ins)
        if len(stack) >= MAX_DEPTH:
            raise InlineError(f"calls nested deeper than {MAX_DEPTH}", ins)
        if len(args) != len(callee.params) or len(results) != len(callee.returns):
            raise InlineError(f"{name} takes {len(callee.params)} argument(s) and returns {len(callee.returns)}; the call passes {len(args)} and takes {len(results)}", ins)

        end = self._fresh("$ret")
        formals: dict[str, str] = {}
        prologue: list[Statement] = []
        epilogue: list[Statement] = []
        for formal, actual in zip(callee.params, args):
            prologue += self._bind(formal, actual, formals, ins, incoming=True)
        for formal, actual in zip(callee.returns, results):
            prologue += self._bind(formal, actual, formals, ins, incoming=False)
            if formal.space == "reg":
                epilogue.append(_mov(formal.ptx_type, actual, _register(formal.name), ins))
        inlined = self._body(callee.body, formals, stack + (name,), end)
        block: list[Statement] = [ScopeBegin(ins.line), *prologue, *inlined, Label(end, ins.line), *epilogue, ScopeEnd(ins.line)]
        if ins.guard is None:
            return block
        skip = self._fresh("$skip")
        branch = Instruction("bra", (SymOperand(skip),), ins.guard, not ins.guard_negated, ins.line, ins.text, ins.loc)
        return [branch, *block, Label(skip, ins.line)]

    def _bind(self, formal: ParamDecl, actual: Operand, formals: dict[str, str], ins: Instruction, incoming: bool) -> list[Statement]:
        if formal.space == "reg":
            decl = RegDecl(formal.ptx_type, (formal.name,), ins.line)
            return [decl, _mov(formal.ptx_type, _register(formal.name), actual, ins)] if incoming else [decl]
        if not isinstance(actual, SymOperand) or actual.offset:
            raise InlineError(f"argument for .param {formal.name} must name a .param variable", ins)
        formals[formal.name] = actual.name
        return []


def _needs_work(st: Instruction | VarDecl) -> bool:
    return st.mnemonic == "call" if isinstance(st, Instruction) else st.space == "param"


def _mov(ptx_type: str, dst: Operand, src: Operand, ins: Instruction) -> Instruction:
    return Instruction(f"mov.{ptx_type}", (dst, src), None, False, ins.line, ins.text, ins.loc)


def _rename(ins: Instruction, renames: dict[str, str]) -> Instruction:
    """Rename variables; ld/st.param of a renamed (now .local) variable become ld/st.local."""
    if not renames:
        return ins
    hit = False

    def visit(op: Operand) -> Operand:
        nonlocal hit
        if isinstance(op, SymOperand) and op.name in renames:
            hit = True
            return SymOperand(renames[op.name], op.offset)
        if isinstance(op, AddrOperand) and isinstance(op.base, SymOperand) and op.base.name in renames:
            hit = True
            return AddrOperand(SymOperand(renames[op.base.name], op.base.offset), op.offset)
        if isinstance(op, VecOperand):
            return VecOperand(tuple(visit(item) for item in op.items))
        if isinstance(op, ParenOperand):
            return ParenOperand(tuple(visit(item) for item in op.items))
        return op

    operands = tuple(visit(op) for op in ins.operands)
    if not hit:
        return ins
    opcode = ins.opcode
    if ins.mnemonic in ("ld", "st"):
        opcode = ".".join("local" if part.startswith("param") else part for part in opcode.split("."))
    return replace(ins, opcode=opcode, operands=operands)


def _register(name: str) -> Operand:
    return RegOperand(name) if name.startswith("%") else SymOperand(name)
