"""The ``tile`` dialect: a matmul split into CTA tiles, warp tiles and a K loop.

``tile.view`` names a rectangle of a row-major matrix in global memory (with the matrix bounds,
so edge tiles can be masked). ``tile.mma`` is one warp's share of a CTA tile product:
``acc += A[warp rows, :] @ B[:, warp cols]``, where A and B are CTA tiles (global views, or
shared buffers once ``promote-to-shared`` ran). ``!tile.acc`` is a warp's accumulator tile; how
its elements spread over lanes is decided by the lowering (``lower-to-mma-sync`` turns it into
mma fragments; without it, lower-to-ptx uses a SIMT layout).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import I64, ArrayAttr, IntAttr, IntegerAttr, f32, i32, i64
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure
from xdsl.utils.exceptions import VerifyException

from kaio.dialects.kernel import ArrayType


class _ShapedTile(ParametrizedAttribute, TypeAttribute):
    """``<64x32xf16>``: a 2-D shape and an element type."""

    shape: ArrayAttr[IntAttr]
    element_type: Attribute

    def __init__(self, shape: Sequence[int], element_type: Attribute):
        super().__init__(ArrayAttr([IntAttr(d) for d in shape]), element_type)

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    def verify(self) -> None:
        if len(self.dims) != 2 or any(d <= 0 for d in self.dims):
            raise VerifyException(f"{self.name} needs a positive 2-D shape, got {self.dims}")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string("x".join(str(d) for d in self.dims) + "x")
            printer.print_attribute(self.element_type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[ArrayAttr[IntAttr], Attribute]:
        with parser.in_angle_brackets():
            shape, elem = parser.parse_ranked_shape()
        return ArrayAttr([IntAttr(d) for d in shape]), elem


@irdl_attr_definition
class ViewType(_ShapedTile):
    """A rows x cols rectangle of a row-major matrix in global memory."""

    name = "tile.view"


@irdl_attr_definition
class AccType(_ShapedTile):
    """One warp's accumulator tile."""

    name = "tile.acc"


def tile_shape(t: Attribute) -> tuple[int, int]:
    """Shape of a tile operand: a global view or a (single-stage) shared buffer."""
    dims = getattr(t, "dims", None)
    if dims is None or len(dims) != 2:
        raise VerifyException(f"expected a 2-D tile operand, got {t}")
    return dims[0], dims[1]


def tile_element(t: Attribute) -> Attribute:
    return t.element_type  # type: ignore[attr-defined]


@irdl_op_definition
class ViewOp(IRDLOperation):
    """``tile.view %a[%row, %col] bounds [%rows, %cols] stride %ld align N``: the tile whose
    top-left element is ``a[row * ld + col]``; elements at or past (rows, cols) are outside the
    matrix. ``align``: every row of the matrix starts at an element index that is a multiple
    of N, and ``col`` is one too (so copies may move N elements at once)."""

    name = "tile.view"
    array = operand_def(ArrayType)
    row = operand_def(i32)
    col = operand_def(i32)
    rows = operand_def(i32)
    cols = operand_def(i32)
    ld = operand_def(i32)
    align = prop_def(IntegerAttr[I64])
    result = result_def(ViewType)
    traits = traits_def(Pure())
    assembly_format = (
        "$array `[` $row `,` $col `]` `bounds` `[` $rows `,` $cols `]` `stride` $ld "
        "`align` $align attr-dict `:` type($array) `->` type($result)"
    )

    def __init__(self, array: SSAValue, row: SSAValue, col: SSAValue, rows: SSAValue,
                 cols: SSAValue, ld: SSAValue, shape: Sequence[int], align: int = 1):  # fmt: skip
        assert isinstance(array.type, ArrayType)
        super().__init__(
            operands=[array, row, col, rows, cols, ld],
            result_types=[ViewType(shape, array.type.element_type)],
            properties={"align": IntegerAttr(align, i64)},
        )

    def verify_(self) -> None:
        assert isinstance(self.array.type, ArrayType)
        if self.array.type.element_type != self.result.type.element_type:
            raise VerifyException("view element type must match the array's")


