"""``promote-to-shared{layout=swizzle}``: stage the operands of every ``tile.dot`` in shared
memory, where the warps read the rows and columns they need (``ldmatrix`` or FMA loads).

An operand loaded from global memory for this dot alone (``kt.load`` with ``other=0``,
possibly through ``kt.trans``) is *copied* straight into its buffer (``smem.copy``, zero-filled
past the bounds: no registers on the way, and ``pipeline-cp-async`` can make it asynchronous).
Any other operand (a tile computed in registers) is *stored* by the threads holding it
(``smem.store``), except an A operand already in the accumulator's ``#tile.mma<[WM, 1]>``
layout (a cast accumulator, like attention's probabilities), which stays in registers:
``lower-to-mma-sync`` packs its registers into A fragments. A transposed operand is staged as
it is and the dot reads it transposed. A barrier before the dot makes the data visible; one after it keeps the
next iteration from overwriting a buffer still being read (``pipeline-cp-async`` replaces the
barriers of copies with its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import VerifyException

from kaio.dialects import kernel, mma, smem, tile
from kaio.dialects import stage_attrs
from kaio.errors import KaioCompileError
from kaio.pass_contracts import PassContract



def copy_vector(view: tile.ViewOp) -> int:
    """Elements per copy access: the view's alignment, at most 16 bytes, dividing its rows."""
    vtype = view.result.type
    elem_bytes = max(vtype.element_type.bitwidth // 8, 1)  # type: ignore[attr-defined]
    vec = min(view.align.value.data, 16 // elem_bytes, vtype.dims[-1])
    while vtype.dims[-1] % vec:
        vec //= 2
    return max(vec, 1)


def _is_zero(v: SSAValue) -> bool:
    owner = v.owner
    return isinstance(owner, arith.ConstantOp) and owner.value.value.data == 0  # type: ignore[union-attr]


def _buffer_type(shape: tuple[int, ...], elem: object, layout: str) -> smem.BufferType:
    elem_bytes = max(elem.bitwidth // 8, 1)  # type: ignore[attr-defined]
    if layout in ("swizzle", "wgmma"):
        try:
            smem.LayoutAttr(layout).check_tile(shape[1], elem_bytes, shape[0])
        except VerifyException:
            layout = "pad"  # rows too narrow or oddly sized for the XOR swizzle
    pad = 16 // elem_bytes if layout == "pad" else 0  # one 16-byte chunk per row
    return smem.BufferType(shape, elem, smem.LayoutAttr(layout, pad))  # type: ignore[arg-type]


@dataclass
class _Stager:
    func: kernel.KernelFuncOp
    layout: str
    count: int = 0

    def alloc(self, shape: tuple[int, ...], elem: object, hint: str, layout: str) -> SSAValue:
        self.count += 1
        op = smem.AllocOp(f"{hint}{self.count}", _buffer_type(shape, elem, layout))
        Rewriter.insert_op(op, InsertPoint.at_start(self.func.body.block))
        return op.result

    def stage(self, dot: tile.DotOp, value: SSAValue, hint: str, dead: list[Operation]) -> tuple[SSAValue, bool, bool]:
        """(buffer, transposed, copied) for one operand; ops the copy replaces go to ``dead``."""
        transposed = False
        source = value
        trans_op = value.owner if isinstance(value.owner, tile.TransOp) and value.uses.get_length() == 1 else None
        if trans_op is not None:
            source, transposed = trans_op.input, True
        load = source.owner
        elem = tile.element_of(source.type)
        layout = self.layout
        if hint == "b_tile" and not transposed and layout in ("swizzle", "wgmma") and getattr(elem, "bitwidth", 16) == 8:
            # an 8-bit (K, N) B is read byte by byte (ldmatrix.trans moves 16-bit elements): padded
            # rows make each byte's address the lane's base plus a constant, no XOR per byte
            layout = "pad"
        buffer = self.alloc(tile.shape_of(source.type), elem, hint, layout)
        if isinstance(load, tile.LoadOp) and source.uses.get_length() == 1 and _is_zero(load.other):
            view = load.view.owner
            assert isinstance(view, tile.ViewOp)
            Rewriter.insert_op(smem.CopyOp(load.view, buffer, copy_vector(view)), InsertPoint.before(load))
            dead += [op for op in (trans_op, load) if op is not None]
            return buffer, transposed, True
        Rewriter.insert_op(smem.StoreOp(source, buffer), InsertPoint.before(dot))
        return buffer, transposed, False

    def promote(self, dot: tile.DotOp) -> None:
        dead: list[Operation] = []
        if mma.register_a_operand(dot.a.type, dot.acc.type):
            a, ta, ca = dot.a, False, True  # no shared write to order
        else:
            a, ta, ca = self.stage(dot, dot.a, "a_tile", dead)
        b, tb, cb = self.stage(dot, dot.b, "b_tile", dead)
        new = tile.DotOp(a, b, dot.acc, (ta, tb), dot.signs)
        Rewriter.replace_op(dot, new)
        for op in dead:  # a copied operand's transpose, then its load: no use is left
            Rewriter.erase_op(op)
        before, after = kernel.BarrierOp(), kernel.BarrierOp()
        if ca and cb:
            before.attributes[stage_attrs.COPY_BARRIER_ATTR] = UnitAttr()
            after.attributes[stage_attrs.COPY_BARRIER_ATTR] = UnitAttr()
        Rewriter.insert_op(before, InsertPoint.before(new))
        Rewriter.insert_op(after, InsertPoint.after(new))


@dataclass(frozen=True)
class PromoteToSharedPass(ModulePass):
    name = "promote-to-shared"
    contract = PassContract(after=("tile-layout", "store-tma"))

    layout: str = "swizzle"
    """Shared layout: swizzle (XOR, no padding), wgmma (swizzled panels wgmma descriptors
    read), pad (one 16-byte chunk per row), or none."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.layout not in smem.LAYOUT_KINDS:
            raise KaioCompileError(f"layout is one of {smem.LAYOUT_KINDS}, not '{self.layout}'")
        stagers: dict[kernel.KernelFuncOp, _Stager] = {}
        for dot in [o for o in op.walk() if isinstance(o, tile.DotOp)]:
            if isinstance(dot.b.type, smem.BufferType):
                continue  # already staged
            func = kernel.enclosing_kernel(dot)
            stager = stagers.setdefault(func, _Stager(func, self.layout))
            stager.promote(dot)
