"""The state of lowering one ``kernel.func`` to one ``ptx.entry``.

Rules (see ``kaio.passes.to_ptx``) read kernel values through :meth:`PtxEmitter.value`, append
PTX ops with :meth:`instr`/:meth:`emit`, and bind results with :meth:`bind`. The emitter keeps
constants and parameter loads in a prologue (so a constant defined once dominates every use,
whatever branch first asked for it) and shared-memory declarations on top.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kaio.dialects import kernel, ptx
from kaio.dialects import stage_attrs
from kaio.dialects.plain_init import add_ops_plain
from kaio.dialects.ptx_base import is_instr_class, spec_requirements
from kaio.passes.to_ptx import AGGREGATES, LOWERINGS
from kaio.targets.ptx.arch import Arch
from xdsl.dialects.builtin import (
    FileLineColLoc,
    IntegerAttr,
    IntegerType,
    MemRefType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from kaio.errors import KaioCompileError, KaioTargetError
from kaio.locations import marker_location
from kaio.passes.element_types import FP8_TYPES, element_bytes, is_float, width  # noqa: F401  (rules read them here too)

# --------------------------------------------------------------------------- type helpers


def reg_type(t: Attribute) -> Attribute:
    """Register type holding an IR value: 8-bit integers and floats live in 16-bit registers."""
    if isinstance(t, IntegerType) and t.width.data == 8 or t in FP8_TYPES:
        return i16
    if t in (i1, i16, i32, i64, f16, bf16, f32, f64):
        return t
    raise KaioCompileError(f"type {t} has no PTX register class")


def int_spec(t: Attribute, signed: bool) -> str:
    """``s32``/``u32``... of an integer value (8-bit values compute in 16-bit registers)."""
    return ("s" if signed else "u") + str(max(width(t), 16))


def bits_spec(t: Attribute) -> str:
    return "pred" if t == i1 else f"b{max(width(t), 16)}"


_FLOAT_SPECS: dict[Attribute, str] = {f16: "f16", bf16: "bf16", f32: "f32", f64: "f64", **FP8_TYPES}


def float_spec(t: Attribute) -> str:
    return _FLOAT_SPECS[t]  # built once: hashing six types per call showed in compile profiles


def mem_spec(t: Attribute) -> str:
    """PTX type of a load/store of one element."""
    if t == i1:
        return "u8"
    if isinstance(t, IntegerType) or t in FP8_TYPES:
        return f"u{width(t)}"
    if t in (f16, bf16):
        return "b16"
    return float_spec(t)


# --------------------------------------------------------------------------- the emitter


class PtxEmitter:
    def __init__(self, func: kernel.KernelFuncOp, arch: Arch):
        self.func = func
        self.arch = arch
        self.name = func.sym_name.data
        self.block_shape = func.block_shape
        self.values: dict[SSAValue, SSAValue] = {}
        self.aggregates: dict[SSAValue, tuple[SSAValue, ...]] = {}
        self.decls: list[Operation] = []
        self.prologue: list[Operation] = []
        # (the prologue list, how many of its ops are in the set, their results): see hoisted
        self._prologue_known: tuple[list[Operation], int, set[SSAValue]] = ([], 0, set())
        self.body: list[Operation] = []
        self._consts: dict[tuple[object, Attribute], SSAValue] = {}
        self._invariants: dict[object, SSAValue] = {}
        self._labels = 0
        self._symbols: set[str] = set()
        self.scratch: dict[str, SSAValue] = {}  # shared scratch buffers of lowering rules
        self.deferred: set[SSAValue] = set()  # values a later op emits itself (streamed tile loads)
        self.packed: dict[tuple[SSAValue, int], SSAValue] = {}  # (16-bit tile, even r): word of r, r+1
        self.location: kernel.SourceLocOp | None = None  # the Python statement being lowered
        self.source: FileLineColLoc | None = None  # its location: every emitted op carries it
        params = []
        for pname, ptype in zip(func.param_names.data, func.function_type.inputs.data):
            params.append((f"{self.name}_{pname.data}", self._param_ptx_type(ptype)))
        # a producer warpgroup (kaio.producer_threads) is launched beyond the laid-out block
        producers = func.attributes.get(stage_attrs.PRODUCER_THREADS_ATTR)
        extra = producers.value.data if producers is not None else 0  # type: ignore[attr-defined]
        bx, by, bz = self.block_shape
        self.entry = ptx.EntryOp(self.name, params, maxntid=(bx + extra, by, bz))
        self.barrier_threads: int | None = None  # set by kernel.barrier_threads: bar.sync 1, N

    # -- parameters ---------------------------------------------------------------------------

    @staticmethod
    def _param_ptx_type(t: Attribute) -> str:
        if isinstance(t, kernel.ArrayType):
            return "u64"
        if isinstance(t, kernel.TensorMapType):
            return ptx.TENSOR_MAP_PARAM
        if t in (f16, bf16):
            return "b16"
        if t == i1:
            return "u8"
        return mem_spec(t)

    def _load_params(self) -> None:
        args = self.func.body.block.args
        for arg, (pname, ptype) in zip(args, self.entry.params):
            if isinstance(arg.type, kernel.ArrayType):
                raw = self._prologue(ptx.LdOp("param.u64", [], [i64], symbol=pname))
                addr = self._prologue(ptx.CvtaOp("to.global.u64", [raw], [i64]))
                self.values[arg] = addr
            elif isinstance(arg.type, kernel.TensorMapType):  # its address, never its bytes
                where = self._prologue(ptx.MovOp("b64", [], [i64], symbol=pname))
                self.values[arg] = self._prologue(ptx.CvtaOp("param.u64", [where], [i64]))
            elif arg.type == i1:
                byte = self._prologue(ptx.LdOp("param.u8", [], [i16], symbol=pname))
                self.values[arg] = self._prologue(
                    ptx.SetpOp("ne.u16", [byte, self.const(0, i16)], [i1])
                )
            else:
                self.values[arg] = self._prologue(
                    ptx.LdOp(f"param.{ptype}", [], [reg_type(arg.type)], symbol=pname)
                )

    def _prologue(self, op: ptx.PtxInstr) -> SSAValue:
        self.prologue.append(op)
        return op.outs[0]

    # -- values -------------------------------------------------------------------------------

    def value(self, v: SSAValue) -> SSAValue:
        try:
            return self.values[v]
        except KeyError:
            raise KaioCompileError(
                f"internal: {v} has no PTX register (defined by an op that was not lowered)"
            ) from None

    def parts(self, v: SSAValue) -> tuple[SSAValue, ...]:
        """The registers of a value: one for scalars, several for aggregates (fragments)."""
        if v in self.aggregates:
            return self.aggregates[v]
        return (self.value(v),)

    def bind(self, v: SSAValue, reg: SSAValue | Sequence[SSAValue]) -> None:
        # a list or tuple is answered by its exact type: isinstance against xDSL's abstract
        # SSAValue is slow, most of all when it fails
        if type(reg) not in (list, tuple) and isinstance(reg, SSAValue):
            self.values[v] = reg
        elif type(v.type) in AGGREGATES:
            self.aggregates[v] = tuple(reg)
        else:
            (self.values[v],) = reg

    def const(self, value: int | float | bool, t: Attribute) -> SSAValue:
        """A constant of register type ``t``; one per (value, type), defined in the prologue."""
        if isinstance(value, bool):
            value = int(value)
        # floats by bit pattern: -0.0 == 0.0 in Python, and would share one register
        key = (value.hex() if isinstance(value, float) else value, t)
        if key not in self._consts:
            op = ptx.ConstOp(value, t)
            self.prologue.append(op)
            self._consts[key] = op.result
        return self._consts[key]

    # -- emitting -----------------------------------------------------------------------------

    def emit(self, op: Operation) -> Operation:
        self._check_target(op)
        if self.source is not None:
            op.location = self.source  # the printer's .loc line info
        self.body.append(op)
        return op

    def _check_target(self, op: Operation) -> None:
        """Refuse an instruction the target lacks here, where the Python line is still known."""
        if is_instr_class(type(op)):
            for req in spec_requirements(op):  # type: ignore[arg-type]  # per (class, spec), kept
                if not req.met_by(self.arch.sm, self.arch.arch_specific):
                    raise req.error(self.arch.name)

    def instr(
        self,
        cls: type[ptx.PtxInstr],
        spec: str,
        args: Sequence[SSAValue],
        out_type: Attribute | None = None,
        **kwargs: object,
    ) -> SSAValue:
        """Emit one instruction with a single result (or none: returns the first arg)."""
        op = cls(spec, args, [out_type] if out_type is not None else [], **kwargs)  # type: ignore[arg-type]
        self.emit(op)
        # ``results``, not the IRDL accessor ``outs`` (the same values: an instruction's only
        # result definition) that slices them anew per read
        results = op.results
        return results[0] if results else args[0]

    def reg(self, t: Attribute) -> SSAValue:
        op = ptx.RegOp(reg_type(t))
        self.prologue.append(op)
        return op.results[0]  # (the IRDL accessor ``result`` is a descriptor call)

    def regs(self, t: Attribute) -> list[SSAValue]:
        """Fresh assignable registers for a value of type ``t`` (several for aggregates)."""
        parts = AGGREGATES.get(type(t))
        return [self.reg(p) for p in parts(t, self)] if parts is not None else [self.reg(t)]

    def assign(self, dst: SSAValue, src: SSAValue) -> None:
        if dst is not src:
            self.emit(ptx.AssignOp(bits_spec_or_float(dst.type), [dst, src]))

    def parallel_assign(self, dsts: Sequence[SSAValue], srcs: Sequence[SSAValue]) -> None:
        """Assign all at once: a source that is also a destination is copied first."""
        clobbered = set(dsts)
        staged = []
        for d, s in zip(dsts, srcs):
            if s in clobbered and s is not d:
                s = self.instr(ptx.MovOp, bits_spec_or_float(s.type), [s], s.type)
            staged.append(s)
        for d, s in zip(dsts, staged):
            self.assign(d, s)

    def label(self, hint: str) -> str:
        self._labels += 1
        return f"L_{hint}_{self._labels}"

    def place_label(self, name: str) -> None:
        self.emit(ptx.LabelOp(name))

    def branch(self, target: str, cond: SSAValue | None = None, negate: bool = False) -> None:
        self.emit(ptx.BraOp("", guard=cond, negate=negate, symbol=target))

    def symbol(self, hint: str) -> str:
        base = f"{self.name}_{hint}"
        name, n = base, 0
        while name in self._symbols:
            n += 1
            name = f"{base}_{n}"
        self._symbols.add(name)
        return name

    def shared(self, hint: str, nbytes: int, align: int = 16) -> SSAValue:
        """Declare a shared buffer; returns its 32-bit shared address.

        Buffers are static ``.shared`` arrays while they fit in the 48 KiB a block may declare
        statically; beyond that, :meth:`run` places them all in the block's dynamic shared
        memory instead (see :func:`place_in_dynamic_shared`)."""
        name = self.symbol(hint)
        self.decls.append(ptx.SharedDeclOp(name, nbytes, align))
        return self._prologue(ptx.MovOp("u32", [], [i32], symbol=name))

    def _shared_decl(self, address: SSAValue) -> tuple[ptx.MovOp, ptx.SharedDeclOp]:
        mov = next(op for op in self.prologue
                   if isinstance(op, ptx.MovOp) and op.outs and op.outs[0] is address and op.symbol is not None)  # fmt: skip
        decl = next(d for d in self.decls if isinstance(d, ptx.SharedDeclOp) and d.sym_name.data == mov.symbol.data)  # type: ignore[union-attr]
        return mov, decl

    def shared_bytes(self, address: SSAValue) -> int:
        """The declared size of the shared buffer at ``address`` (from :meth:`shared`)."""
        return self._shared_decl(address)[1].size.value.data

    def grow_shared(self, address: SSAValue, nbytes: int, align: int) -> None:
        """Make the shared buffer at ``address`` (from :meth:`shared`) at least ``nbytes`` long and
        ``align``-aligned: a lowering that reuses a buffer no longer live may need more of it."""
        _, decl = self._shared_decl(address)
        decl.size = IntegerAttr(max(decl.size.value.data, nbytes), i64)
        decl.align = IntegerAttr(max(decl.align.value.data, align), i64)

    def merge_shared(self, addresses: Sequence[SSAValue], nbytes: int, align: int) -> SSAValue:
        """Lay the shared buffers at ``addresses`` out one after the other in the first one's
        declaration, grown to at least ``nbytes``: the start of that region, for a lowering to
        reuse buffers that are dead (none of them alone large enough). Each merged buffer's
        start says which bytes it keeps (``within``): ptx-sync-cleanup then still tells the
        buffers apart; the region's start names the whole array."""
        found = sorted((self._shared_decl(a) for a in addresses), key=lambda md: self.prologue.index(md[0]))
        first_mov, first = found[0]
        name = first.sym_name.data
        end = first.size.value.data
        if ptx.within_of(first_mov) is None:
            first_mov.properties["within"] = ptx.within_attr(name, 0, end)
        region = ptx.MovOp("u32", [], [i32], symbol=name)
        self.prologue.insert(self.prologue.index(first_mov) + 1, region)
        widest = max(align, *(d.align.value.data for _, d in found))
        for _, decl in found[1:]:
            a = decl.align.value.data
            offset = (end + a - 1) // a * a
            end = offset + decl.size.value.data
            moved = relocate_shared(self.prologue, decl, name, region.outs[0], offset)
            for key, bound in self.values.items():  # buffers bound to the old address move too
                if bound in moved:
                    self.values[key] = moved[bound]
            self.decls.remove(decl)
        self._prologue_known = ([], 0, set())  # ops replaced inside: the set is rebuilt
        first.size = IntegerAttr(max(end, nbytes), i64)
        first.align = IntegerAttr(widest, i64)
        return region.outs[0]

    def barrier(self) -> None:
        """A block barrier: ``bar.sync 0``, or ``bar.sync 1, N`` once ``kernel.barrier_threads``
        said only the first N threads remain (barrier 1: 0 also served the whole block)."""
        if self.barrier_threads is None:
            self.emit(ptx.BarSyncOp("", [self.const(0, i32)]))
        else:
            self.emit(ptx.BarSyncOp("", [self.const(1, i32), self.const(self.barrier_threads, i32)]))

    def invariant(self, key: object, build: Callable[[], SSAValue]) -> SSAValue:
        """A value that is the same everywhere in the kernel (derived from special registers,
        parameters and constants only), computed once in the prologue and reused."""
        if key not in self._invariants:
            body, self.body = self.body, self.prologue
            try:
                self._invariants[key] = build()
            finally:
                self.body = body
        return self._invariants[key]

    def hoisted(self, key: object, inputs: Sequence[SSAValue], build: Callable[[], SSAValue]) -> SSAValue:
        """``build()`` once in the prologue if all ``inputs`` are defined there, else right here."""
        if all(v in self._prologue_values() for v in inputs):
            return self.invariant(key, build)
        return build()

    def _prologue_values(self) -> set[SSAValue]:
        """The values the prologue defines once and for all: its ops' results but the
        registers it declares (``ptx.reg``: assigned later, by ``ptx.assign`` or a load into
        them, so a value computed from one in the prologue would read it unwritten). The prologue only grows at its end (an op
        replaced inside it resets this), so the set is kept and extended by the ops added since
        the last call instead of rebuilt for each hoisting."""
        prologue = self.prologue
        known = self._prologue_known
        if known[0] is not prologue or known[1] > len(prologue):
            known = self._prologue_known = (prologue, 0, set())
        _, seen, values = known
        for op in prologue[seen:]:
            if not isinstance(op, ptx.RegOp):  # declared here, written later (ptx.assign, ld_into): not invariant
                values.update(op.results)
        self._prologue_known = (prologue, len(prologue), values)
        return values

    def special(self, register: str) -> SSAValue:
        """A special register (``%tid.x``...), read once in the prologue."""
        key = ("%" + register, i32)
        if key not in self._consts:
            self._consts[key] = self._prologue(ptx.MovOp("u32", [], [i32], symbol="%" + register))
        return self._consts[key]

    # -- walking ------------------------------------------------------------------------------

    def lower_block(self, block: Block) -> None:
        # Code emitted after a nested block (a loop's back edge) belongs to the statement that
        # opened it, not to the block's last statement.
        outer = self.location, self.source
        for op in block.ops:
            if type(op) is kernel.SourceLocOp:  # the exact class: isinstance on an op is slow
                self.location, self.source = op, marker_location(op)
            rule = LOWERINGS.get(type(op))
            try:
                if rule is None:
                    raise KaioCompileError(
                        f"no PTX lowering for '{op.name}': run the passes that lower it first"
                    )
                rule(self, op)
            except (KaioCompileError, KaioTargetError) as e:
                raise self._located(e) from None
        self.location, self.source = outer

    def _located(self, error: KaioCompileError | KaioTargetError) -> KaioCompileError | KaioTargetError:
        """The same error, pointing at the Python statement being lowered (if known)."""
        loc = self.location
        if loc is None or getattr(error, "located", False):
            return error
        where = f"{loc.file.data}:{loc.line.value.data}"
        source = f"\n    {loc.text.data}"
        if isinstance(error, KaioCompileError) and error.filename is None:
            located = KaioCompileError(
                error.message, filename=loc.file.data, line=loc.line.value.data,
                source_line=loc.text.data, hint=error.hint,
            )  # fmt: skip
        else:
            located = type(error).__new__(type(error))
            located.__dict__.update(error.__dict__)
            Exception.__init__(located, f"{where}: {error}{source}")
        located.located = True  # type: ignore[attr-defined]
        return located

    def run(self) -> ptx.EntryOp:
        self._load_params()
        self.lower_block(self.func.body.block)
        if sum(d.size.value.data for d in self.decls if isinstance(d, ptx.SharedDeclOp)) > STATIC_SHARED_LIMIT:
            self.decls, self.prologue = place_in_dynamic_shared(self.name, self.decls, self.prologue)
        add_ops_plain(self.entry.body.block, [*self.decls, *self.prologue, *self.body])
        return self.entry


