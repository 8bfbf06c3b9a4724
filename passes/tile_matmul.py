"""``tile-matmul{block=BM,BN,BK warps=WM,WN group=G}``: kernel.matmul -> CTA tiles, warp tiles,
and a K loop of ``tile.mma``.

Each CTA computes one BMxBN tile of C with WMxWN warps (each warp a (BM/WM)x(BN/WN) tile). The
grid is 1-D; CTAs walk C in groups of G tile-rows (Triton's "grouped ordering"), so CTAs that run
together reuse the same A and B tiles from L2.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, i32
from xdsl.ir import Block
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from kaio.dialects import kernel, tile
from kaio.errors import KaioCompileError
from kaio.passes.int_builder import IndexBuilder


@dataclass(frozen=True)
class TileShape:
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int

    @property
    def threads(self) -> int:
        return 32 * self.wm * self.wn

    @property
    def warp_tile(self) -> tuple[int, int]:
        return self.bm // self.wm, self.bn // self.wn

    def check(self) -> None:
        if min(self.bm, self.bn, self.bk, self.wm, self.wn) < 1:
            raise KaioCompileError(f"tile sizes must be positive: {self}")
        if self.bm % self.wm or self.bn % self.wn:
            raise KaioCompileError(f"{self.wm}x{self.wn} warps do not evenly split a {self.bm}x{self.bn} tile")
        if self.threads > 1024:
            raise KaioCompileError(f"{self.wm}x{self.wn} warps exceed 1024 threads per block")


@dataclass
class _TileMatmul(RewritePattern):
    shape: TileShape
    group: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: kernel.MatmulOp, rewriter: PatternRewriter) -> None:
        s = self.shape
        func = op.parent_op()
        assert isinstance(func, kernel.KernelFuncOp)
        func.block_size = DenseArrayBase.from_list(i32, [s.threads, 1, 1])
        ix = IndexBuilder(rewriter)
        m, n, k = op.m, op.n, op.k
        align_a, align_b, align_c = op.alignments

        # which C tile this CTA owns, in grouped order
        pid = rewriter.insert(kernel.BlockIdOp("x")).result
        tiles_m, tiles_n = ix.ceil_div(m, s.bm), ix.ceil_div(n, s.bn)
        per_group = ix.mul(ix.const(self.group), tiles_n)
        group_id = ix.div(pid, per_group)
        first_m = ix.mul(group_id, ix.const(self.group))
        group_rows = ix.min(ix.sub(tiles_m, first_m), ix.const(self.group))
        in_group = ix.rem(pid, per_group)
        pid_m = ix.add(first_m, ix.rem(in_group, group_rows))
        pid_n = ix.div(in_group, group_rows)
        m0, n0 = ix.mul(pid_m, ix.const(s.bm)), ix.mul(pid_n, ix.const(s.bn))

        # which part of it this warp owns
        warp = rewriter.insert(kernel.WarpIdOp()).result
        wtm, wtn = s.warp_tile
        warp_row = ix.mul(ix.div(warp, ix.const(s.wn)), ix.const(wtm))
        warp_col = ix.mul(ix.rem(warp, ix.const(s.wn)), ix.const(wtn))

        zero = rewriter.insert(tile.ZeroOp((wtm, wtn))).result
        body = Block(arg_types=[i32, zero.type])
        k0, acc = body.args
        inner = IndexBuilder(Builder(InsertPoint.at_end(body)))
        a_tile = inner.b.insert(tile.ViewOp(op.a, m0, k0, m, k, k, (s.bm, s.bk), align_a)).result
        b_tile = inner.b.insert(tile.ViewOp(op.b, k0, n0, k, n, n, (s.bk, s.bn), align_b)).result
        acc2 = inner.b.insert(tile.MmaOp(a_tile, b_tile, acc, warp_row, warp_col)).result
        inner.b.insert(scf.YieldOp(acc2))
        loop = rewriter.insert(scf.ForOp(ix.const(0), k, ix.const(s.bk), [zero], body))

        c_tile = rewriter.insert(tile.ViewOp(op.c, m0, n0, m, n, n, (s.bm, s.bn), align_c)).result
        rewriter.insert(tile.StoreOp(loop.results[0], c_tile, warp_row, warp_col, op.alpha, op.beta))
        rewriter.erase(op)


@dataclass(frozen=True)
class TileMatmulPass(ModulePass):
    name = "tile-matmul"

    block: tuple[int, ...] = (128, 128, 32)
    """CTA tile: BM, BN, BK."""

    warps: tuple[int, ...] = (2, 2)
    """Warps per CTA along M and N."""

    group: int = 8
    """CTA tile-rows walked together, for L2 reuse."""

    def tile_shape(self) -> TileShape:
        if len(self.block) != 3 or len(self.warps) != 2:
            raise KaioCompileError("tile-matmul takes block=BM,BN,BK and warps=WM,WN")
        shape = TileShape(*self.block, *self.warps)
        shape.check()
        return shape

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = _TileMatmul(self.tile_shape(), max(self.group, 1))
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
