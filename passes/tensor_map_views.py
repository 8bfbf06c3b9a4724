"""Which tile views a tensor map can describe, and the recipe the runtime builds it from.

A tensor map (Hopper's TMA) describes a whole tensor, so a pass can only use one for a view
whose tensor it can name at launch: the view's array is a kernel parameter, its extents and row
stride are integer expressions of scalar parameters (constants, ``+ - *``: :func:`host_expression`),
its last stride is 1, and its alignment (``align`` x element size >= 16 bytes) proves the
address and row stride are multiples of 16 bytes. A view of one group of S rows in a stack of
them (row offset ``g * S + r``, row bound ``g * S + S``: attention's heads, split-K's partial
tiles) gets a rank-3 map instead (columns, S rows, groups), so the group's bounds are the box's
(:func:`split_batch`). ``pipeline-tma`` loads through such maps, ``store-tma`` stores.

A box is at most one swizzle span wide (128 bytes: 64 f16), so a wider tile is several column
panels. Where the view's column bound and column offset are proven multiples of the panel
width, a copy can ask for a *paneled* map instead (``merge_panels``): the columns split in two
dimensions, the panel's elements (stride 1) and the panel index (stride one span), with the
rows between them, so one box (panel width, rows, panels) lands the panels one after another,
each swizzled, exactly as the boxes of the 2-D map would (CUTLASS's multimode TMA copies
describe a tile the same way). A ragged column bound keeps the 2-D map: there the last panel
would read the next row's first elements where the 2-D map reads zeros past the bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import BlockArgument, SSAValue

from kaio.compiled import TensorMapParam
from kaio.dialects import kernel, tile
from kaio.passes.int_builder import IndexBuilder
from kaio.dialects.stage_attrs import require_alignment
from kaio.passes.value_facts import divisibility

MAX_BOX = 256  # elements per box dimension
TMA_ALIGN = 16  # bytes a tensor map's base address and row strides must be multiples of
MAX_GROUPS = (1 << 31) - 1  # a batched map's outer extent: any group index the kernel computes

_HOST_OPS = {arith.AddiOp: "+", arith.SubiOp: "-", arith.MuliOp: "*"}


def host_expression(value: SSAValue, func: kernel.KernelFuncOp) -> str | None:
    """``value`` as an expression of the kernel's scalar parameters the runtime can evaluate at
    launch (see ``kaio.runtime.tensor_maps``), or None if it depends on anything else."""
    if isinstance(value, BlockArgument):
        if value.owner is func.body.block and not isinstance(value.type, kernel.ArrayType | kernel.TensorMapType):
            return func.param_names.data[value.index].data
        return None
    op = value.owner
    if isinstance(op, arith.ConstantOp):
        return str(op.value.value.data) if isinstance(op.value, IntegerAttr) else None
    if isinstance(op, tile.MultipleOfOp | arith.ExtSIOp | arith.ExtUIOp | arith.TruncIOp | arith.IndexCastOp):
        return host_expression(op.operands[0], func)
    symbol = _HOST_OPS.get(type(op))
    if symbol is None:
        return None
    left, right = (host_expression(x, func) for x in op.operands)
    return None if left is None or right is None else f"({left} {symbol} {right})"


@dataclass(frozen=True)
class Batch:
    """Row offset ``g * S + r`` (``offset``'s operand ``within_index`` is r; ``scale``'s operand
    ``group_index`` is g), row bound ``g * S + S``: the view is one group of S rows."""

    offset: arith.AddiOp
    within_index: int
    scale: arith.MuliOp
    group_index: int
    size: str  # S, as a host expression

    @property
    def within(self) -> SSAValue:
        return self.offset.operands[self.within_index]

    @property
    def group(self) -> SSAValue:
        return self.scale.operands[self.group_index]


def split_batch(row: SSAValue, bound: SSAValue, func: kernel.KernelFuncOp) -> Batch | None:
    """A view of one group of S rows of a stack of groups (a batch, a head): row offset
    ``g * S + r`` and row bound ``g * S + S``, with S an expression of the scalar parameters and
    g, r anything. Its map has rank 3 (columns, S rows, groups), so the group's bounds are the
    box's, and the box's coordinates are (column, r, g)."""
    offset, bound_op = row.owner, bound.owner
    if not isinstance(offset, arith.AddiOp) or not isinstance(bound_op, arith.AddiOp):
        return None
    for base_index in (0, 1):
        base = offset.operands[base_index]
        scale = base.owner
        if base not in bound_op.operands or not isinstance(scale, arith.MuliOp):
            continue
        extent = bound_op.rhs if bound_op.lhs is base else bound_op.lhs
        size = host_expression(extent, func)
        for group_index in (0, 1):
            if size is not None and host_expression(scale.operands[1 - group_index], func) == size:
                return Batch(offset, 1 - base_index, scale, group_index, size)
    return None


@dataclass
class MappedView:
    """A view as boxes of a tensor map: the map's recipe (its parameter name filled in when the
    parameter is added) and where a box's coordinates come from."""

    view: tile.ViewOp
    tensor_map: TensorMapParam
    batch: Batch | None
    panel_elems: int  # a panel's width in elements (the box's inner extent)
    panels_per_box: int = 1  # > 1: a paneled map, whose one box is that many panels

    @property
    def coords(self) -> tuple[SSAValue, ...]:
        """The tile's first element, innermost (the column) first, read off the ops as they are
        now (a pass may have replaced their operands since the plan was made)."""
        row, col = self.view.offsets
        if self.batch is None:
            return (col, row)
        return (col, self.batch.within, self.batch.group)

    def box_coords(self, ix: IndexBuilder, coords: Sequence[SSAValue], panel: int) -> list[SSAValue]:
        """The coordinates of the box that starts at the tile's ``panel``-th column panel, from
        :attr:`coords` (or values standing for them): the column moved by whole panels in a 2-D
        map; in a paneled one the column is the panel index, after the rows, and the box starts
        at the panel's first element."""
        col, row, *outer = coords
        if self.panels_per_box == 1:
            return [ix.add(col, ix.const(panel * self.panel_elems)) if panel else col, row, *outer]
        # the column is a proven multiple of the panel: an arithmetic shift divides it exactly,
        # a negative one too (a box may start left of the tensor: its panels there read zeros)
        shift = ix.const(self.panel_elems.bit_length() - 1)
        index = ix.b.insert(arith.ShRSIOp(col, shift)).result
        return [ix.const(0), row, ix.add(index, ix.const(panel)) if panel else index, *outer]