STATIC_SHARED_LIMIT = 48 * 1024  # what a block may declare statically; more is opted into at launch


def place_in_dynamic_shared(
    name: str, decls: list[Operation], prologue: list[Operation]
) -> tuple[list[Operation], list[Operation]]:
    """Move every static shared buffer into one ``.extern .shared`` array (the block's dynamic
    shared memory, sized at launch from the compiled kernel's ``dynamic_shared_bytes``): each
    buffer at its own aligned offset, its address ``base + offset`` instead of its symbol."""
    shared = [d for d in decls if isinstance(d, ptx.SharedDeclOp)]
    offsets: dict[str, int] = {}
    end = 0
    for d in shared:
        align = d.align.value.data
        offsets[d.sym_name.data] = start = (end + align - 1) // align * align
        end = start + d.size.value.data
    dynamic = ptx.DynamicSharedDeclOp(f"{name}_dynamic_smem", end, max(d.align.value.data for d in shared))
    base = ptx.MovOp("u32", [], [i32], symbol=dynamic.sym_name.data)
    placed: list[Operation] = [base, *prologue]
    for d in shared:
        relocate_shared(placed, d, dynamic.sym_name.data, base.outs[0], offsets[d.sym_name.data])
    return [dynamic, *(d for d in decls if not isinstance(d, ptx.SharedDeclOp))], placed


