"""``mma`` -> ``ldmatrix`` / ``mma.sync`` PTX.

Lane roles follow the PTX ISA fragment layouts for m16n8k16 (row.col); those of m16n8k32 on
8-bit operands are the same in bytes, so every column offset below counts 16-byte chunks
(8 elements of 16 bits, 16 of 8 bits), and an 8-bit operand's K step is 32. Each
``ldmatrix.x4`` loads four 8x8 matrices of b16 (8 rows of 16 bytes); lane 8q + i gives the
address of row i of matrix q:

- A (16x16, row-major in shared memory): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
  (rows 0-7, k 8-15), (rows 8-15, k 8-15) are a0..a3. A stored transposed (k rows) is read
  with ``.trans``, lane 8q + i giving k row 8*(q/2) + i, column 8*(q%2).
- B (16(k)x16(n), row-major): ``.trans``, lane L gives k row L%16, column 8*(L/16); registers
  0-1 are the B fragment of columns 0-7, 2-3 of columns 8-15. B stored transposed (n rows, as
  ``kt.trans(k)`` gives it) is read without ``.trans``: lane 8q + i gives n row 8*(q/2) + i,
  column 8*(q%2).
- B of 8-bit elements, row-major (k rows): the fragment wants 4 consecutive k of one column
  in a register, which no ``ldmatrix`` gives (``.trans`` moves 16-bit elements), so each byte
  is loaded on its own (``ld.shared.u8``) and 4 are packed by ``mov.b32`` + ``prmt``; as
  Triton does it for operands ``ldmatrix`` cannot read. Stage B transposed (``kt.trans`` of an
  (N, K) tile) for ``ldmatrix``.
- accumulator (f32, or s32 for integer inputs): lane L holds rows L/4 and L/4 + 8, columns 2*(L%4) and 2*(L%4) + 1: 4 registers
  of the ``#tile.mma`` tile per fragment, so ``mma.split``/``mma.join`` only regroup registers.
- A from registers (``mma.pack_a``): lane L's A registers hold rows L/4 and L/4 + 8, k columns
  2*(L%4) + {0, 1} and 2*(L%4) + {8, 9}: the accumulator elements the lane holds for the two
  16x8 halves of the block, each pair packed into one b32 (``mov.b32 d, {lo, hi}``, the lower
  column in the low half as ``ldmatrix`` leaves it), or rounded from f32 as they are packed
  (``cvt.rn.f16x2.f32 d, hi, lo``: one instruction per pair, no 16-bit registers in between).
"""

from __future__ import annotations

from xdsl.dialects.builtin import f32, i16, i32
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import mma, ptx
from kaio.passes.to_ptx import lowering, register_parts
from kaio.passes.to_ptx.emitter import PtxEmitter, float_spec
from kaio.passes.to_ptx.smem_cpasync import shared_offset
from kaio.passes.to_ptx.tile_distribution import add32, distribution


@register_parts(mma.FragType)
def fragment_parts(t: Attribute, em: PtxEmitter) -> list[Attribute]:
    assert isinstance(t, mma.FragType)
    return [t.element_type if t.role.data == "acc" else i32] * t.registers


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


def _chunk(op: mma.LoadAOp | mma.LoadBOp) -> int:
    """Elements in a 16-byte ldmatrix row of the operand's buffer."""
    return 16 // op.buffer.type.elem_bytes  # type: ignore[attr-defined]


def _transposed_block(em: PtxEmitter, op: mma.LoadAOp | mma.LoadBOp, trans: bool, count: int = 4) -> list[SSAValue]:
    """ldmatrix of the 16-row block at (row, col) of the operand, stored transposed: lane 8q + i
    reads stored row col + 8*(q/2) + i, stored column row + c*(q%2), c elements a 16-byte chunk
    (with ``count`` 2, the block's first 8 columns: q < 2)."""
    stored_row = add32(em, em.value(op.col), _lane_bits(em, 0, 7))
    stored_row = add32(em, stored_row, _lane_bits(em, 4, 1, 8))
    stored_col = add32(em, em.value(op.row), _lane_bits(em, 3, 1, _chunk(op)))
    return _ldmatrix(em, op.buffer, stored_row, stored_col, trans=trans, count=count)


@lowering(mma.LoadAOp)
def lower_load_a(em: PtxEmitter, op: mma.LoadAOp) -> None:
    if op.is_transposed:
        em.bind(op.result, _transposed_block(em, op, trans=True))
        return
    row = add32(em, em.value(op.row), _lane_bits(em, 0, 15))
    col = add32(em, em.value(op.col), _lane_bits(em, 4, 1, _chunk(op)))
    em.bind(op.result, _ldmatrix(em, op.buffer, row, col, trans=False))


def _byte_columns(em: PtxEmitter, op: mma.LoadBOp) -> list[SSAValue]:
    """The B fragments of a row-major 8-bit B block (32 k x 8 or 16 n) byte by byte: register r
    of lane (g, t) of column half h holds k = 16 r + 4 t + j (j = 0..3, low byte first) of
    column 8 h + g."""
    buffer, base = op.buffer, em.value(op.buffer)
    k0 = add32(em, em.value(op.row), _lane_bits(em, 0, 3, 4))  # 4 t
    n0 = add32(em, em.value(op.col), _lane_bits(em, 2, 7))  # g
    regs = []
    for half in range(len(op.results_)):
        n = add32(em, n0, 8 * half)
        for r in range(2):
            b = []
            for j in range(4):
                addr = em.instr(ptx.AddOp, "s32", [base, shared_offset(em, buffer.type, add32(em, k0, 16 * r + j), n)], i32)  # type: ignore[arg-type]
                b.append(em.instr(ptx.LdOp, "shared.u8", [addr], i16))
            even = em.instr(ptx.MovOp, "b32", [b[0], b[2]], i32)  # bytes b0 . b2 .
            odd = em.instr(ptx.MovOp, "b32", [b[1], b[3]], i32)  # bytes b1 . b3 .
            regs.append(em.instr(ptx.PrmtOp, "b32", [even, odd, em.const(0x6240, i32)], i32))
    return regs


@lowering(mma.LoadBOp)
def lower_load_b(em: PtxEmitter, op: mma.LoadBOp) -> None:
    count = 2 * len(op.results_)  # x4: both column halves; x2: the first (lanes 0-15 address it)
    if op.is_transposed:
        regs = _transposed_block(em, op, trans=False, count=count)
    elif op.buffer.type.elem_bytes == 1:  # type: ignore[attr-defined]
        regs = _byte_columns(em, op)
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
    a, b = (mma.OPERAND_PTX[v.type.element_type] for v in (op.a, op.b))  # type: ignore[attr-defined]
    acc = op.c.type.element_type  # type: ignore[attr-defined]
    shape = "m16n8k16" if mma.k_step(op.a.type.element_type) == 16 else "m16n8k32"  # type: ignore[attr-defined]
    d = "f32" if acc == f32 else "s32"  # integer products wrap modulo 2^32, as C's int32 would
    spec = f"sync.aligned.{shape}.row.col.{d}.{a}.{b}.{d}"
    args = [*em.parts(op.a), *em.parts(op.b), *em.parts(op.c)]
    sync = ptx.MmaOp(spec, args, [acc] * 4)  # emitting checks the arch (fp8: sm_89) at the dot's line
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