def map_view(view: object, func: kernel.KernelFuncOp, rows: int, span: int, elem_bytes: int,
             merge_panels: int = 1) -> MappedView | str:  # fmt: skip
    """The view as ``rows`` x ``span``-byte boxes (the span is the swizzle's too), or why no
    tensor map can describe it. ``merge_panels`` > 1: a tile that many panels wide, loaded as
    one box of a paneled map where the view's column bound and offset allow it (see the module
    doc; else the 2-D map's boxes, one a panel)."""
    if not isinstance(view, tile.ViewOp) or view.rank != 2:
        return "the source or destination is not a 2-D tile.view"
    array = view.array
    if not isinstance(array, BlockArgument) or array.owner is not func.body.block:
        return "a view's array is not a kernel parameter"
    if view.align.value.data * elem_bytes < TMA_ALIGN:
        return (f"a view's alignment ({view.align.value.data * elem_bytes} bytes: the array's base address "
                "and row stride as far as the launch proved them) does not prove 16-byte rows")
    box = (span // elem_bytes, rows)
    if max(box) > MAX_BOX:
        return f"a {rows} x {box[0]} box is larger than TMA's {MAX_BOX}"
    if host_expression(view.strides[1], func) != "1":
        return "a view's last stride is not 1"
    row = view.offsets[0]
    cols_bound, rows_bound, ld = (host_expression(v, func) for v in (view.bounds[1], view.bounds[0], view.strides[0]))
    if cols_bound is None or ld is None:
        return "a view's column bound or row stride is not an expression of the kernel's scalar parameters"
    name = func.param_names.data[array.index].data
    batch = None
    if rows_bound is None:
        batch = split_batch(row, view.bounds[0], func)
        if batch is None:
            return "a view's row bound is not an expression of the kernel's scalar parameters"
        rows_bound = batch.size
    # (extent, stride) of each dimension past the columns, innermost first
    outer = [(rows_bound, ld)] + ([(str(MAX_GROUPS), f"({rows_bound} * {ld})")] if batch else [])
    pe = box[0]  # a power of two: a swizzle span (32, 64, 128 bytes) over a power-of-two element size
    if merge_panels > 1 and merge_panels <= MAX_BOX and all(divisibility(v) >= pe for v in (view.bounds[1], view.offsets[1])):
        outer.insert(1, (f"({cols_bound} // {pe})", str(pe)))  # the panels: one span apart
        box, cols_bound = (pe, rows, merge_panels), str(pe)
    else:
        merge_panels = 1
    dims = (cols_bound, *(e for e, _ in outer))
    tmap = TensorMapParam("", name, dims, tuple(s for _, s in outer), (*box, *([1] if batch else [])), span)
    return MappedView(view, tmap, batch, pe, merge_panels)


def add_map_param(func: kernel.KernelFuncOp, mapped: MappedView) -> SSAValue:
    """A ``!kernel.tensor_map`` parameter built at launch from the view's recipe (named after
    its array: ``a_tmap``, ``a_tmap1``, ..). The launch checks the array's 16-byte alignment
    that :func:`map_view` took from the view, so a call that breaks it is refused naming the
    argument, before a map is encoded."""
    require_alignment(func, mapped.tensor_map.array, TMA_ALIGN)
    taken = {n.data for n in func.param_names.data}
    array = mapped.tensor_map.array
    name, i = f"{array}_tmap", 1
    while name in taken:
        name, i = f"{array}_tmap{i}", i + 1
    mapped.tensor_map = replace(mapped.tensor_map, name=name)
    return kernel.add_tensor_map_param(func, name, mapped.tensor_map.recipe())
