"""``mma`` -> ``ldmatrix`` / ``mma.sync`` / epilogue PTX.

Lane roles follow the PTX ISA fragment layouts for m16n8k16 (row.col):

- ``ldmatrix.x4`` of A: lane L gives the address of row L%16, column 8*(L/16) of the 16x16
  block; the four 8x8 matrices come back as a0..a3 in the order mma expects.
- ``ldmatrix.x4.trans`` of a row-major 16(k)x16(n) B block: lane L gives row (k) L%16, column
  (n) 8*(L/16); registers 0-1 are the B fragment of columns 0-7, 2-3 of columns 8-15.
- accumulator: lane L holds rows L/4 and L/4 + 8, columns 2*(L%4) and 2*(L%4) + 1.
"""

from __future__ import annotations

from xdsl.dialects.builtin import f32, i1, i32
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import mma, ptx
from kaio.passes.to_ptx import lowering, register_parts
from kaio.passes.to_ptx.emitter import PtxEmitter, float_spec
from kaio.passes.to_ptx.tiles import (
    add32,
    epilogue_values,
    global_address,
    shared_offset,
    store_pair,
    view_of,
)


@register_parts(mma.FragType)
def fragment_parts(t: Attribute) -> list[Attribute]:
    assert isinstance(t, mma.FragType)
    return [f32 if t.role.data == "acc" else i32] * t.registers


def _lane_bits(em: PtxEmitter, shift: int, mask: int, scale: int = 1) -> SSAValue:
    """((laneid >> shift) & mask) * scale, computed once per kernel."""

    def build() -> SSAValue:
        lane = em.special("laneid")
        v = em.instr(ptx.ShrOp, "u32", [lane, em.const(shift, i32)], i32) if shift else lane
        v = em.instr(ptx.AndOp, "b32", [v, em.const(mask, i32)], i32)
        return em.instr(ptx.MulOp, "lo.s32", [v, em.const(scale, i32)], i32) if scale != 1 else v

    return em.invariant(("lane", shift, mask, scale), build)


@lowering(mma.ZeroOp)
def lower_zero(em: PtxEmitter, op: mma.ZeroOp) -> None:
    em.bind(op.result, [em.const(0.0, f32)] * 4)


def _ldmatrix(em: PtxEmitter, buffer: SSAValue, row: SSAValue, col: SSAValue, trans: bool) -> list[SSAValue]:
    offset = shared_offset(em, buffer.type, row, col)  # type: ignore[arg-type]
    addr = em.instr(ptx.AddOp, "s32", [em.value(buffer), offset], i32)
    spec = f"sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16"
    load = ptx.LdmatrixOp(spec, [addr], [i32] * 4)
    em.emit(load)
    return list(load.outs)


@lowering(mma.LoadAOp)
def lower_load_a(em: PtxEmitter, op: mma.LoadAOp) -> None:
    row = add32(em, em.value(op.row), _lane_bits(em, 0, 15))
    col = add32(em, em.value(op.col), _lane_bits(em, 4, 1, 8))
    em.bind(op.result, _ldmatrix(em, op.buffer, row, col, trans=False))


@lowering(mma.LoadBOp)
def lower_load_b(em: PtxEmitter, op: mma.LoadBOp) -> None:
    row = add32(em, em.value(op.row), _lane_bits(em, 0, 15))  # L%8 + 8*((L/8)%2) == L%16
    col = add32(em, em.value(op.col), _lane_bits(em, 4, 1, 8))
    regs = _ldmatrix(em, op.buffer, row, col, trans=True)
    em.bind(op.results_[0], regs[:2])
    em.bind(op.results_[1], regs[2:])


@lowering(mma.MmaOp)
def lower_mma(em: PtxEmitter, op: mma.MmaOp) -> None:
    elem = float_spec(op.a.type.element_type)  # type: ignore[attr-defined]
    spec = f"sync.aligned.m16n8k16.row.col.f32.{elem}.{elem}.f32"
    args = [*em.parts(op.a), *em.parts(op.b), *em.parts(op.c)]
    sync = ptx.MmaOp(spec, args, [f32] * 4)
    em.emit(sync)
    em.bind(op.result, list(sync.outs))


@lowering(mma.StoreOp)
def lower_store(em: PtxEmitter, op: mma.StoreOp) -> None:
    view = view_of(op.c)
    acc = em.parts(op.acc)
    vector = view.align.value.data >= 2  # C rows start on even columns: pairs are aligned
    row = add32(em, em.value(view.row), add32(em, em.value(op.row), _lane_bits(em, 2, 7)))
    col = add32(em, em.value(view.col), add32(em, em.value(op.col), _lane_bits(em, 0, 3, 2)))
    col_next = add32(em, col, 1)
    alpha, beta = em.value(op.alpha), em.value(op.beta)
    cols = em.value(view.cols)
    col_ok = em.instr(ptx.SetpOp, "lt.u32", [col, cols], i1)
    next_ok = em.instr(ptx.SetpOp, "lt.u32", [col_next, cols], i1)
    for half, r in enumerate((row, add32(em, row, 8))):
        row_ok = em.instr(ptx.SetpOp, "lt.u32", [r, em.value(view.rows)], i1)
        oks = [em.instr(ptx.AndOp, "pred", [row_ok, ok], i1) for ok in (col_ok, next_ok)]
        addr = global_address(em, view, r, col)
        values = epilogue_values(em, view, alpha, beta, addr, list(acc[2 * half : 2 * half + 2]), oks, vector)
        store_pair(em, view, addr, values, oks, vector)
