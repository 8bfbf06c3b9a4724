"""Operand access, decided once at decode time: registers, literals, special registers,
symbols and addresses become small closures ``read(ctx, idx)`` / ``write(ctx, idx, value)``.

Readers return values typed as the instruction says (``.f32`` -> float32 view of the raw
bits), converting width when the register is wider or narrower than the instruction type
(truncation, or sign/zero extension by the instruction's signedness) as PTX specifies for
ld/st/cvt and bit-size types. Writers do the reverse. On the converged path (``idx is None``)
they move whole arrays and never index.

Contract with instruction closures: a closure never mutates an array a reader gave it, and it
returns fresh arrays (``mov`` copies), because a full-width write stores the array itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .context import ExecContext
from .faults import DecodeError
from .floatmath import BF16_FORMAT, F16, round_f64
from .memory import LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW
from .program import Idx, Reader, Symbol, Writer
from .ptx_types import PRED, SIGNED_BY_BITS, PtxType
from .syntax import (
    AddrOperand,
    ImmOperand,
    NegPredOperand,
    Operand,
    RegOperand,
    SinkOperand,
    SymOperand,
)

_MASK64 = (1 << 64) - 1
_WINDOW_OF = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "param": PARAM_WINDOW}
NUM_SMS = 108  # what %nsmid reports (an A100's SM count); %smid spreads CTAs over them


def _u32(value: int) -> np.uint32:
    return np.uint32(value & 0xFFFFFFFF)


def _lanemask(ctx: ExecContext, kind: str) -> np.ndarray:
    lane = ctx.lane.astype(np.uint64)
    one = np.uint64(1)
    eq = one << lane
    lt = eq - one
    mask = {"eq": eq, "lt": lt, "le": lt | eq, "gt": ~(lt | eq), "ge": ~lt}[kind]
    return (mask & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _tid(axis: int) -> Callable[[ExecContext], Any]:
    return lambda c: c.tid[axis]


def _ntid(axis: int) -> Callable[[ExecContext], Any]:
    return lambda c: _u32(c.geometry.block[axis])


def _ctaid(axis: int) -> Callable[[ExecContext], Any]:
    return lambda c: c.ctaid[axis]


def _nctaid(axis: int) -> Callable[[ExecContext], Any]:
    return lambda c: _u32(c.geometry.grid[axis])


def _lanemask_of(kind: str) -> Callable[[ExecContext], Any]:
    return lambda c: _lanemask(c, kind)


SPECIAL_REGISTERS: dict[str, Callable[[ExecContext], Any]] = {
    **{f"%tid.{a}": _tid(i) for i, a in enumerate("xyz")},
    **{f"%ntid.{a}": _ntid(i) for i, a in enumerate("xyz")},
    **{f"%ctaid.{a}": _ctaid(i) for i, a in enumerate("xyz")},
    **{f"%nctaid.{a}": _nctaid(i) for i, a in enumerate("xyz")},
    "%laneid": lambda c: c.lane,
    "%warpid": lambda c: (c.ltid // 32).astype(np.uint32),
    "%nwarpid": lambda c: _u32(64),
    "%smid": lambda c: ((c.cta + c.first_cta) % NUM_SMS).astype(np.uint32),
    "%nsmid": lambda c: _u32(NUM_SMS),
    "%gridid": lambda c: np.uint64(0),
    "%clock": lambda c: _u32(c.clock),
    "%clock_hi": lambda c: _u32(c.clock >> 32),
    "%clock64": lambda c: np.uint64(c.clock),
    "%globaltimer": lambda c: np.uint64(c.clock * 1000),
    "%globaltimer_lo": lambda c: _u32(c.clock * 1000),
    "%globaltimer_hi": lambda c: _u32((c.clock * 1000) >> 32),
    **{f"%lanemask_{k}": _lanemask_of(k) for k in ("eq", "lt", "le", "gt", "ge")},
    "%dynamic_smem_size": lambda c: _u32(max(c.shared_bytes - c.entry.dynamic_shared_offset, 0)),
    "%total_smem_size": lambda c: _u32(c.shared_bytes),
}


def convert_raw(src: np.dtype, t: PtxType) -> Callable[[Any], Any] | None:
    """Raw register bits of dtype ``src`` -> values typed as ``t`` (None: nothing to do)."""
    if t.kind == "pred":
        if src != PRED:
            raise DecodeError(f"a .pred operand must be a predicate register, not .b{src.itemsize * 8}")
        return None
    if src == PRED:
        raise DecodeError(f"a predicate register cannot be used as .{t.name}")
    width, bits = src.itemsize * 8, t.bits
    value, container = t.value, t.container
    if width == bits:
        return None if value == src else (lambda x: x.view(value))
    if width > bits or not t.is_signed:
        if value == container:
            return lambda x: x.astype(container)
        return lambda x: x.astype(container).view(value)
    narrow = SIGNED_BY_BITS[width]
    return lambda x: x.view(narrow).astype(value)


def convert_for_store(t: PtxType, dst: np.dtype) -> Callable[[Any], Any]:
    """Values typed as ``t`` -> raw bits for a register of dtype ``dst``."""
    if t.kind == "pred" or dst == PRED:
        if not (t.kind == "pred" and dst == PRED):
            raise DecodeError("predicate values go only to predicate registers and back")
        return lambda v: v
    value, container = t.value, t.container
    width, bits = dst.itemsize * 8, t.bits

    def to_bits(v: Any) -> Any:
        if v.dtype != value:
            v = v.astype(value)
        return v.view(container) if value != container else v

    if width == bits:
        return to_bits
    if width < bits:
        raise DecodeError(f"a .b{width} register is too narrow for a .{t.name} result")
    if t.is_signed:
        wide_signed = SIGNED_BY_BITS[width]
        return lambda v: to_bits(v).view(SIGNED_BY_BITS[bits]).astype(wide_signed).view(dst)
    return lambda v: to_bits(v).astype(dst)


def immediate(op: ImmOperand, t: PtxType) -> Any:
    """A literal as a numpy scalar of ``t``'s value dtype (packed types: the raw bits)."""
    v, kind = op.value, op.kind
    if t.kind == "pred":
        return np.bool_(v != 0)
    if t.is_float and t.lanes == 1:
        if kind == "f32bits":
            as_f64 = float(np.uint32(v).view(np.float32))
        elif kind == "f64bits":
            as_f64 = float(np.uint64(v).view(np.float64))
        else:
            as_f64 = float(v)
        if t.name in ("f16", "bf16"):
            fmt = F16 if t.name == "f16" else BF16_FORMAT
            return round_f64(np.array([as_f64]), fmt, "rn")[0]
        return t.value.type(as_f64)
    if kind == "float":
        raise DecodeError(f"floating-point literal {v} used as .{t.name}")
    if kind == "f64bits" and t.bits < 64:
        raise DecodeError(f"a 64-bit 0d literal does not fit .{t.name}")
    bits = int(v) & ((1 << t.bits) - 1)
    return np.array(bits, dtype=t.container).view(t.value if t.lanes == 1 else t.container)[()]


