"""``promote-to-shared{layout=swizzle}``: stage the CTA tiles of every ``tile.mma`` in shared
memory.

Each global tile operand gets a shared buffer (allocated once at the top of the kernel); inside
the K loop the block copies the tile in (``smem.copy``, zero-filling past the matrix edge), a
barrier makes it visible, the warps compute from shared memory, and a second barrier keeps the
next copy from overwriting a tile still being read. ``pipeline-cp-async`` later turns this into
an asynchronous multi-stage ring.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.builder import InsertPoint
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from kaio.dialects import kernel, smem, tile
from kaio.errors import KaioCompileError


def copy_vector(view: tile.ViewOp) -> int:
    """Elements per copy access: the view's alignment, at most 16 bytes, dividing its rows."""
    vtype = view.result.type
    elem_bytes = max(vtype.element_type.bitwidth // 8, 1)  # type: ignore[attr-defined]
    vec = min(view.align.value.data, 16 // elem_bytes, vtype.dims[1])
    while vtype.dims[1] % vec:
        vec //= 2
    return max(vec, 1)


@dataclass
class _Promote(RewritePattern):
    layout: str

    def _buffer(self, rewriter: PatternRewriter, func: kernel.KernelFuncOp, view: SSAValue, hint: str) -> SSAValue:
        vtype = view.type
        assert isinstance(vtype, tile.ViewType)
        elem_bytes = max(vtype.element_type.bitwidth // 8, 1)  # type: ignore[attr-defined]
        pad = 16 // elem_bytes if self.layout == "pad" else 0  # one 16-byte chunk per row
        buffer = smem.BufferType(vtype.dims, vtype.element_type, smem.LayoutAttr(self.layout, pad))
        alloc = smem.AllocOp(hint, buffer)
        rewriter.insert(alloc, InsertPoint.at_start(func.body.block))
        return alloc.result

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.MmaOp, rewriter: PatternRewriter) -> None:
        operands = [(name, v) for name, v in (("a", op.a), ("b", op.b)) if isinstance(v.type, tile.ViewType)]
        if not operands:
            return
        func = op.parent_op()
        while func is not None and not isinstance(func, kernel.KernelFuncOp):
            func = func.parent_op()
        if func is None:
            raise KaioCompileError("tile.mma outside a kernel.func")
        for name, view in operands:
            view_op = view.owner
            if not isinstance(view_op, tile.ViewOp):
                raise KaioCompileError("promote-to-shared needs tile operands made by tile.view")
            buffer = self._buffer(rewriter, func, view, f"{name}_tile")
            rewriter.insert(smem.CopyOp(view, buffer, copy_vector(view_op)))
            op.operands[0 if name == "a" else 1] = buffer
        rewriter.insert(kernel.BarrierOp())
        rewriter.insert(kernel.BarrierOp(), InsertPoint.after(op))
        rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class PromoteToSharedPass(ModulePass):
    name = "promote-to-shared"

    layout: str = "swizzle"
    """Shared layout: swizzle (XOR, no padding), pad (one 16-byte chunk per row), or none."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.layout not in smem.LAYOUT_KINDS:
            raise KaioCompileError(f"layout is one of {smem.LAYOUT_KINDS}, not '{self.layout}'")
        PatternRewriteWalker(_Promote(self.layout), apply_recursively=False).rewrite_module(op)