@irdl_op_definition
class ZeroOp(IRDLOperation):
    """A warp accumulator tile of zeros."""

    name = "tile.zero"
    result = result_def(AccType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, shape: Sequence[int], element_type: Attribute = f32):
        super().__init__(result_types=[AccType(shape, element_type)])


@irdl_op_definition
class MmaOp(IRDLOperation):
    """``acc += A[warp_row : warp_row + WM, :] @ B[:, warp_col : warp_col + WN]`` for one warp.

    A is a BMxBK and B a BKxBN CTA tile (global views or shared buffers); acc is WMxWN.
    """

    name = "tile.mma"
    T: ClassVar = VarConstraint("T", base(AccType))
    a = operand_def()
    b = operand_def()
    acc = operand_def(T)
    warp_row = operand_def(i32)
    warp_col = operand_def(i32)
    result = result_def(T)
    traits = traits_def(MemoryReadEffect())
    assembly_format = (
        "$a `,` $b `,` $acc `warp` `[` $warp_row `,` $warp_col `]` attr-dict "
        "`:` type($a) `,` type($b) `,` type($acc)"
    )

    def __init__(self, a: SSAValue, b: SSAValue, acc: SSAValue, warp_row: SSAValue, warp_col: SSAValue):
        super().__init__(operands=[a, b, acc, warp_row, warp_col], result_types=[acc.type])

    def verify_(self) -> None:
        bm, bk = tile_shape(self.a.type)
        bk2, bn = tile_shape(self.b.type)
        wm, wn = tile_shape(self.acc.type)
        if bk != bk2:
            raise VerifyException(f"A is {bm}x{bk} but B is {bk2}x{bn}: K differs")
        if wm > bm or wn > bn or bm % wm or bn % wn:
            raise VerifyException(f"warp tile {wm}x{wn} must evenly divide the CTA tile {bm}x{bn}")
        if tile_element(self.a.type) != tile_element(self.b.type):
            raise VerifyException("A and B tiles must have the same element type")
        if self.result.type != self.acc.type:
            raise VerifyException("result type must be the accumulator type")


class AccumulatorStore(IRDLOperation):
    """Base of the epilogue ops: ``C[row.., col..] = alpha * acc + beta * C`` for an accumulator
    whose top-left sits at (row, col) inside the C view; elements outside its bounds are
    skipped (C is only read where beta != 0)."""

    acc = operand_def()
    c = operand_def(ViewType)
    row = operand_def(i32)
    col = operand_def(i32)
    alpha = operand_def(f32)
    beta = operand_def(f32)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = (
        "$acc `,` $c `[` $row `,` $col `]` `alpha` $alpha `beta` $beta attr-dict "
        "`:` type($acc) `,` type($c)"
    )

    def __init__(self, acc: SSAValue, c: SSAValue, row: SSAValue, col: SSAValue,
                 alpha: SSAValue, beta: SSAValue):  # fmt: skip
        super().__init__(operands=[acc, c, row, col, alpha, beta])


@irdl_op_definition
class StoreOp(AccumulatorStore):
    """Epilogue of a warp's accumulator tile; (row, col) is the warp tile's origin."""

    name = "tile.store"

    def verify_(self) -> None:
        if not isinstance(self.acc.type, AccType):
            raise VerifyException("tile.store stores a !tile.acc")
        wm, wn = tile_shape(self.acc.type)
        bm, bn = tile_shape(self.c.type)
        if wm > bm or wn > bn:
            raise VerifyException(f"warp tile {wm}x{wn} larger than the C tile {bm}x{bn}")


Tile = Dialect("tile", [ViewOp, ZeroOp, MmaOp, StoreOp], [ViewType, AccType])
