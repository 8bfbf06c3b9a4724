"""The ``smem`` dialect: shared-memory tile buffers with a layout, and global->shared copies.

A buffer holds a row-major rows x cols tile (optionally a ring of ``stages`` of them, the
leading dimension). Its layout maps (row, col) to a byte offset so that warps hit distinct
banks:

- ``none``: plain row-major;
- ``pad N``: each row padded by N elements (shifts consecutive rows across banks);
- ``swizzle``: the 16-byte chunks of each 128-byte line are permuted by XOR with a row index,
  so the 8 rows ``ldmatrix`` reads at once, and the 8 chunks a quarter-warp writes with
  ``cp.async``, land in 8 different bank groups. No memory is wasted.
- ``wgmma``: the canonical swizzled layouts Hopper's ``wgmma`` reads through matrix descriptors
  (PTX ISA, "Shared memory matrix layout"). The tile is cut into column *panels* S bytes wide
  (S = 128 if a row's bytes are a multiple of 128, else 64 or 32): panel p holds columns
  [p*S/e, (p+1)*S/e) of every row, rows S bytes apart, panels one after the other. Inside each
  8-row group of a panel the 16-byte chunks are XORed with the row (the hardware's S-byte
  swizzle: address bits 4.. XOR bits 7..). For 128-byte rows this is exactly ``swizzle``. A
  panel is a valid wgmma operand whichever way it is read: K-major (rows = M or N, SBO = 8*S
  bytes between 8-row groups, k16 steps 32 bytes along the row) or MN-major (rows = K, SBO =
  8*S, LBO = one panel's bytes). Buffers are aligned to 1024 bytes (the swizzle works on
  absolute addresses) and need rows in multiples of 8. ``ldmatrix`` and ``cp.async`` stay
  conflict-free, so mma.sync and SIMT dots read it as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import I64, ArrayAttr, IntAttr, IntegerAttr, StringAttr, TensorType, i32, i64
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
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

from kaio.dialects.smem_layout_kinds import LAYOUT_KINDS
from kaio.dialects.tile import ViewType

WGMMA_SPANS = (128, 64, 32)  # swizzle spans of the wgmma layout, widest first


@irdl_attr_definition
class LayoutAttr(ParametrizedAttribute):
    """``#smem.layout<swizzle>``, ``#smem.layout<wgmma>``, ``#smem.layout<pad 8>`` or
    ``#smem.layout<none>``."""

    name = "smem.layout"
    kind: StringAttr
    amount: IntAttr

    def __init__(self, kind: str, amount: int = 0):
        super().__init__(StringAttr(kind), IntAttr(amount))

    def verify(self) -> None:
        if self.kind.data not in LAYOUT_KINDS:
            raise VerifyException(f"layout is one of {LAYOUT_KINDS}, not '{self.kind.data}'")
        if (self.kind.data == "pad") != (self.amount.data > 0):
            raise VerifyException("pad takes a positive element count; other layouts take none")

    def print_parameters(self, printer: Printer) -> None:
        amount = f" {self.amount.data}" if self.kind.data == "pad" else ""
        printer.print_string(f"<{self.kind.data}{amount}>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[StringAttr, IntAttr]:
        with parser.in_angle_brackets():
            kind = parser.parse_identifier()
            amount = parser.parse_integer() if kind == "pad" else 0
        return StringAttr(kind), IntAttr(amount)

    # -- the layout function --------------------------------------------------------------

    def row_bytes(self, cols: int, elem_bytes: int) -> int:
        """Distance in bytes between consecutive rows."""
        pad = self.amount.data if self.kind.data == "pad" else 0
        return (cols + pad) * elem_bytes

    def tile_bytes(self, rows: int, cols: int, elem_bytes: int) -> int:
        return rows * self.row_bytes(cols, elem_bytes)

    def swizzle_period(self, row_bytes: int) -> int:
        """Rows sharing one XOR pattern: the rows of one 128-byte line."""
        return max(1, 128 // row_bytes)

    def panel_span(self, cols: int, elem_bytes: int) -> int:
        """The wgmma layout's panel width (and swizzle span) in bytes for rows of ``cols``."""
        rb = cols * elem_bytes
        return next((s for s in WGMMA_SPANS if rb % s == 0), 0)

    def offset(self, row: int, col: int, cols: int, elem_bytes: int, rows: int = 0) -> int:
        """Byte offset of element (row, col) in one tile (the reference the lowering follows;
        the wgmma layout needs the tile's ``rows`` too)."""
        if self.kind.data == "wgmma":
            span = self.panel_span(cols, elem_bytes)
            cb = col * elem_bytes
            off = (cb // span) * rows * span + row * span + cb % span
            return off ^ (((off >> 7) & (span // 16 - 1)) << 4)
        rb = self.row_bytes(cols, elem_bytes)
        off = row * rb + col * elem_bytes
        if self.kind.data != "swizzle":
            return off
        f = (row // self.swizzle_period(rb)) % 8
        chunk = (off // 16) % 8
        return off - chunk * 16 + (chunk ^ f) * 16

    def alignment(self) -> int:
        """Bytes a buffer in this layout is aligned to."""
        return 1024 if self.kind.data == "wgmma" else 128

    def check_tile(self, cols: int, elem_bytes: int, rows: int = 8) -> None:
        rb = cols * elem_bytes
        if self.kind.data == "swizzle" and (rb % 16 or (rb % 128 and 128 % rb)):
            raise VerifyException(
                f"swizzle needs rows of 16..128 bytes dividing 128, or multiples of 128; got {rb}"
            )
        if self.kind.data == "wgmma" and (not self.panel_span(cols, elem_bytes) or rows % 8):
            raise VerifyException(
                f"the wgmma layout needs rows of a multiple of 32 bytes and a multiple of 8 rows; got {rows} rows of {rb} bytes"
            )


@irdl_attr_definition
class BufferType(ParametrizedAttribute, TypeAttribute):
    """``!smem.buffer<[stages x] rows x cols x elem, layout>`` in shared memory."""

    name = "smem.buffer"
    shape: ArrayAttr[IntAttr]
    element_type: Attribute
    layout: LayoutAttr

    def __init__(self, shape: Sequence[int], element_type: Attribute, layout: LayoutAttr):
        super().__init__(ArrayAttr([IntAttr(d) for d in shape]), element_type, layout)

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    @property
    def stages(self) -> int:
        return self.dims[0] if len(self.dims) == 3 else 1

    @property
    def tile(self) -> tuple[int, int]:
        rows, cols = self.dims[-2:]
        return rows, cols

    @property
    def elem_bytes(self) -> int:
        return max(self.element_type.bitwidth // 8, 1)  # type: ignore[attr-defined]

    @property
    def stage_bytes(self) -> int:
        rows, cols = self.tile
        return self.layout.tile_bytes(rows, cols, self.elem_bytes)

    @property
    def total_bytes(self) -> int:
        return self.stages * self.stage_bytes

    def single_stage(self) -> BufferType:
        return BufferType(self.tile, self.element_type, self.layout)

    def verify(self) -> None:
        if len(self.dims) not in (2, 3) or any(d <= 0 for d in self.dims):
            raise VerifyException(f"smem.buffer is [stages x] rows x cols, got {self.dims}")
        self.layout.check_tile(self.tile[1], self.elem_bytes, self.tile[0])

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string("x".join(str(d) for d in self.dims) + "x")
            printer.print_attribute(self.element_type)
            printer.print_string(", ")
            printer.print_attribute(self.layout)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[ArrayAttr[IntAttr], Attribute, Attribute]:
        with parser.in_angle_brackets():
            shape, elem = parser.parse_ranked_shape()
            parser.parse_punctuation(",")
            layout = parser.parse_attribute()
        return ArrayAttr([IntAttr(d) for d in shape]), elem, layout


@irdl_op_definition
class AllocOp(IRDLOperation):
    name = "smem.alloc"
    sym_name = prop_def(StringAttr)
    result = result_def(BufferType)
    assembly_format = "$sym_name attr-dict `:` type($result)"

    def __init__(self, name: str, buffer: BufferType):
        super().__init__(properties={"sym_name": StringAttr(name)}, result_types=[buffer])


@irdl_op_definition
class StageOp(IRDLOperation):
    """One stage of a ring buffer: ``smem.stage %ring[%i]``."""

    name = "smem.stage"
    ring = operand_def(BufferType)
    index = operand_def(i32)
    result = result_def(BufferType)
    traits = traits_def(Pure())
    assembly_format = "$ring `[` $index `]` attr-dict `:` type($ring) `->` type($result)"

    def __init__(self, ring: SSAValue, index: SSAValue):
        assert isinstance(ring.type, BufferType)
        super().__init__(operands=[ring, index], result_types=[ring.type.single_stage()])

    def verify_(self) -> None:
        ring = self.ring.type
        assert isinstance(ring, BufferType)
        if len(ring.dims) != 3 or self.result.type != ring.single_stage():
            raise VerifyException("smem.stage takes one stage of a [stages x rows x cols] buffer")


@irdl_op_definition
class AddressOp(IRDLOperation):
    """The 32-bit shared-memory address of a buffer's first byte (for wgmma descriptors)."""

    name = "smem.address"
    buffer = operand_def(BufferType)
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "$buffer attr-dict `:` type($buffer)"

    def __init__(self, buffer: SSAValue):
        super().__init__(operands=[buffer], result_types=[i32])


def check_copy(src: Attribute, dst: Attribute, vec: int) -> None:
    """A tile copy moves a whole view into a single-stage buffer of the same shape."""
    if not isinstance(src, ViewType) or not isinstance(dst, BufferType):
        raise VerifyException("copies go from a tile.view to an smem.buffer")
    if len(dst.dims) != 2 or src.dims != dst.dims or src.element_type != dst.element_type:
        raise VerifyException(f"copy shapes differ: {src} -> {dst}")
    if vec < 1 or vec & (vec - 1) or dst.tile[1] % vec or vec * dst.elem_bytes > 16:
        raise VerifyException(f"vec={vec} must be a power of two dividing the row, at most 16 bytes")


class TileCopy(IRDLOperation):
    """Copy a global tile into shared memory, ``vec`` elements (at most 16 bytes) per access,
    all threads of the block together; elements outside the matrix bounds read as zero."""

    src = operand_def(ViewType)
    dst = operand_def(BufferType)
    vec = prop_def(IntegerAttr[I64])
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$src `->` $dst `vec` $vec attr-dict `:` type($src) `->` type($dst)"

    def __init__(self, src: SSAValue, dst: SSAValue, vec: int):
        super().__init__(operands=[src, dst], properties={"vec": IntegerAttr(vec, i64)})

    def verify_(self) -> None:
        check_copy(self.src.type, self.dst.type, self.vec.value.data)


@irdl_op_definition
class CopyOp(TileCopy):
    """Synchronous: the data is in shared memory once every thread passed the next barrier."""

    name = "smem.copy"


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Every thread writes its elements of a tile into a single-stage buffer of its shape
    (the data is there for all once every thread passed the next barrier)."""

    name = "smem.store"
    value = operand_def(TensorType)
    dst = operand_def(BufferType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `->` $dst attr-dict `:` type($value) `->` type($dst)"

    def __init__(self, value: SSAValue, dst: SSAValue):
        super().__init__(operands=[value, dst])

    def verify_(self) -> None:
        t, dst = self.value.type, self.dst.type
        assert isinstance(t, TensorType) and isinstance(dst, BufferType)
        if len(dst.dims) != 2 or tuple(t.get_shape()) != dst.dims or t.element_type != dst.element_type:
            raise VerifyException(f"storing {t} into {dst}: shapes or types differ")


Smem = Dialect("smem", [AllocOp, StageOp, AddressOp, CopyOp, StoreOp], [LayoutAttr, BufferType])
