"""``lower-to-mma-sync``: ``tile.dot`` on tensor cores (``ldmatrix`` + ``mma.sync.m16n8k16``, or
``m16n8k32`` for 8-bit operands).

A dot whose accumulator is in the ``#tile.mma<[WM, WN]>`` layout and whose f16/bf16 operands
(or i8/u8 into i32, e4m3/e5m2 into f32) are in shared memory (``promote-to-shared``) becomes,
for each warp: its (M/WM)x(N/WN) block of
the accumulator as 16x8 fragments (``mma.split``), then for every step of K (16 deep, 32 for
8-bit operands: ``mma.k_step``) the warp's
A rows as 16xK fragments and its B columns as pairs of Kx8 fragments (``mma.load_a``,
``mma.load_b``; each B pair right before its ``mma.mma`` ops, so few fragments are live beside
the accumulator), one ``mma.mma`` per (A, B) pair, and the fragments back into the tile
(``mma.join``). An A operand ``promote-to-shared`` left in registers, in the accumulator's
layout, gives its fragments with ``mma.pack_a`` instead of ``ldmatrix``. Warps beyond WM x WN (a tile too small for all of them) compute copies.
Other dots (f32, or a blocked accumulator) are left to lower-to-ptx's FMA rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from kaio.dialects import kernel, mma, smem, tile
from kaio.dialects.tile_layout import MmaLayout, layout_of
from kaio.errors import KaioCompileError
from kaio.pass_contracts import OpRule, PassContract
from kaio.passes.int_builder import IndexBuilder


def _fail(why: str) -> KaioCompileError:
    return KaioCompileError(f"lower-to-mma-sync: {why}")


def _rounded_from(a: SSAValue) -> SSAValue:
    """The f32 tile a register A operand is a plain cast of (a ``tile.map`` holding one
    ``arith.truncf``, as ``T(acc)`` gives), so the fragments round while they pack; else ``a``."""
    owner = a.owner
    if not isinstance(owner, tile.MapOp) or len(owner.inputs) != 1 or tile.element_of(owner.inputs[0].type) != f32:
        return a
    ops = list(owner.block.ops)
    if len(ops) != 2 or not isinstance(ops[0], arith.TruncFOp) or ops[0].input is not owner.block.args[0] \
            or ops[1].operands[0] is not ops[0].result:  # fmt: skip
        return a
    if owner.inputs[0].type != tile.tile_type(f32, tile.shape_of(a.type), layout_of(a.type)):
        return a
    return owner.inputs[0]


def lower_dot(dot: tile.DotOp, num_warps: int) -> None:
    layout = layout_of(dot.acc.type)
    assert isinstance(layout, MmaLayout)
    ta, tb = dot.trans
    in_registers = not ta and mma.register_a_operand(dot.a.type, dot.acc.type)
    for operand in (dot.a, dot.b) if not in_registers else (dot.b,):
        if not isinstance(operand.type, smem.BufferType):
            raise _fail("operands must be in shared memory (or A in registers in the accumulator's layout); run promote-to-shared first")
        if operand.type.element_type not in mma.BUFFER_ELEMENTS:
            raise _fail(f"tensor cores take f16/bf16, i8/u8 or fp8 operands, not {operand.type.element_type}")
    ua, ub = dot.signs
    frag_a = mma.fragment_element(tile.element_of(dot.a.type), ua)
    frag_b = mma.fragment_element(tile.element_of(dot.b.type), ub)
    step = mma.k_step(frag_a)
    if step != 16 and (in_registers or ta):  # ldmatrix .trans moves 16-bit elements only
        raise _fail("8-bit A operands are read from shared memory row-major (M, K); a transposed A or one in registers is not supported")
    a_source, a_elem = (_rounded_from(dot.a), tile.element_of(dot.a.type)) if in_registers else (dot.a, None)
    m, n = tile.shape_of(dot.acc.type)
    k = tile.operand_shape(dot.a.type, ta)[1]
    wm, wn = layout.warp_grid
    tm, tn = layout.warp_tile((m, n))
    if tm % 16 or tn % 8 or k % step:
        raise _fail(f"a warp's {tm}x{tn} block must be made of 16x8 blocks and K={k} a multiple of {step}")
    fm, fn = tm // 16, tn // 8

    ix = IndexBuilder(Builder(InsertPoint.before(dot)))
    warp = ix.b.insert(kernel.WarpIdOp()).result
    warp_n = ix.rem(warp, ix.const(wn))
    warp_m = ix.rem(ix.div(warp, ix.const(wn)), ix.const(wm))
    warp_row = ix.mul(warp_m, ix.const(tm))
    warp_col = ix.mul(warp_n, ix.const(tn))
    accs: list[SSAValue] = list(ix.b.insert(mma.SplitOp(dot.acc)).fragments)
    for kk in range(k // step):
        kcol = ix.const(step * kk)
        if in_registers:  # the warp's own rows of A: fragments from its registers
            a_frags = [ix.b.insert(mma.PackAOp(a_source, i, kk, a_elem)).result for i in range(fm)]
        else:
            a_frags = [
                ix.b.insert(mma.LoadAOp(dot.a, ix.add(warp_row, ix.const(16 * i)), kcol, ta, frag_a)).result for i in range(fm)
            ]
        for j2 in range((fn + 1) // 2):  # one B pair at a time: few fragments live beside the accumulator
            count = min(fn - 2 * j2, 2)  # a last 8-column half alone
            pair = ix.b.insert(mma.LoadBOp(dot.b, kcol, ix.add(warp_col, ix.const(16 * j2)), tb, count, frag_b)).results
            for i in range(fm):
                for jj, b_frag in enumerate(pair):
                    j = 2 * j2 + jj
                    accs[i * fn + j] = ix.b.insert(mma.MmaOp(a_frags[i], b_frag, accs[i * fn + j])).result
    join = mma.JoinOp(accs, dot.result.type)
    Rewriter.replace_op(dot, join)


MMA_DOT = OpRule(
    "a tile.dot with an mma accumulator layout (left to it, lower-to-ptx makes it FMAs)",
    lambda op: isinstance(op, tile.DotOp) and isinstance(layout_of(op.acc.type), MmaLayout),
)


@dataclass(frozen=True)
class LowerToMmaSyncPass(ModulePass):
    name = "lower-to-mma-sync"
    contract = PassContract(after=("tile-layout", "promote-to-shared", "pipeline-cp-async", "lower-to-wgmma"), removes=(MMA_DOT,))

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for dot in [o for o in op.walk() if isinstance(o, tile.DotOp)]:
            if isinstance(layout_of(dot.acc.type), MmaLayout):
                func = kernel.enclosing_kernel(dot)
                lower_dot(dot, max(func.block_shape[0] // 32, 1))
