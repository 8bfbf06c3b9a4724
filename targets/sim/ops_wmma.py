"""wmma.{load,mma,store}.sync.aligned m16n16k16 with f16 inputs: the warp-level matrix API that
nvcc emits for ``nvcuda::wmma`` (``wmma::load_matrix_sync``, ``mma_sync``, ``store_matrix_sync``).

Supported: ``wmma.load.{a,b}...m16n16k16{.global,.shared{::cta},}.f16`` (eight .b32 registers of
f16 pairs), ``wmma.load.c`` and ``wmma.store.d`` with ``.f16`` (four registers) or ``.f32`` (eight),
``.row`` and ``.col`` layouts, the optional stride operand (elements between rows, or columns for
``.col``; default 16), and ``wmma.mma.sync.aligned.{row,col}.{row,col}.m16n16k16.dtype.ctype`` with
f16 or f32 D and C (``.satfinite`` accepted: it only changes overflow to the largest finite value).

Fragment layout. The PTX ISA leaves the layout of wmma fragments unspecified: a program may only
load, multiply-accumulate, store, and apply one operation to every element (scale, fill). Any
consistent layout is therefore faithful. The simulator uses the one sm_80 and later build wmma
from, two ``mma.m16n8k16`` (see ``ops_mma``): with g = lane / 4 and t = lane % 4, A registers
0-3 are mma's A fragment, B registers 0-1 and 2-3 are mma's B fragment of columns 0-7 and 8-15,
and accumulator element e (0-7: registers of f32, halves of f16 pairs) is mma's accumulator
element e % 4 of columns 8 (e / 4) + ...; A and B registers 4-7 repeat registers 0-3 (the ISA
gives the fragments eight registers; on Volta every element is held twice).

Accuracy as ``mma.sync``: exact products, a float64 sum, one rounding to the accumulator type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .context import WARP, ExecContext
from .faults import DecodeError
from .floatmath import F16, round_f64
from .memory_access import load, store
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_memory import take_space
from .ops_mma import a_layout, b_layout, c_layout
from .ops_warp import full_warps
from .program import Behaviour, Idx
from .ptx_types import PTX_TYPES
from .syntax import Instruction, Operand, VecOperand

SHAPE = "m16n16k16"
SIZE = 16  # every matrix of m16n16k16 is 16 x 16
_B32, _F32, _U32 = PTX_TYPES["b32"], PTX_TYPES["f32"], PTX_TYPES["u32"]


def _coordinates(layout: Any, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of each (lane, slot) of an mma fragment layout; slot = register * per + part."""
    flat = np.empty(rows * cols, dtype=np.int64)
    flat[layout.gather] = np.arange(rows * cols)  # matrix position of each (lane, reg, part)
    return (flat // cols).reshape(WARP, -1), (flat % cols).reshape(WARP, -1)


def _fragments() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(row, col) per (lane, slot) of each wmma fragment, slots in register order."""
    ar, ac = _coordinates(a_layout(16, 2), 16, 16)  # 4 registers of 2 halves: 8 slots
    br, bc = _coordinates(b_layout(16, 2), 16, 8)  # 2 registers of 2 halves: 4 slots
    cr, cc = _coordinates(c_layout(), 16, 8)  # 4 elements
    b_rows, b_cols = np.hstack([br, br]), np.hstack([bc, bc + 8])  # columns 0-7, then 8-15
    c_rows, c_cols = np.hstack([cr, cr]), np.hstack([cc, cc + 8])
    return {
        "a": (np.hstack([ar, ar]), np.hstack([ac, ac])),  # registers 4-7 repeat 0-3
        "b": (np.hstack([b_rows, b_rows]), np.hstack([b_cols, b_cols])),
        "c": (c_rows, c_cols),  # 8 elements: f32 registers, or halves of 4 f16x2 registers
    }


FRAGMENTS = _fragments()
_USED = {"a": 8, "b": 8, "c": 8}  # the slots that hold distinct elements (the rest repeat them)


def _registers(op: Operand, count: int, what: str, ins: Instruction) -> list[Operand]:
    if not isinstance(op, VecOperand) or len(op.items) != count:
        raise DecodeError(f"{ins.opcode}: {what} is a vector of {count} registers")
    return list(op.items)


def _elements(kind: str, etype: str) -> tuple[int, int]:
    """(registers, elements per register) of a fragment."""
    if kind in ("a", "b"):
        return 8, 2
    return (4, 2) if etype == "f16" else (8, 1)


def _common(ins: Instruction, mods: Modifiers) -> None:
    if not (mods.flag("sync") and mods.flag("aligned")):
        raise DecodeError(f"{ins.opcode}: wmma needs .sync.aligned")
    if mods.take(SHAPE) is None:
        raise DecodeError(f"{ins.opcode}: only the .{SHAPE} shape is supported")


def _offsets(kind: str, row_major: bool, stride: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """Element offset of each (thread, slot) from the matrix's first element."""
    rows, cols = FRAGMENTS[kind]
    r, c = rows[lanes], cols[lanes]
    s = stride[:, None]
    return r * s + c if row_major else c * s + r


def _lanes(ctx: ExecContext, idx: Idx) -> np.ndarray:
    threads = ctx.thread_index if idx is None else idx
    return np.asarray(threads) % WARP


def _stride_reader(ops: list[Operand], dc: DecodeContext) -> Callable[[ExecContext, Idx], np.ndarray]:
    if len(ops) < 3:
        return lambda ctx, idx: np.full(_lanes(ctx, idx).size, SIZE, dtype=np.int64)
    read = dc.reader(ops[2], _U32)
    return lambda ctx, idx: np.broadcast_to(np.asarray(read(ctx, idx)).astype(np.int64), _lanes(ctx, idx).shape)


def make_wmma(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    action = mods.require("load", "mma", "store")
    if action == "mma":
        return _make_mma(ins, mods, dc)
    kind = mods.require("a", "b", "c") if action == "load" else mods.require("d")
    _common(ins, mods)
    row_major = mods.require("row", "col") == "row"
    space = take_space(mods)
    if space not in (None, "global", "shared"):
        raise DecodeError(f"{ins.opcode}: wmma reaches global or shared memory only")
    etype = mods.one_type({"f16"} if kind in ("a", "b") else {"f16", "f32"}).name
    count, per = _elements(kind, etype)
    esize = 2 if etype == "f16" else 4
    frag_kind = "c" if kind == "d" else kind
    ops = operands(ins, (2, 3))
    regs_op, addr_op = (ops[0], ops[1]) if action == "load" else (ops[1], ops[0])
    items = _registers(regs_op, count, "the fragment", ins)
    address = dc.address(addr_op, space)
    stride_of = _stride_reader(ops, dc)
    name = ins.opcode
    slots = count * per

    def addresses(ctx: ExecContext, idx: Idx) -> np.ndarray:
        full_warps(ctx, idx, name)
        lanes = _lanes(ctx, idx)
        base = np.broadcast_to(np.asarray(address(ctx, idx), dtype=np.uint64), lanes.shape)
        offsets = _offsets(frag_kind, row_major, stride_of(ctx, idx), lanes)[:, :slots]
        return base[:, None] + (offsets * esize).astype(np.uint64)  # (threads, slots)

    if action == "load":
        writers = [dc.writer(item, _F32 if per == 1 else _B32) for item in items]

        def run_load(ctx: ExecContext, idx: Idx) -> None:
            where = addresses(ctx, idx)
            values = [load(ctx, space, idx, where[:, s], esize, 1)[0] for s in range(slots)]
            for j, write in enumerate(writers):
                if per == 1:
                    write(ctx, idx, values[j].view(np.float32))
                else:
                    lo, hi = (values[2 * j + k].astype(np.uint32) for k in (0, 1))
                    write(ctx, idx, lo | (hi << np.uint32(16)))

        return Behaviour(run=run_load, klass=f"wmma.load.{kind}", shared_access=esize if space in (None, "shared") else 0)

    readers = [dc.reader(item, _F32 if per == 1 else _B32) for item in items]
    container = np.uint16 if esize == 2 else np.uint32

    def run_store(ctx: ExecContext, idx: Idx) -> None:
        where = addresses(ctx, idx)
        for j, read in enumerate(readers):
            raw = np.asarray(read(ctx, idx))
            parts = [raw.view(np.uint32)] if per == 1 else [(raw.astype(np.uint32) >> np.uint32(16 * k)) & np.uint32(0xFFFF) for k in (0, 1)]
            for k, part in enumerate(parts):
                store(ctx, space, idx, where[:, j * per + k], esize, [part.astype(container)])

    return Behaviour(run=run_store, klass="wmma.store.d", shared_access=esize if space in (None, "shared") else 0)


def _make_mma(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    _common(ins, mods)
    # A's and B's layouts, in that order: the fragments already hold the matrices, whatever the
    # layout they were loaded with, so both are only checked for being there
    layouts = [m for m in mods.items if m in ("row", "col")]
    if len(layouts) != 2:
        raise DecodeError(f"{ins.opcode}: wmma.mma names the layouts of A and B (.row/.col twice)")
    mods.items = [m for m in mods.items if m not in ("row", "col")]
    satfinite = mods.flag("satfinite")
    types = mods.types()
    if len(types) != 2 or any(t.name not in ("f16", "f32") for t in types):
        raise DecodeError(f"{ins.opcode}: give the types of D and C, each .f16 or .f32")
    td, tc = (t.name for t in types)
    d_op, a_op, b_op, c_op = operands(ins, 4)
    a_regs = [dc.reader(r, _B32) for r in _registers(a_op, 8, "A", ins)]
    b_regs = [dc.reader(r, _B32) for r in _registers(b_op, 8, "B", ins)]
    c_count, c_per = _elements("c", tc)
    d_count, d_per = _elements("c", td)
    c_regs = [dc.reader(r, _F32 if c_per == 1 else _B32) for r in _registers(c_op, c_count, "C", ins)]
    d_regs = [dc.writer(r, _F32 if d_per == 1 else _B32) for r in _registers(d_op, d_count, "D", ins)]
    name = ins.opcode

    def matrix(ctx: ExecContext, idx: Idx, readers: list[Any], per: int, kind: str) -> np.ndarray:
        """The warps' matrices (warps, 16, 16) in float64 from their fragments."""
        raw = np.stack([np.asarray(r(ctx, idx)) for r in readers], axis=-1)  # (threads, regs)
        if per == 1:
            values = raw.astype(np.float32, copy=False).astype(np.float64)
        else:
            values = np.ascontiguousarray(raw.astype(np.uint32, copy=False)).view(np.float16).astype(np.float64)
        used = _USED[kind]
        lanes = _lanes(ctx, idx).reshape(-1, WARP)
        rows, cols = FRAGMENTS[kind]
        out = np.zeros((lanes.shape[0], SIZE, SIZE))
        warp = np.arange(lanes.shape[0])[:, None, None]
        out[warp, rows[lanes][:, :, :used], cols[lanes][:, :, :used]] = values.reshape(-1, WARP, values.shape[-1])[:, :, :used]
        return out

    def run(ctx: ExecContext, idx: Idx) -> None:
        full_warps(ctx, idx, name)
        d = matrix(ctx, idx, a_regs, 2, "a") @ matrix(ctx, idx, b_regs, 2, "b") + matrix(ctx, idx, c_regs, c_per, "c")
        lanes = _lanes(ctx, idx).reshape(-1, WARP)
        rows, cols = FRAGMENTS["c"]
        warp = np.arange(lanes.shape[0])[:, None, None]
        per_lane = d[warp, rows[lanes], cols[lanes]].reshape(-1, 8)  # (threads, element)
        if td == "f32":
            out = per_lane.astype(np.float32)
            if satfinite:
                big = np.float32(np.finfo(np.float32).max)
                out = np.where(np.isinf(out), np.copysign(big, out), out).astype(np.float32)
            for j, write in enumerate(d_regs):
                write(ctx, idx, out[:, j])
            return
        halves = round_f64(per_lane.reshape(-1), F16, "rn").reshape(-1, 8)
        if satfinite:
            halves = np.where(np.isinf(halves), np.copysign(np.float16(65504), halves), halves)
        bits = np.ascontiguousarray(halves.astype(np.float16)).view(np.uint16).astype(np.uint32)
        for j, write in enumerate(d_regs):
            write(ctx, idx, bits[:, 2 * j] | (bits[:, 2 * j + 1] << np.uint32(16)))

    return Behaviour(run=run, klass=f"wmma.mma.{SHAPE}.{td}.{tc}")


TABLE = {("wmma", "*"): make_wmma}
