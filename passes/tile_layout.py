"""``tile-layout{mma=true warps=0,0 wgmma=false staged_stores=true}``: give every tile a layout; prove the alignment of views.

1. **Alignment.** Each ``tile.view``'s ``align`` becomes the largest power of two (in elements,
   at most the array's assumed base alignment) that its last offset and row stride are proven
   multiples of: constants, ``kt.multiple_of`` (and integer arguments the launch found to be
   multiples of 16), products, sums, loop variables (``lb`` and ``step``). Accesses move that
   many elements at once (a bound that is not a proven multiple masks element by element).
2. **Layouts**, forward in program order: loads, ranges and splats get a blocked layout that
   vectorises their rows (*flexible*: they can be produced in any layout); ``tile.dot`` results
   get the mma accumulator layout (f16/bf16 operands, with ``mma=true``) or a blocked one
   (*anchored*); elementwise maps take an anchored operand's layout (a map of ranges, splats
   and broadcasts alone its own shape's blocked layout, never a row's spread over the
   warps: that would hold each element in several threads); reductions the slice of
   their input's; ``expand_dims`` of a slice its parent; an elementwise atomic its index's, or
   an anchored value's when the index is flexible; loop-carried tiles what their init and
   the loop body agree on (iterated to a fixed point).
3. **Conversions** (``tile.convert_layout``) where an operand's layout is not the one its user
   needs, then *rematerialisation*: a conversion of a flexible producer (a load, a splat, a
   range, a broadcast or expand_dims of one) becomes that producer made in the wanted layout,
   so ``acc + bias`` loads the bias straight into the accumulator's layout. A remake is all or
   nothing (a map whose first input was remade but whose second cannot be keeps both as they
   were). The conversions left move data through shared memory at lower-to-ptx. Last, every
   operand is checked to be in the layout its user needs (a slip is an error, never a map
   reading another element's registers).
4. **Staged stores** (``staged_stores=true``): a store of a 16-bit tile in the mma accumulator
   layout (4 bytes per thread per row: half-used sectors) into a view proven 16-byte aligned
   first converts the tile to a row-blocked layout with 8 consecutive elements per thread, so
   the store is one ``st.global.v4.b32`` per 8 elements, a warp writing whole rows. The
   conversion goes through shared memory (``lower-to-ptx`` reuses a shared buffer that is dead
   by then, such as the K loop's cp.async ring).

``warps=WM,WN`` fixes the mma warp grid (0,0: chosen from the tile shape). ``wgmma=true``
(sm_90a) gives a dot that Hopper's wgmma can take the grid [num_warps, 1]: M = 16 x num_warps
rows, num_warps a multiple of 4, N a multiple of 8, K of 16, operands whose shared tiles fit
the ``wgmma`` smem layout (see ``lower-to-wgmma``); other dots keep the mma.sync choice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import ModuleOp, TensorType, bf16, f16, i8
from xdsl.ir import Attribute, Block, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import VerifyException

from kaio.dialects import kernel, mma, smem, tile, wgmma
from kaio.dialects.tile_layout import (
    BlockedLayout,
    MmaLayout,
    SliceLayout,
    TileLayout,
    default_blocked,
    layout_of,
    mma_warps,
)
from kaio.errors import KaioCompileError
from kaio.pass_contracts import OpRule, PassContract
from kaio.passes.element_types import element_bytes
from kaio.passes.value_facts import divisibility


# --------------------------------------------------------------------------- alignment


def view_alignment(view: tile.ViewOp) -> int:
    align = view.align.value.data
    last_stride = view.strides[-1].owner
    if not (isinstance(last_stride, arith.ConstantOp) and last_stride.value.value.data == 1):  # type: ignore[union-attr]
        return 1
    facts = [view.offsets[-1]]
    if view.rank == 2:
        facts.append(view.strides[0])
    for v in facts:
        align = min(align, divisibility(v))
    return max(align, 1)


# --------------------------------------------------------------------------- layout choice


@dataclass(frozen=True)
class Choice:
    layout: TileLayout
    anchored: bool


_RANK = {MmaLayout: 3, SliceLayout: 2, BlockedLayout: 1}


def join(a: Choice, b: Choice) -> Choice:
    """The layout two values must share: an anchored one over a flexible one, mma first."""
    if a.anchored != b.anchored:
        return a if a.anchored else b
    if _RANK[type(b.layout)] > _RANK[type(a.layout)]:
        return b
    return a


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())  # type: ignore[attr-defined]


def _elem_bytes(v: SSAValue) -> int:
    return element_bytes(v.type.element_type)  # type: ignore[attr-defined]


def _tiles(values: Iterator[SSAValue] | tuple[SSAValue, ...] | list[SSAValue]) -> list[SSAValue]:
    return [v for v in values if isinstance(v.type, TensorType)]


def _made_from_broadcasts(v: SSAValue) -> int:
    """How cheaply ``v`` is made again in another layout: 2 for a broadcast row or column, 1
    for a tile made of ranges, splats and broadcasts (``kt.expand_dims(kt.arange(C), 0) ==
    column``: any layout makes it as cheaply), 0 for anything else (a loaded tile). A map takes
    the layout of its lowest input, so a full tile is never moved to match a mask."""
    if isinstance(v.owner, tile.BroadcastOp):
        return 2
    return 1 if _broadcast_made(v) else 0


def _broadcast_made(v: SSAValue, depth: int = 0) -> bool:
    """Whether ``v`` is made from ranges, splats and broadcasts of smaller tiles alone."""
    owner = v.owner
    if depth > 6 or not isinstance(owner, Operation):
        return False
    if isinstance(owner, tile.BroadcastOp | tile.SplatOp | tile.RangeOp):
        return True
    if isinstance(owner, tile.ExpandDimsOp):
        return _broadcast_made(owner.input, depth + 1)
    if isinstance(owner, tile.MapOp):
        inputs = _tiles(owner.inputs)
        return bool(inputs) and all(_broadcast_made(x, depth + 1) for x in inputs)
    return False


def transposed(layout: BlockedLayout) -> BlockedLayout:
    spt, tpw, wpc = layout.params
    return BlockedLayout(spt[::-1], tpw[::-1], wpc[::-1])


class LayoutSolver:
    """Phase 1: a layout for every tile value, without touching the IR."""

    def __init__(self, num_warps: int, mma: bool, warps: tuple[int, int], wgmma: bool = False):
        self.num_warps = num_warps
        self.mma = mma
        self.warps = warps
        self.wgmma = wgmma
        self.choice: dict[SSAValue, Choice] = {}

    def default(self, v: SSAValue) -> Choice:
        return Choice(default_blocked(_shape(v), _elem_bytes(v), self.num_warps), False)

    def get(self, v: SSAValue) -> Choice:
        c = self.choice.get(v)
        if c is None:
            c = self.choice[v] = self.default(v)
        return c

    def solve_block(self, block: Block) -> None:
        for op in block.ops:
            self.solve_op(op)

    def solve_op(self, op: Operation) -> None:
        if isinstance(op, scf.ForOp):
            self._loop(op)
            return
        if isinstance(op, scf.IfOp):
            for region in op.regions:
                for b in region.blocks:
                    self.solve_block(b)
            for i, r in enumerate(op.results):
                if isinstance(r.type, TensorType):
                    ins = [self.get(b.last_op.operands[i]) for reg in op.regions for b in reg.blocks]  # type: ignore[union-attr]
                    c = ins[0]
                    for other in ins[1:]:
                        c = join(c, other)
                    self.choice[r] = c
            return
        if isinstance(op, scf.WhileOp):
            self._while(op)
            return
        for region in op.regions:
            if not isinstance(op, tile.MapOp):
                for b in region.blocks:
                    self.solve_block(b)
        if not op.results or not isinstance(op.results[0].type, TensorType):
            return
        self.choice[op.results[0]] = self.rule(op)

    def rule(self, op: Operation) -> Choice:
        r = op.results[0]
        if isinstance(op, tile.MapOp):
            # an anchored input's layout, else a full tile's, else one made in place from
            # ranges (not a broadcast row or column): the cheaper side is the one remade
            ins = [(self.get(x), _made_from_broadcasts(x)) for x in op.inputs]
            if not ins:
                return self.default(r)
            if len(ins) > 1 and all(c.anchored is False and made for c, made in ins):
                # ranges, splats and broadcasts alone: any layout makes them as cheaply, so the
                # full tile's own (a row's layout broadcast down a column replicates it over
                # the warps: each element held by many threads, loaded by each)
                return self.default(r)
            best = ins[0]
            for other in ins[1:]:
                if best[0].anchored == other[0].anchored and best[1] > other[1]:
                    best = other
                elif join(best[0], other[0]) != best[0]:
                    best = other
            return best[0]
        if isinstance(op, tile.BroadcastOp):
            return self.get(op.input)
        if isinstance(op, tile.ExpandDimsOp):
            c = self.get(op.input)
            if isinstance(c.layout, SliceLayout) and c.layout.dim.data == op.axis.value.data:
                return Choice(c.layout.parent, c.anchored)  # type: ignore[arg-type]
            return self.default(r)
        if isinstance(op, tile.TransOp):
            c = self.get(op.input)
            if isinstance(c.layout, BlockedLayout):
                return Choice(transposed(c.layout), c.anchored)
            return self.default(r)
        if isinstance(op, tile.ReduceOp):
            c = self.get(op.input)
            return Choice(SliceLayout(op.axis.value.data, c.layout), c.anchored)
        if isinstance(op, tile.GatherOp):
            return self.get(op.index)
        if isinstance(op, tile.AtomicRMWOp | tile.AtomicCasOp):
            return self.atomic_layout(op)
        if isinstance(op, tile.DotOp):
            return Choice(self.dot_layout(op), True)
        if isinstance(op, tile.ConvertLayoutOp):
            return Choice(layout_of(r.type), True)  # type: ignore[arg-type]
        return self.default(r)

    def atomic_layout(self, op: tile.TileAtomic) -> Choice:
        """An elementwise atomic works in its index's layout, unless a value or the mask is
        anchored (a dot's accumulator) and the index is not: then in that one, and the index
        and mask (ranges, broadcasts, maps of them) are remade there. Moving the value into the
        index's layout instead goes through shared memory, and an index built from broadcasts
        of small tiles keeps their layout: for a (256, 16) tile of 8 warps, 128 elements per
        thread, each held by 8 warps (16 in the accumulator's)."""
        c = self.get(op.index)
        for x in op.operands[2:]:
            other = self.get(x)
            if other.anchored and not c.anchored:
                c = other
        return c

    def dot_layout(self, op: tile.DotOp) -> TileLayout:
        shape = _shape(op.result)
        elem = op.a.type.element_type  # type: ignore[attr-defined]
        if self.mma and elem in mma.BUFFER_ELEMENTS:  # 16-bit floats, 8-bit integers and fp8
            warps = self.warps if self.warps != (0, 0) else mma_warps(shape, self.num_warps)
            if self.warps == (0, 0) and self.wgmma and wgmma_fits(op, self.num_warps):
                warps = (self.num_warps, 1)
            wm, wn = warps
            if wm * wn > self.num_warps or shape[0] < 16 * wm or shape[1] < 8 * wn:
                raise KaioCompileError(f"tile-layout: {wm}x{wn} warps do not fit a {shape[0]}x{shape[1]} mma tile")
            return MmaLayout(warps)
        return default_blocked(shape, 4, self.num_warps)

    def _carry(self, inits: Sequence[SSAValue], args: Sequence[SSAValue], run_body: Callable[[], Sequence[SSAValue]]) -> None:
        """Loop-carried tiles: ``args`` start in their ``inits``' layouts; each run of the body
        (returning the values it yields for ``args``) can only strengthen them, to a fixed point."""
        for init, arg in zip(inits, args, strict=True):
            if isinstance(arg.type, TensorType):
                self.choice[arg] = self.get(init)
        for _ in range(4):
            yielded = run_body()
            changed = False
            for arg, y in zip(args, yielded, strict=True):
                if isinstance(arg.type, TensorType):
                    c = join(self.choice[arg], self.get(y))
                    if c != self.choice[arg]:
                        self.choice[arg], changed = c, True
            if not changed:
                return

    def _loop(self, op: scf.ForOp) -> None:
        body = op.body.block

        def run() -> Sequence[SSAValue]:
            self.solve_block(body)
            return body.last_op.operands  # type: ignore[union-attr]

        self._carry(op.iter_args, body.args[1:], run)
        for arg, res in zip(body.args[1:], op.results, strict=True):
            if isinstance(arg.type, TensorType):
                self.choice[res] = self.choice[arg]

    def _while(self, op: scf.WhileOp) -> None:
        """``scf.while`` (a loop with ``break``, or over unsigned bounds): the before block's
        arguments, the condition's forwarded values and the after block's yields share layouts."""
        before, after = op.before_region.block, op.after_region.block
        cond = before.last_op
        assert isinstance(cond, scf.ConditionOp)

        def run() -> Sequence[SSAValue]:
            self.solve_block(before)
            for arg, v in zip(after.args, cond.args, strict=True):
                if isinstance(arg.type, TensorType):
                    self.choice[arg] = self.get(v)
            self.solve_block(after)
            return after.last_op.operands  # type: ignore[union-attr]

        self._carry(op.arguments, before.args, run)
        for res, v in zip(op.results, cond.args, strict=True):
            if isinstance(res.type, TensorType):
                self.choice[res] = self.get(v)


def wgmma_fits(op: tile.DotOp, num_warps: int) -> bool:
    """Whether wgmma can take this dot with the warp grid [num_warps, 1] (lower-to-wgmma's
    conditions, seen before the operands are staged)."""
    m, n = _shape(op.result)
    k = _shape(op.a)[1]
    elem = op.a.type.element_type  # type: ignore[attr-defined]
    fp8 = elem in tile.FP8_ELEMENTS or elem == i8  # 8-bit: K-major operands only (lower-to-wgmma's operand_plan)
    if num_warps % 4 or m != 16 * num_warps or n % 8 or k % mma.k_step(elem) or elem not in mma.BUFFER_ELEMENTS:
        return False
    eb = element_bytes(elem)
    layout = smem.LayoutAttr("wgmma")
    for operand, mn_dim in ((op.a, 0), (op.b, 1)):
        staged, mn_axis = operand, mn_dim
        owner = operand.owner
        if isinstance(owner, tile.TransOp) and operand.uses.get_length() == 1:
            staged, mn_axis = owner.input, 1 - mn_dim  # staged as it is, read transposed
        rows, cols = _shape(staged)
        try:
            layout.check_tile(cols, eb, rows)
        except VerifyException:
            return False
        mn_step = 64 if operand is op.a else wgmma.column_chunks(n)[0]
        if elem == i8 and operand is op.b and mn_step not in wgmma.INT8_N:
            return False
        if mn_axis == 1 and (fp8 or (mn_step * eb) % layout.panel_span(cols, eb)):  # MN-major
            return False
    return True


def staged_store_layout(store: tile.StoreOp, num_warps: int) -> BlockedLayout | None:
    """The row-blocked layout a store of an mma accumulator tile goes out in, when that pays:
    16-bit elements (the mma layout writes them in 4-byte pairs), a view proven 16-byte aligned
    with unit last stride (so 8 elements move as one vector), and a tile with 8 consecutive
    elements for every thread. None: store in the tile's own layout."""
    value = store.value
    if not isinstance(layout_of(value.type), MmaLayout) or value.type.element_type not in (f16, bf16):  # type: ignore[attr-defined]
        return None
    view = store.view.owner
    if not isinstance(view, tile.ViewOp) or view.align.value.data * _elem_bytes(value) < 16:
        return None  # view_alignment left align at 1 unless the last stride is 1
    staged = default_blocked(_shape(value), _elem_bytes(value), num_warps)
    if staged.params[0][-1] * _elem_bytes(value) < 16:
        return None  # a tile too small for 16 bytes per thread
    return staged


def needed_layouts(op: Operation, staged_warps: int | None) -> Iterator[tuple[Operation, int, TileLayout]]:
    """(user, operand index, layout) for each tile operand whose layout ``op`` dictates: a map's
    inputs are read register by register in its result's layout, an expand_dims reads the
    slice of its result's, loop-carried tiles keep one layout... ``staged_warps``: the warp
    count when stores of mma tiles are staged (``staged_stores``), else None."""
    lay = lambda v: layout_of(v.type)  # noqa: E731
    if isinstance(op, tile.MapOp):
        for i in range(len(op.inputs)):
            yield op, i, lay(op.result)  # type: ignore[arg-type]
    elif isinstance(op, tile.BroadcastOp):
        yield op, 0, lay(op.result)  # type: ignore[arg-type]
    elif isinstance(op, tile.ExpandDimsOp):
        yield op, 0, SliceLayout(op.axis.value.data, lay(op.result))  # type: ignore[arg-type]
    elif isinstance(op, tile.TransOp):
        out = lay(op.result)
        if isinstance(out, BlockedLayout):
            yield op, 0, transposed(out)
    elif isinstance(op, tile.DotOp):
        yield op, 2, lay(op.result)  # type: ignore[arg-type]
    elif isinstance(op, tile.GatherOp):
        yield op, 2, lay(op.index)  # type: ignore[arg-type]
    elif isinstance(op, tile.StoreOp) and staged_warps is not None:
        staged = staged_store_layout(op, staged_warps)
        if staged is not None:
            yield op, 1, staged
    elif isinstance(op, tile.ScatterOp):
        yield op, 2, lay(op.index)  # type: ignore[arg-type]
        yield op, 3, lay(op.index)  # type: ignore[arg-type]
    elif isinstance(op, tile.AtomicRMWOp | tile.AtomicCasOp) and isinstance(op.index.type, TensorType):
        for i in range(1, len(op.operands)):  # index, values and mask live where the result does
            yield op, i, lay(op.result)  # type: ignore[arg-type]
    elif isinstance(op, scf.ForOp):
        body = op.body.block
        for i, arg in enumerate(body.args[1:]):
            if isinstance(arg.type, TensorType):
                yield op, 3 + i, lay(arg)  # type: ignore[arg-type]
                yield body.last_op, i, lay(arg)  # type: ignore[arg-type]
    elif isinstance(op, scf.WhileOp):
        before, after = op.before_region.block, op.after_region.block
        cond = before.last_op
        for i, arg in enumerate(before.args):
            if isinstance(arg.type, TensorType):
                yield op, i, lay(arg)  # type: ignore[arg-type]
                yield after.last_op, i, lay(arg)  # type: ignore[arg-type]
        for i, arg in enumerate(after.args):
            if isinstance(arg.type, TensorType):
                yield cond, 1 + i, lay(arg)  # type: ignore[arg-type]
    elif isinstance(op, scf.IfOp):
        for i, r in enumerate(op.results):
            if isinstance(r.type, TensorType):
                for region in op.regions:
                    for b in region.blocks:
                        yield b.last_op, i, lay(r)  # type: ignore[arg-type]


def check_layouts(func: Operation, staged_warps: int | None) -> None:
    """Every operand in the layout its user needs, once conversions are placed and producers
    remade: lower-to-ptx trusts this (a map reads its inputs' registers in its own layout's
    order), so a slip here would read other elements' values, wrong results and no error."""
    for op in func.walk():
        for user, index, layout in needed_layouts(op, staged_warps):
            have = layout_of(user.operands[index].type)
            if have != layout:
                raise KaioCompileError(
                    f"tile-layout left operand {index} of {user.name} in layout {have}, not the {layout} it needs "
                    "(a compiler bug: please report it with this kernel)"
                )


# --------------------------------------------------------------------------- rewriting


class LayoutWriter:
    """Phase 2: retype every tile to its layout and convert operands where users need another."""

    def __init__(self, solver: LayoutSolver, staged_stores: bool = False):
        self.solver = solver
        self.staged_stores = staged_stores
        self.converts: list[tile.ConvertLayoutOp] = []
        self.undo: list[Callable[[], None]] = []
        """How to take back each IR change ``remake`` made, newest last (see ``remake``)."""

    def layout(self, v: SSAValue) -> TileLayout:
        return self.solver.get(v).layout

    def retype(self, values: list[SSAValue] | tuple[SSAValue, ...]) -> None:
        for v in values:
            if isinstance(v.type, TensorType) and layout_of(v.type) is None:
                layout = self.solver.choice.get(v)
                if layout is None:
                    continue
                new = Rewriter.replace_value_with_new_type(v, tile.tile_type(v.type.element_type, v.type.get_shape(), layout.layout))
                self.solver.choice[new] = layout

    def require(self, op: Operation, index: int, layout: Attribute) -> None:
        v = op.operands[index]
        if layout_of(v.type) == layout:
            return
        conv = tile.ConvertLayoutOp(v, layout)
        Rewriter.insert_op(conv, InsertPoint.before(op))
        op.operands[index] = conv.result
        self.converts.append(conv)

    def write_block(self, block: Block) -> None:
        self.retype(block.args)
        for op in list(block.ops):
            for region in op.regions:
                for b in region.blocks:
                    if not isinstance(op, tile.MapOp):
                        self.write_block(b)
            self.retype(op.results)
            self.requirements(op)

    def requirements(self, op: Operation) -> None:
        staged = self.solver.num_warps if self.staged_stores else None
        for user, index, layout in needed_layouts(op, staged):
            self.require(user, index, layout)

    # -- rematerialisation -------------------------------------------------------------

    def rematerialise(self) -> None:
        work = list(self.converts)
        while work:
            conv = work.pop()
            if conv.parent is None:
                continue
            src, want = conv.input, layout_of(conv.result.type)
            if layout_of(src.type) == want:
                conv.result.replace_all_uses_with(src)
                Rewriter.erase_op(conv)
                continue
            made = self.remake(src, want, depth=0)  # type: ignore[arg-type]
            self.undo.clear()  # what it did stays
            if made is not None:
                conv.result.replace_all_uses_with(made)
                Rewriter.erase_op(conv)
        for conv in reversed(self.converts):  # conversions a rematerialisation left without users
            if conv.parent is not None and not conv.result.uses:
                Rewriter.erase_op(conv)

    def remake(self, v: SSAValue, want: TileLayout, depth: int) -> SSAValue | None:
        """``v`` produced again directly in layout ``want``, or None if that is not cheap. A
        producer with other users is cloned (loads only when this is their one use: a second
        load would read memory twice).

        All or nothing: a map is remade input by input, in place where an input has no other
        user, and a later input can still fail (a load the clone of a shared producer now
        reads a second time). None therefore takes back every change made on the way, or the
        map would keep an input retyped to ``want`` while its result is not: lower-to-ptx reads
        a map's inputs register by register in the result's layout, so the mismatch reads
        other elements' values (wrong results, no error)."""
        mark = len(self.undo)
        made = self._remake(v, want, depth)
        if made is None:
            while len(self.undo) > mark:
                self.undo.pop()()
        return made

    def _remake(self, v: SSAValue, want: TileLayout, depth: int) -> SSAValue | None:
        owner = v.owner
        if depth > 6 or not isinstance(owner, Operation):
            return None
        if layout_of(v.type) == want:
            return v
        single = v.uses.get_length() == 1
        if isinstance(owner, tile.ConvertLayoutOp):
            return self.remake(owner.input, want, depth + 1)
        if isinstance(owner, tile.LoadOp) and not single:
            return None
        if not isinstance(owner, tile.SplatOp | tile.RangeOp | tile.LoadOp | tile.BroadcastOp | tile.ExpandDimsOp | tile.MapOp):
            return None
        if isinstance(owner, tile.BroadcastOp | tile.ExpandDimsOp) and not self._cheap(owner.input, depth + 1) and owner.input.uses.get_length() > 1 and not single:
            return None
        if isinstance(owner, tile.MapOp) and not all(self._cheap(x, depth + 1) for x in owner.inputs):
            return None
        if not single:  # keep the original for its other users
            owner = owner.clone()
            self._insert(owner, InsertPoint.after(v.owner))  # type: ignore[arg-type]
        if isinstance(owner, tile.BroadcastOp | tile.ExpandDimsOp):
            inner = want if isinstance(owner, tile.BroadcastOp) else SliceLayout(owner.axis.value.data, want)
            made = self.remake(owner.input, inner, depth + 1)
            if made is None:  # convert the smaller tile before it is broadcast, not after
                made = self.convert_before(owner, owner.input, inner)
            self._set_operand(owner, 0, made)
        elif isinstance(owner, tile.MapOp):
            for i, x in enumerate(list(owner.inputs)):
                made = self.remake(x, want, depth + 1)
                if made is None:
                    return None  # remake (the caller) takes back the inputs already remade
                self._set_operand(owner, i, made)
        return self._retyped(owner.results[0], want)

    def convert_before(self, user: Operation, value: SSAValue, layout: TileLayout) -> SSAValue:
        """``value`` in ``layout`` for ``user``, converting from the first value of a chain of
        conversions (one move, never two)."""
        while isinstance(value.owner, tile.ConvertLayoutOp):
            value = value.owner.input
        if layout_of(value.type) == layout:
            return value
        conv = tile.ConvertLayoutOp(value, layout)
        self._insert(conv, InsertPoint.before(user))
        self.converts.append(conv)  # rematerialise skips it if it is taken back (no parent)
        return conv.result

    # -- IR changes remake can take back -----------------------------------------------

    def _insert(self, op: Operation, where: InsertPoint) -> None:
        Rewriter.insert_op(op, where)
        self.undo.append(lambda: Rewriter.erase_op(op))

    def _set_operand(self, op: Operation, index: int, value: SSAValue) -> None:
        old = op.operands[index]
        op.operands[index] = value
        self.undo.append(lambda: op.operands.__setitem__(index, old))

    def _retyped(self, v: SSAValue, layout: TileLayout) -> SSAValue:
        old_type = v.type
        new = Rewriter.replace_value_with_new_type(v, tile.tile_type(old_type.element_type, old_type.get_shape(), layout))  # type: ignore[attr-defined]
        assert isinstance(new, OpResult)
        owner, index = new.op, new.index

        def take_back() -> None:
            Rewriter.replace_value_with_new_type(owner.results[index], old_type)

        self.undo.append(take_back)
        return new

    def _cheap(self, v: SSAValue, depth: int) -> bool:
        """Whether ``v`` can be made again in another layout without moving data."""
        owner = v.owner
        if depth > 6 or not isinstance(owner, Operation):
            return False
        if isinstance(owner, tile.SplatOp | tile.RangeOp | tile.ConvertLayoutOp):
            return True
        if isinstance(owner, tile.LoadOp):
            return v.uses.get_length() == 1
        if isinstance(owner, tile.BroadcastOp | tile.ExpandDimsOp):
            return self._cheap(owner.input, depth + 1)
        if isinstance(owner, tile.MapOp):
            return all(self._cheap(x, depth + 1) for x in owner.inputs)
        return False


UNLAID_TILE = OpRule(
    "a tile without a layout",
    lambda op: op.name.startswith("tile.") and any(
        isinstance(r.type, TensorType) and layout_of(r.type) is None for r in op.results
    ),
)


@dataclass(frozen=True)
class TileLayoutPass(ModulePass):
    name = "tile-layout"
    contract = PassContract(after=("fuse-tile-maps",), removes=(UNLAID_TILE,))

    mma: bool = True
    """Tensor-core (mma.sync) accumulator layouts for f16/bf16 (and 8-bit integer or fp8) dots;
    false: blocked (FMA; 16-bit and f32 operands only)."""

    warps: tuple[int, ...] = (0, 0)
    """The mma warp grid WM,WN; 0,0 picks one from the tile shape."""

    wgmma: bool = False
    """Warp grid [num_warps, 1] for the dots Hopper's wgmma can take (with warps=0,0)."""

    staged_stores: bool = True
    """Stores of 16-bit mma accumulator tiles go out as 16-byte row vectors, through shared memory."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if len(self.warps) != 2:
            raise KaioCompileError("tile-layout takes warps=WM,WN")
        for func in kernel.kernel_funcs(op):
            for view in [o for o in func.walk() if isinstance(o, tile.ViewOp)]:
                view.align = tile.IntegerAttr(view_alignment(view), tile.i64)
            threads = func.block_shape[0] * func.block_shape[1] * func.block_shape[2]
            if threads % 32:
                raise KaioCompileError(f"tile kernels run whole warps; this one has {threads} threads")
            solver = LayoutSolver(threads // 32, self.mma, (self.warps[0], self.warps[1]), self.wgmma)
            solver.solve_block(func.body.block)
            writer = LayoutWriter(solver, self.staged_stores)
            writer.write_block(func.body.block)
            writer.rematerialise()
            check_layouts(func, threads // 32 if self.staged_stores else None)