def relocate_shared(prologue: list[Operation], decl: ptx.SharedDeclOp, into: str, base: SSAValue, offset: int) -> dict[SSAValue, SSAValue]:
    """Move shared array ``decl`` to ``offset`` bytes into array ``into`` (whose start ``base``
    is), in place in ``prologue``: each ``mov`` of its symbol becomes ``base + offset``, and
    every ``within`` naming it (its buffers' bytes, from earlier merges) is shifted to name
    ``into``. Returns the old starts' replacements."""
    old, size = decl.sym_name.data, decl.size.value.data
    moved: dict[SSAValue, SSAValue] = {}
    for i, op in enumerate(list(prologue)):
        within = ptx.within_of(op)
        if isinstance(op, ptx.MovOp) and op.symbol is not None and op.symbol.data == old:
            _, lo, hi = within if within is not None else (old, 0, size)
            at = ptx.ConstOp(offset, i32)
            add = ptx.AddOp("u32", [base, at.result], [i32], within=(into, offset + lo, offset + hi))
            op.outs[0].replace_all_uses_with(add.outs[0])
            moved[op.outs[0]] = add.outs[0]
            j = prologue.index(op)
            prologue[j : j + 1] = [at, add]
        elif within is not None and within[0] == old:
            op.properties["within"] = ptx.within_attr(into, offset + within[1], offset + within[2])
    return moved


def bits_spec_or_float(t: Attribute) -> str:
    """The ``mov`` type of a register: ``f32``/``f64`` registers move as floats."""
    if t in (f32, f64):
        return float_spec(t)
    return bits_spec(t)


def shared_shape(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, MemRefType)
    return t.get_shape()


__all__ = [
    "PtxEmitter",
    "bits_spec",
    "element_bytes",
    "float_spec",
    "int_spec",
    "is_float",
    "mem_spec",
    "reg_type",
    "width",
    "i32",
    "i64",
]
