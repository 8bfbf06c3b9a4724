"""The SIMT ``tile.dot`` -> PTX: ``acc + a @ b`` with FMAs, the operands read from shared memory.

Each thread computes its accumulator elements, reading the rows of A and the columns of B it
needs from the shared buffers ``promote-to-shared`` staged them in, widened to f32. The dots
that go to tensor cores are taken before this by ``lower-to-mma-sync`` and ``lower-to-wgmma``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import bf16, f32, i32
from xdsl.ir import SSAValue

from kaio.dialects import ptx, smem, tile
from kaio.errors import KaioCompileError
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, float_spec, mem_spec
from kaio.passes.to_ptx.tile_distribution import add32, distribution, thread_base
from kaio.passes.to_ptx.smem_cpasync import shared_offset


def to_f32(em: PtxEmitter, v: SSAValue) -> SSAValue:
    if v.type == f32:
        return v
    if v.type == bf16:
        return em.instr(ptx.MovOp, "b32", [em.const(0, bf16), v], f32)
    return em.instr(ptx.CvtOp, f"f32.{float_spec(v.type)}", [v], f32)


def _operand_element(em: PtxEmitter, buffer: SSAValue, transposed: bool, row: SSAValue, col: SSAValue) -> SSAValue:
    bt = buffer.type
    if not isinstance(bt, smem.BufferType):
        raise KaioCompileError(
            "tile.dot operands must be in shared memory: run promote-to-shared first (an A operand it left "
            "in registers, in the accumulator's mma layout, needs lower-to-mma-sync)"
        )
    if transposed:
        row, col = col, row
    addr = em.instr(ptx.AddOp, "s32", [em.value(buffer), shared_offset(em, bt, row, col)], i32)
    t = bt.element_type
    return to_f32(em, em.instr(ptx.LdOp, f"shared.{mem_spec(t)}", [addr], t))


@lowering(tile.DotOp)
def lower_simt_dot(em: PtxEmitter, op: tile.DotOp) -> None:
    """``acc + a @ b`` with FMAs: each thread computes its accumulator elements, reading the
    rows of A and the columns of B it needs from shared memory (lower-to-mma-sync takes the
    f16/bf16 dots in the mma layout before this)."""
    dist = distribution(em, op.acc.type)
    ta, tb = op.trans
    k_size = tile.operand_shape(op.a.type, ta)[1]
    base = thread_base(em, dist)
    rows = sorted({off[0] for off in dist.offsets})
    cols = sorted({off[1] for off in dist.offsets})
    row_of = {o: add32(em, base[0], o) for o in rows}
    col_of = {o: add32(em, base[1], o) for o in cols}
    accs = list(em.parts(op.acc))
    for kk in range(k_size):
        k = em.const(kk, i32)
        a = {o: _operand_element(em, op.a, ta, row_of[o], k) for o in rows}
        b = {o: _operand_element(em, op.b, tb, k, col_of[o]) for o in cols}
        for r, off in enumerate(dist.offsets):
            accs[r] = em.instr(ptx.FmaOp, "rn.f32", [a[off[0]], b[off[1]], accs[r]], f32)
    em.bind(op.result, accs)
