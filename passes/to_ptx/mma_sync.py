"""``mma`` -> ``ldmatrix`` / ``mma.sync`` PTX.

Lane roles follow the PTX ISA fragment layouts for m16n8k16 (row.col). Each ``ldmatrix.x4``
loads four 8x8 matrices; lane 8q + i gives the address of row i of matrix q:

- A (16x16, row-major in shared memory): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
  (rows 0-7, k 8-15), (rows 8-15, k 8-15) are a0..a3. A stored transposed (k rows) is read
  with ``.trans``, lane 8q + i giving k row 8*(q/2) + i, column 8*(q%2).
- B (16(k)x16(n), row-major): ``.trans``, lane L gives k row L%16, column 8*(L/16); registers
  0-1 are the B fragment of columns 0-7, 2-3 of columns 8-15. B stored transposed (n rows, as
  ``kt.trans(k)`` gives it) is read without ``.trans``: lane 8q + i gives n row 8*(q/2) + i,
  column 8*(q%2).
- accumulator: lane L holds rows L/4 and L/4 + 8, columns 2*(L%4) and 2*(L%4) + 1: 4 registers
  of the ``#tile.mma`` tile per fragment, so ``mma.split``/``mma.join`` only regroup registers.
- A from registers (``mma.pack_a``): lane L's A registers hold rows L/4 and L/4 + 8, k columns
  2*(L%4) + {0, 1} and 2*(L%4) + {8, 9}: the accumulator elements the lane holds for the two
  16x8 halves of the block, each pair packed into one b32 (``mov.b32 d, {lo, hi}``, the lower
  column in the low half as ``ldmatrix`` leaves it), or rounded from f32 as they are packed
  (``cvt.rn.f16x2.f32 d, hi, lo``: one instruction per pair, no 16-bit registers in between).
"""

from __future__ import annotations

from xdsl.dialects.builtin import f32, i32
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import mma, ptx
from kaio.passes.to_ptx import lowering, register_parts
from kaio.passes.to_ptx.emitter import PtxEmitter, float_spec
from kaio.passes.to_ptx.tile_values import add32, distribution
from kaio.passes.to_ptx.tiles import shared_offset


@register_parts(mma.FragType)
def fragment_parts(t: Attribute, em: PtxEmitter) -> list[Attribute]:
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


def _ldmatrix(em: PtxEmitter, buffer: SSAValue, row: SSAValue, col: SSAValue, trans: bool, count: int = 4) -> list[SSAValue]:
    """``ldmatrix.x{count}``: lanes 8q + i (q < count) give the addresses of the q-th matrix."""
    offset = shared_offset(em, buffer.type, row, col)  # type: ignore[arg-type]
    addr = em.instr(ptx.AddOp, "s32", [em.value(buffer), offset], i32)
    spec = f"sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    load = ptx.LdmatrixOp(spec, [addr], [i32] * count)
    em.emit(load)
    return list(load.outs)


def _transposed_block(em: PtxEmitter, op: mma.LoadAOp | mma.LoadBOp, trans: bool, count: int = 4) -> list[SSAValue]:
    """ldmatrix of the 16x16 block at (row, col) of the operand, stored transposed: lane 8q + i
    reads stored row col + 8*(q/2) + i, stored column row + 8*(q%2) (with ``count`` 2, the
    block's first 8 columns: q < 2)."""
    stored_row = add32(em, em.value(op.col), _lane_bits(em, 0, 7))
    stored_row = add32(em, stored_row, _lane_bits(em, 4, 1, 8))
    stored_col = add32(em, em.value(op.row), _lane_bits(em, 3, 1, 8))
    return _ldmatrix(em, op.buffer, stored_row, stored_col, trans=trans, count=count)


@lowering(mma.LoadAOp)
def lower_load_a(em: PtxEmitter, op: mma.LoadAOp) -> None:
    if op.is_transposed:
        em.bind(op.result, _transposed_block(em, op, trans=True))
        return
    row = add32(em, em.value(op.row), _lane_bits(em, 0, 15))
    col = add32(em, em.value(op.col), _lane_bits(em, 4, 1, 8))
    em.bind(op.result, _ldmatrix(em, op.buffer, row, col, trans=False))


@lowering(mma.LoadBOp)
def lower_load_b(em: PtxEmitter, op: mma.LoadBOp) -> None:
    count = 2 * len(op.results_)  # x4: both column halves; x2: the first (lanes 0-15 address it)
    if op.is_transposed:
        regs = _transposed_block(em, op, trans=False, count=count)
    else:
        row = add32(em, em.value(op.row), _lane_bits(em, 0, 15))  # L%8 + 8*((L/8)%2) == L%16
        col = add32(em, em.value(op.col), _lane_bits(em, 4, 1, 8))
        regs = _ldmatrix(em, op.buffer, row, col, trans=True, count=count)
    for i, frag in enumerate(op.results_):
        em.bind(frag, regs[2 * i : 2 * i + 2])


@lowering(mma.PackAOp)
def lower_pack_a(em: PtxEmitter, op: mma.PackAOp) -> None:
    register_of = distribution(em, op.tile.type).register_of  # a warp's rows: register bits only
    parts = em.parts(op.tile)
    r0, c0 = 16 * op.row.value.data, 16 * op.col.value.data
    rounded = op.tile.type.element_type == f32  # type: ignore[attr-defined]
    spec = float_spec(op.result.type.element_type)  # type: ignore[attr-defined]
    regs = []
    for dr, dc in ((0, 0), (8, 0), (0, 8), (8, 8)):
        lo, hi = (parts[register_of[(r0 + dr, c0 + dc + j)]] for j in (0, 1))
        if rounded:  # cvt.rn.f16x2.f32 d, a, b puts a in the high half
            regs.append(em.instr(ptx.CvtOp, f"rn.{spec}x2.f32", [hi, lo], i32))
        else:
            regs.append(em.instr(ptx.MovOp, "b32", [lo, hi], i32))
    em.bind(op.result, regs)


@lowering(mma.MmaOp)
def lower_mma(em: PtxEmitter, op: mma.MmaOp) -> None:
    elem = float_spec(op.a.type.element_type)  # type: ignore[attr-defined]
    spec = f"sync.aligned.m16n8k16.row.col.f32.{elem}.{elem}.f32"
    args = [*em.parts(op.a), *em.parts(op.b), *em.parts(op.c)]
    sync = ptx.MmaOp(spec, args, [f32] * 4)
    em.emit(sync)
    em.bind(op.result, list(sync.outs))


@lowering(mma.SplitOp)
def lower_split(em: PtxEmitter, op: mma.SplitOp) -> None:
    parts = em.parts(op.tile)
    for i, frag in enumerate(op.fragments):
        em.bind(frag, parts[4 * i : 4 * i + 4])


@lowering(mma.JoinOp)
def lower_join(em: PtxEmitter, op: mma.JoinOp) -> None:
    em.bind(op.result, [r for f in op.fragments for r in em.parts(f)])
