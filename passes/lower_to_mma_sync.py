"""``lower-to-mma-sync``: warp tiles -> tensor-core fragments (``ldmatrix`` + ``mma.sync``).

A warp's WMxWN accumulator becomes (WM/16) x (WN/8) accumulator fragments carried by the K
loop. Each ``tile.mma`` over a BK-deep CTA tile unrolls into BK/16 steps; a step loads the
warp's A rows as 16x16 fragments and its B columns as pairs of 16x8 fragments from shared
memory, then issues one ``mma.sync.m16n8k16`` per (A, B) fragment pair. ``tile.store`` becomes
one ``mma.store`` per fragment. The accumulator must flow ``tile.zero`` -> K loop ->
``tile.mma`` -> ``tile.store``, as ``tile-matmul`` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp, bf16, f16
from xdsl.ir import Block, BlockArgument, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from kaio.dialects import mma, smem, tile
from kaio.errors import KaioCompileError
from kaio.passes.int_builder import IndexBuilder


def _fail(why: str) -> KaioCompileError:
    return KaioCompileError(f"lower-to-mma-sync: {why}")


def _check(op: tile.MmaOp) -> tuple[int, int, int]:
    """(fragment rows, fragment cols, k steps) of a warp's tile.mma, or a clear error."""
    for operand in (op.a, op.b):
        if not isinstance(operand.type, smem.BufferType):
            raise _fail("operands must be in shared memory; run promote-to-shared first")
        if operand.type.element_type not in (f16, bf16):
            raise _fail(
                f"tensor cores take f16/bf16 inputs, not {operand.type.element_type}; "
                "drop lower-to-mma-sync from the pipeline for the SIMT (FMA) version"
            )
    wm, wn = tile.tile_shape(op.acc.type)
    bk = tile.tile_shape(op.a.type)[1]
    if wm % 16 or wn % 16 or bk % 16:
        raise _fail(f"the warp tile {wm}x{wn} and BK={bk} must be multiples of 16")
    return wm // 16, wn // 8, bk // 16


def _expand_warp_mma(op: tile.MmaOp, accs: list[SSAValue]) -> list[SSAValue]:
    """Replace ``op`` by fragment loads and mma.sync ops; returns the new accumulators."""
    fm, fn, ksteps = _check(op)
    ix = IndexBuilder(Builder(InsertPoint.before(op)))
    accs = list(accs)
    for kk in range(ksteps):
        col = ix.const(16 * kk)
        a_frags = [
            ix.b.insert(mma.LoadAOp(op.a, ix.add(op.warp_row, ix.const(16 * i)), col)).result for i in range(fm)
        ]
        b_frags: list[SSAValue] = []
        for j2 in range(fn // 2):
            pair = ix.b.insert(mma.LoadBOp(op.b, col, ix.add(op.warp_col, ix.const(16 * j2))))
            b_frags.extend(pair.results)
        for i in range(fm):
            for j in range(fn):
                accs[i * fn + j] = ix.b.insert(mma.MmaOp(a_frags[i], b_frags[j], accs[i * fn + j])).result
    return accs


def lower_accumulator(op: tile.MmaOp) -> None:
    acc = op.acc
    if not isinstance(acc, BlockArgument) or not isinstance(loop := acc.block.parent_op(), scf.ForOp):
        raise _fail("the accumulator must be carried by the K loop (scf.for)")
    index = acc.index - 1  # position among the iter args
    init = loop.iter_args[index].owner
    yield_op = loop.body.block.last_op
    assert isinstance(yield_op, scf.YieldOp)
    if not isinstance(init, tile.ZeroOp) or yield_op.arguments[index] is not op.result:
        raise _fail("the accumulator must flow tile.zero -> K loop -> tile.mma -> yield")
    stores = [u.operation for u in loop.results[index].uses]
    if not all(isinstance(s, tile.StoreOp) for s in stores):
        raise _fail("the K loop's accumulator may only be stored with tile.store")
    fm, fn, _ = _check(op)
    count = fm * fn
    frag = mma.FragType("acc", init.result.type.element_type)

    # the loop carries `count` fragments where it carried one tile
    body = loop.body.block
    types = list(body.arg_types)
    new_body = Block(arg_types=[*types[: acc.index], *([frag] * count), *types[acc.index + 1 :]])
    new_args = list(new_body.args)
    frag_args = new_args[acc.index : acc.index + count]
    others = new_args[: acc.index] + new_args[acc.index + count :]
    for old, new in zip([a for a in body.args if a is not acc], others):
        old.replace_all_uses_with(new)
    for o in list(body.ops):
        o.detach()
        new_body.add_op(o)
    new_accs = _expand_warp_mma(op, frag_args)
    carried = list(yield_op.arguments)
    carried[index : index + 1] = new_accs
    Rewriter.replace_op(yield_op, scf.YieldOp(*carried))
    op.detach()
    op.erase(safe_erase=False)

    zero = mma.ZeroOp()
    Rewriter.insert_op(zero, InsertPoint.before(loop))
    inits = list(loop.iter_args)
    inits[index : index + 1] = [zero.result] * count
    new_loop = scf.ForOp(loop.lb, loop.ub, loop.step, inits, new_body)
    Rewriter.insert_op(new_loop, InsertPoint.before(loop))
    results = list(new_loop.results)
    fragments = results[index : index + count]
    for pos, old in enumerate(loop.results):
        if pos != index:
            old.replace_all_uses_with(results[pos if pos < index else pos + count - 1])
    for store in stores:
        assert isinstance(store, tile.StoreOp)
        ix = IndexBuilder(Builder(InsertPoint.before(store)))
        for i in range(fm):
            for j in range(fn):
                row = ix.add(store.row, ix.const(16 * i))
                col = ix.add(store.col, ix.const(8 * j))
                ix.b.insert(mma.StoreOp(fragments[i * fn + j], store.c, row, col, store.alpha, store.beta))
        store.detach()
        store.erase()
    loop.detach()
    loop.erase(safe_erase=False)
    if not init.result.uses:
        init.detach()
        init.erase()


@dataclass(frozen=True)
class LowerToMmaSyncPass(ModulePass):
    name = "lower-to-mma-sync"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for warp_mma in [o for o in op.walk() if isinstance(o, tile.MmaOp)]:
            lower_accumulator(warp_mma)