class DecodeContext:
    """Register and symbol tables of one function while it is decoded."""

    def __init__(self, function: str, symbols: dict[str, Symbol]):
        self.function = function
        self.symbols = symbols
        self.register_types: list[np.dtype] = []
        self.scopes: list[dict[str, int]] = [{}]
        self.label: Callable[[str], int] = lambda name: -1
        # register slots the instruction being decoded names (the decoder resets it per
        # instruction), and the registers asynchronous instructions (wgmma) update in place
        self.touched: set[int] = set()
        self.async_registers: dict[int, str] = {}  # register slots a wgmma writes or reads asynchronously
        self.wgmma_operands: set[int] = set()  # of those, the ones wgmma.fence must order (ops_wgmma.py)

    # --- registers --------------------------------------------------------------------------

    def declare(self, name: str, t: PtxType) -> None:
        scope = self.scopes[-1]
        if name in scope:
            raise DecodeError(f"register {name} declared twice")
        scope[name] = len(self.register_types)
        self.register_types.append(t.container)

    def slot(self, name: str) -> int:
        for scope in reversed(self.scopes):
            if name in scope:
                self.touched.add(scope[name])
                return scope[name]
        raise DecodeError(f"undeclared register {name}")

    def has_register(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    # --- readers ----------------------------------------------------------------------------

    def as_register(self, op: Operand) -> Operand:
        """Registers need no '%' (``.reg .f16 low;`` in nvcc's inline asm): a bare name that is
        a declared register is a register, not a symbol."""
        if isinstance(op, SymOperand) and op.offset == 0 and self.has_register(op.name):
            return RegOperand(op.name)
        return op

    def reader(self, op: Operand, t: PtxType) -> Reader:
        op = self.as_register(op)
        if isinstance(op, RegOperand):
            if not self.has_register(op.name) and op.name in SPECIAL_REGISTERS:
                return self._special_reader(op.name, t)
            slot = self.slot(op.name)
            conv = convert_raw(self.register_types[slot], t)
            if conv is None:

                def read_reg(ctx: ExecContext, idx: Idx) -> Any:
                    r = ctx.regs[slot]
                    return r if idx is None else r[idx]

                return read_reg

            def read_conv(ctx: ExecContext, idx: Idx) -> Any:
                r = ctx.regs[slot]
                return conv(r if idx is None else r[idx])

            return read_conv
        if isinstance(op, NegPredOperand):
            if t.kind != "pred":
                raise DecodeError(f"!{op.name} is only valid as a predicate operand")
            inner = self.reader(RegOperand(op.name), t)
            return lambda ctx, idx: ~inner(ctx, idx)
        if isinstance(op, ImmOperand):
            value = immediate(op, t)
            if t.lanes > 1:
                packed = t.value
                return lambda ctx, idx: np.full(ctx.n if idx is None else idx.size, value, dtype=np.uint32).view(packed)
            return lambda ctx, idx: value
        if isinstance(op, SymOperand):
            address = self.symbol_address(op, "own")  # mov gives the state-space address
            value = immediate(ImmOperand(address, "int"), t)
            return lambda ctx, idx: value
        raise DecodeError(f"operand {_describe(op)} cannot be read as .{t.name}")

    def _special_reader(self, name: str, t: PtxType) -> Reader:
        get = SPECIAL_REGISTERS[name]
        value, container = t.value, t.container

        def read_special(ctx: ExecContext, idx: Idx) -> Any:
            v = get(ctx)
            if idx is not None and isinstance(v, np.ndarray):
                v = v[idx]
            return v.astype(container).view(value)

        return read_special

    # --- writers ----------------------------------------------------------------------------

    def writer(self, op: Operand, t: PtxType) -> Writer:
        op = self.as_register(op)
        if isinstance(op, SinkOperand) or (isinstance(op, RegOperand) and op.name == "_"):
            return lambda ctx, idx, v: None
        if not isinstance(op, RegOperand):
            raise DecodeError(f"operand {_describe(op)} cannot be a destination")
        if op.name in SPECIAL_REGISTERS and not self.has_register(op.name):
            raise DecodeError(f"special register {op.name} is read-only")
        slot = self.slot(op.name)
        dst = self.register_types[slot]
        to_bits = convert_for_store(t, dst)

        def write(ctx: ExecContext, idx: Idx, v: Any) -> None:
            bits = to_bits(v)
            if idx is None:
                if bits.ndim == 0 or bits.shape[0] != ctx.n:
                    bits = np.full(ctx.n, bits, dtype=dst)
                ctx.regs[slot] = bits
            else:
                ctx.regs[slot][idx] = bits

        return write

    # --- symbols and addresses ------------------------------------------------------------------

    def symbol(self, name: str) -> Symbol:
        sym = self.symbols.get(name)
        if sym is None:
            raise DecodeError(f"unknown symbol {name}")
        return sym

    def symbol_address(self, op: SymOperand, space: str | None) -> int:
        """The address of ``op``: in its own state space when ``space`` is "own" or equal to
        the symbol's; as a generic address when ``space`` is None."""
        sym = self.symbol(op.name)
        addr = sym.address + op.offset
        if space is None and sym.space in _WINDOW_OF:
            return _WINDOW_OF[sym.space] + addr
        if space not in (None, "own", sym.space) and not (space == "const" and sym.space == "global"):
            raise DecodeError(f"{op.name} is a .{sym.space} variable, not .{space}")
        return addr

    def address(self, op: Operand, space: str | None) -> Reader:
        """Reader of the u64 addresses ``[base + offset]`` in ``space`` (None: generic)."""
        if not isinstance(op, AddrOperand):
            raise DecodeError(f"expected an address [..], found {_describe(op)}")
        if isinstance(op.base, SymOperand):
            constant = np.uint64((self.symbol_address(op.base, space) + op.offset) & _MASK64)
            return lambda ctx, idx: constant
        if op.base is None:
            constant = np.uint64(op.offset & _MASK64)
            return lambda ctx, idx: constant
        from .ptx_types import PTX_TYPES

        base = self.reader(op.base, PTX_TYPES["u64"])
        if op.offset == 0:
            return base
        offset = np.uint64(op.offset & _MASK64)
        return lambda ctx, idx: base(ctx, idx) + offset


def _describe(op: Operand) -> str:
    if isinstance(op, RegOperand):
        return op.name
    if isinstance(op, ImmOperand):
        return repr(op.value)
    if isinstance(op, SymOperand):
        return op.name
    return type(op).__name__.replace("Operand", "").lower()
