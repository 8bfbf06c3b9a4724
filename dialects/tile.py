"""The ``tile`` dialect: values owned by a whole CTA (a *program* of a tile kernel).

A tile is a builtin ``tensor<64x32xf16>`` whose dims are powers of two; after ``tile-layout``
its encoding says how its elements spread over the threads (``kaio.dialects.tile_layout``).
Scalars are ordinary ``i32``/``f32``... values, the same in every thread.

- Views: ``tile.view`` names a rectangle of a global array (offsets, bounds, strides: elements
  at or past the bounds are outside the array); ``tile.load``/``tile.store`` move a whole view,
  masked by the bounds. ``tile.gather``/``tile.scatter`` take an index tile and a mask tile.
- Making tiles: ``tile.range`` (0..n-1), ``tile.splat`` (one scalar everywhere).
- Elementwise code: ``tile.map`` applies its region (ordinary scalar ``arith``/``math`` ops on
  block arguments, one per tile operand, and any scalar from outside) to every element.
- Shapes: ``tile.broadcast`` (size-1 dims grow), ``tile.expand_dims``, ``tile.trans``.
- Atomics: ``tile.atomic_rmw``/``tile.atomic_cas`` on an index tile (one atomic per element,
  done once however many threads hold copies of it; the result holds the old values) or on
  scalars (one atomic per program).
- ``tile.reduce`` along one axis (sum/max/min); ``tile.dot`` ``acc + a @ b``; and
  ``tile.convert_layout``, which only ``tile-layout`` inserts, where a value must move between
  threads.

``tile.dot`` operands are tiles until ``promote-to-shared`` stages them in shared buffers
(``smem.buffer``; ``transposed`` says the buffer holds the operand's transpose).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    AnyFloat,
    ArrayAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    f8E4M3FN,
    f8E5M2,
    f32,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, ParametrizedAttribute, Region, SSAValue, TypeAttribute
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    VarConstraint,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, MemoryReadEffect, MemoryWriteEffect, Pure
from xdsl.utils.exceptions import VerifyException

from kaio.dialects.kernel import _ATOMIC_COMBINES, ArrayType, Combine, CombineAttr, _check_combine
from kaio.dialects.tile_layout import BlockedLayout, MmaLayout, SliceLayout, layout_of


def is_pow2(n: int) -> bool:
    return n >= 1 and not n & (n - 1)


def tile_type(element_type: Attribute, shape: Sequence[int], layout: Attribute | None = None) -> TensorType:
    if layout is None:
        return TensorType(element_type, list(shape))
    return TensorType(element_type, list(shape), layout)


def shape_of(t: Attribute) -> tuple[int, ...]:
    if isinstance(t, TensorType):
        return tuple(t.get_shape())
    dims = getattr(t, "dims", None)
    if dims is None:
        raise VerifyException(f"expected a tile, got {t}")
    return tuple(dims)


def element_of(t: Attribute) -> Attribute:
    return t.element_type  # type: ignore[attr-defined]


def check_tile(t: Attribute, what: str = "tile") -> TensorType:
    if not isinstance(t, TensorType):
        raise VerifyException(f"{what} must be a tensor, got {t}")
    shape = t.get_shape()
    if not 1 <= len(shape) <= 2 or not all(is_pow2(d) for d in shape):
        raise VerifyException(f"{what} dims must be 1 or 2 powers of two, got {list(shape)}")
    return t


# --------------------------------------------------------------------------- views


@irdl_attr_definition
class ViewType(ParametrizedAttribute, TypeAttribute):
    """``!tile.view<64x32xf16>``: a rectangle of a global array."""

    name = "tile.view"
    shape: ArrayAttr[IntAttr]
    element_type: Attribute

    def __init__(self, shape: Sequence[int], element_type: Attribute):
        super().__init__(ArrayAttr([IntAttr(d) for d in shape]), element_type)

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    def verify(self) -> None:
        if not 1 <= len(self.dims) <= 2 or any(d <= 0 for d in self.dims):
            raise VerifyException(f"{self.name} needs a positive 1-D or 2-D shape, got {self.dims}")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string("x".join(str(d) for d in self.dims) + "x")
            printer.print_attribute(self.element_type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[ArrayAttr[IntAttr], Attribute]:
        with parser.in_angle_brackets():
            shape, elem = parser.parse_ranked_shape()
        return ArrayAttr([IntAttr(d) for d in shape]), elem


@irdl_op_definition
class ViewOp(IRDLOperation):
    """``tile.view %a[%row, %col] bounds [%rows, %cols] strides [%ld, %one] align N``: element
    (i, j) of the view is ``a[(row + i) * ld + (col + j) * one]``, outside the array where
    ``row + i >= rows`` or ``col + j >= cols``. ``align``: a proven power of two (in elements)
    that the array's base, the row stride, the last offset and the last bound are multiples of,
    with a last stride of 1 (so accesses may move that many elements at once)."""

    name = "tile.view"
    array = operand_def(ArrayType)
    offsets = var_operand_def(i32)
    bounds = var_operand_def(i32)
    strides = var_operand_def(i32)
    align = prop_def(IntegerAttr[I64])
    result = result_def(ViewType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())
    assembly_format = (
        "$array `[` $offsets `]` `bounds` `[` $bounds `]` `strides` `[` $strides `]` "
        "`align` $align attr-dict `:` type($array) `->` type($result)"
    )

    def __init__(self, array: SSAValue, offsets: Sequence[SSAValue], bounds: Sequence[SSAValue],
                 strides: Sequence[SSAValue], shape: Sequence[int], align: int = 1):  # fmt: skip
        assert isinstance(array.type, ArrayType)
        super().__init__(
            operands=[array, list(offsets), list(bounds), list(strides)],
            result_types=[ViewType(shape, array.type.element_type)],
            properties={"align": IntegerAttr(align, i64)},
        )

    @property
    def rank(self) -> int:
        return len(self.offsets)

    def verify_(self) -> None:
        assert isinstance(self.array.type, ArrayType)
        if self.array.type.element_type != self.result.type.element_type:
            raise VerifyException("view element type must match the array's")
        n = len(self.result.type.dims)
        if not len(self.offsets) == len(self.bounds) == len(self.strides) == n:
            raise VerifyException(f"a rank-{n} view takes {n} offsets, bounds and strides")
        if not is_pow2(self.align.value.data):
            raise VerifyException("align must be a power of two")


@irdl_op_definition
class LoadOp(IRDLOperation):
    """The elements of a view (``other`` where outside the array)."""

    name = "tile.load"
    view = operand_def(ViewType)
    other = operand_def()
    result = result_def(TensorType)
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$view `other` $other attr-dict `:` type($view) `,` type($other) `->` type($result)"

    def __init__(self, view: SSAValue, other: SSAValue, layout: Attribute | None = None):
        vt = view.type
        assert isinstance(vt, ViewType)
        super().__init__(operands=[view, other], result_types=[tile_type(vt.element_type, vt.dims, layout)])

    def verify_(self) -> None:
        t = check_tile(self.result.type)
        vt = self.view.type
        assert isinstance(vt, ViewType)
        if tuple(t.get_shape()) != vt.dims or t.element_type != vt.element_type:
            raise VerifyException(f"loading a {vt} gives a tile of its shape and type, not {t}")
        if self.other.type != vt.element_type:
            raise VerifyException("`other` has the view's element type")


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Write a tile into a view (only the elements inside the array)."""

    name = "tile.store"
    view = operand_def(ViewType)
    value = operand_def(TensorType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `,` $view attr-dict `:` type($value) `,` type($view)"

    def __init__(self, view: SSAValue, value: SSAValue):
        super().__init__(operands=[view, value])

    def verify_(self) -> None:
        t = check_tile(self.value.type)
        vt = self.view.type
        assert isinstance(vt, ViewType)
        if tuple(t.get_shape()) != vt.dims or t.element_type != vt.element_type:
            raise VerifyException(f"storing {t} into a {vt}: shapes or types differ")


def _check_gather(array: Attribute, index: Attribute, mask: Attribute, value: Attribute) -> None:
    assert isinstance(array, ArrayType)
    shape = shape_of(check_tile(index, "the index"))
    if element_of(index) != i32:
        raise VerifyException("gather/scatter indices are i32 tiles")
    if shape_of(mask) != shape or element_of(mask) != i1:
        raise VerifyException("the mask is a bool tile of the index's shape")
    if shape_of(value) != shape or element_of(value) != array.element_type:
        raise VerifyException("the values have the index's shape and the array's element type")


@irdl_op_definition
class GatherOp(IRDLOperation):
    """``result[i] = mask[i] ? array[index[i]] : other``."""

    name = "tile.gather"
    array = operand_def(ArrayType)
    index = operand_def(TensorType)
    mask = operand_def(TensorType)
    other = operand_def()
    result = result_def(TensorType)
    traits = traits_def(MemoryReadEffect())
    assembly_format = (
        "$array `[` $index `]` `mask` $mask `other` $other attr-dict `:` type($array) `,` "
        "type($index) `,` type($mask) `,` type($other) `->` type($result)"
    )

    def __init__(self, array: SSAValue, index: SSAValue, mask: SSAValue, other: SSAValue):
        assert isinstance(array.type, ArrayType) and isinstance(index.type, TensorType)
        t = tile_type(array.type.element_type, index.type.get_shape(), layout_of(index.type))
        super().__init__(operands=[array, index, mask, other], result_types=[t])

    def verify_(self) -> None:
        _check_gather(self.array.type, self.index.type, self.mask.type, self.result.type)


@irdl_op_definition
class ScatterOp(IRDLOperation):
    """``array[index[i]] = value[i]`` where ``mask[i]``."""

    name = "tile.scatter"
    array = operand_def(ArrayType)
    index = operand_def(TensorType)
    value = operand_def(TensorType)
    mask = operand_def(TensorType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = (
        "$value `,` $array `[` $index `]` `mask` $mask attr-dict `:` type($value) `,` "
        "type($array) `,` type($index) `,` type($mask)"
    )

    def __init__(self, array: SSAValue, index: SSAValue, value: SSAValue, mask: SSAValue):
        super().__init__(operands=[array, index, value, mask])

    def verify_(self) -> None:
        assert isinstance(self.array.type, ArrayType)
        if not self.array.type.mutable:
            raise VerifyException("tile.scatter writes a mutable array")
        _check_gather(self.array.type, self.index.type, self.mask.type, self.value.type)


def _check_atomic(op: IRDLOperation, array: Attribute, index: Attribute, mask: Attribute,
                  values: Sequence[Attribute], result: Attribute) -> None:  # fmt: skip
    """Tiles of the index's shape (or scalars, for one atomic per program) of the array's type."""
    assert isinstance(array, ArrayType)
    if not array.mutable:
        raise VerifyException(f"{op.name} updates a mutable array")
    elem = array.element_type
    if isinstance(index, TensorType):
        _check_gather(array, index, mask, result)
        for v in values:
            if shape_of(v) != shape_of(index) or element_of(v) != elem:
                raise VerifyException("the values have the index's shape and the array's element type")
    elif index != i32 or mask != i1 or any(v != elem for v in (*values, result)):
        raise VerifyException("a scalar atomic takes an i32 index, an i1 mask and values of the array's type")


@irdl_op_definition
class AtomicRMWOp(IRDLOperation):
    """``old = array[index]; array[index] = combine(old, value)`` atomically, where ``mask``:
    per element of an index tile (by one thread each), or once per program for scalars. The
    result holds the old values (the zero of the type where the mask is false)."""

    name = "tile.atomic_rmw"
    T: ClassVar = VarConstraint("T", AnyAttr())
    combine = prop_def(CombineAttr)
    array = operand_def(ArrayType)
    index = operand_def()
    value = operand_def(T)
    mask = operand_def()
    result = result_def(T)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = (
        "$combine $value `,` $array `[` $index `]` `mask` $mask attr-dict `:` type($value) `,` "
        "type($array) `,` type($index) `,` type($mask)"
    )

    def __init__(self, combine: Combine, array: SSAValue, index: SSAValue, value: SSAValue, mask: SSAValue):
        super().__init__(
            operands=[array, index, value, mask], result_types=[value.type],
            properties={"combine": CombineAttr(combine)},
        )  # fmt: skip

    def verify_(self) -> None:
        _check_atomic(self, self.array.type, self.index.type, self.mask.type, [self.value.type], self.result.type)
        elem = self.array.type.element_type  # type: ignore[attr-defined]
        _check_combine(self.combine.data, elem, _ATOMIC_COMBINES)


@irdl_op_definition
class AtomicCasOp(IRDLOperation):
    """``old = array[index]; if old == compare: array[index] = value`` atomically, where
    ``mask`` (per element of an index tile, or once per program); the result holds the olds."""

    name = "tile.atomic_cas"
    T: ClassVar = VarConstraint("T", AnyAttr())
    array = operand_def(ArrayType)
    index = operand_def()
    compare = operand_def(T)
    value = operand_def(T)
    mask = operand_def()
    result = result_def(T)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = (
        "$compare `,` $value `,` $array `[` $index `]` `mask` $mask attr-dict `:` type($value) `,` "
        "type($array) `,` type($index) `,` type($mask)"
    )

    def __init__(self, array: SSAValue, index: SSAValue, compare: SSAValue, value: SSAValue, mask: SSAValue):
        super().__init__(operands=[array, index, compare, value, mask], result_types=[value.type])

    def verify_(self) -> None:
        _check_atomic(self, self.array.type, self.index.type, self.mask.type, [self.compare.type, self.value.type], self.result.type)
        if not isinstance(self.array.type.element_type, IntegerType):  # type: ignore[attr-defined]
            raise VerifyException("tile.atomic_cas compares and stores integers")


TileAtomic = AtomicRMWOp | AtomicCasOp


@irdl_op_definition
class MultipleOfOp(IRDLOperation):
    """``x``, known to be a multiple of ``n`` (``kt.multiple_of``): a fact for vectorisation."""

    name = "tile.multiple_of"
    input = operand_def(i32)
    n = prop_def(IntegerAttr[I64])
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "$input `,` $n attr-dict"

    def __init__(self, input: SSAValue, n: int):
        super().__init__(operands=[input], result_types=[i32], properties={"n": IntegerAttr(n, i64)})


# --------------------------------------------------------------------------- making tiles


@irdl_op_definition
class RangeOp(IRDLOperation):
    """``tile.range : tensor<Nxi32>``: 0, 1, ..., N-1."""

    name = "tile.range"
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, n: int, layout: Attribute | None = None):
        super().__init__(result_types=[tile_type(i32, (n,), layout)])

    def verify_(self) -> None:
        t = check_tile(self.result.type)
        if len(t.get_shape()) != 1 or t.element_type != i32:
            raise VerifyException("tile.range makes a 1-D i32 tile")


@irdl_op_definition
class SplatOp(IRDLOperation):
    """A tile with one scalar in every element."""

    name = "tile.splat"
    value = operand_def()
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `:` type($value) `->` type($result)"

    def __init__(self, value: SSAValue, shape: Sequence[int], layout: Attribute | None = None):
        super().__init__(operands=[value], result_types=[tile_type(value.type, shape, layout)])

    def verify_(self) -> None:
        t = check_tile(self.result.type)
        if t.element_type != self.value.type:
            raise VerifyException("a splat tile has its scalar's type")


@irdl_op_definition
class MapOp(IRDLOperation):
    """Apply the region (scalar ops on one element of each operand) to every element."""

    name = "tile.map"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(Pure())

    def __init__(self, inputs: Sequence[SSAValue], result_type: Attribute, body: Region):
        super().__init__(operands=[list(inputs)], result_types=[result_type], regions=[body])

    @property
    def block(self) -> Block:
        return self.body.block

    def verify_(self) -> None:
        t = check_tile(self.result.type)
        shape = t.get_shape()
        for x in self.inputs:
            if tuple(check_tile(x.type).get_shape()) != tuple(shape):
                raise VerifyException(f"tile.map operands have the result's shape {list(shape)}, not {x.type}")
        args = [a.type for a in self.block.args]
        if args != [element_of(x.type) for x in self.inputs]:
            raise VerifyException("the region takes one element of each operand")
        last = self.block.last_op
        if not isinstance(last, YieldOp) or [v.type for v in last.operands] != [t.element_type]:
            raise VerifyException("the region yields one element of the result type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(" : ")
        printer.print_list([x.type for x in self.inputs], printer.print_attribute)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=True)
        printer.print_op_attributes(self.attributes, print_keyword=True)

    @classmethod
    def parse(cls, parser) -> MapOp:  # type: ignore[no-untyped-def]
        inputs = parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
        ) or []
        parser.parse_punctuation(":")
        types = []
        if inputs:
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation("->")
        result_type = parser.parse_type()
        body = parser.parse_region()
        attrs = parser.parse_optional_attr_dict_with_keyword()
        operands = parser.resolve_operands(inputs, types, parser.pos)
        op = cls(operands, result_type, body)
        if attrs is not None:
            op.attributes |= attrs.data
        return op


@irdl_op_definition
class YieldOp(IRDLOperation):
    name = "tile.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), HasParent(MapOp))
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


# --------------------------------------------------------------------------- shapes


class TileToTile(IRDLOperation):
    """Base of the ops that make one tile from another (shape or layout changes)."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"


@irdl_op_definition
class BroadcastOp(TileToTile):
    """Grow size-1 dims: ``tensor<1x64xf32> -> tensor<32x64xf32>``."""

    name = "tile.broadcast"

    def __init__(self, input: SSAValue, shape: Sequence[int], layout: Attribute | None = None):
        super().__init__(operands=[input], result_types=[tile_type(element_of(input.type), shape, layout)])

    def verify_(self) -> None:
        a, r = shape_of(check_tile(self.input.type)), shape_of(check_tile(self.result.type))
        if len(a) != len(r) or any(x != y and x != 1 for x, y in zip(a, r)):
            raise VerifyException(f"cannot broadcast {list(a)} to {list(r)}")


@irdl_op_definition
class ExpandDimsOp(IRDLOperation):
    """Insert a size-1 dim at ``axis``."""

    name = "tile.expand_dims"
    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input `axis` $axis attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, axis: int, layout: Attribute | None = None):
        shape = list(shape_of(input.type))
        shape.insert(axis, 1)
        super().__init__(
            operands=[input], properties={"axis": IntegerAttr(axis, i64)},
            result_types=[tile_type(element_of(input.type), shape, layout)],
        )  # fmt: skip

    def verify_(self) -> None:
        a = list(shape_of(check_tile(self.input.type)))
        a.insert(self.axis.value.data, 1)
        if tuple(a) != shape_of(check_tile(self.result.type)):
            raise VerifyException("expand_dims inserts one size-1 dim at axis")


@irdl_op_definition
class TransOp(TileToTile):
    """The transpose of a 2-D tile."""

    name = "tile.trans"

    def __init__(self, input: SSAValue, layout: Attribute | None = None):
        m, n = shape_of(input.type)
        super().__init__(operands=[input], result_types=[tile_type(element_of(input.type), (n, m), layout)])

    def verify_(self) -> None:
        a, r = shape_of(check_tile(self.input.type)), shape_of(check_tile(self.result.type))
        if len(a) != 2 or r != (a[1], a[0]):
            raise VerifyException("tile.trans swaps the two dims of a 2-D tile")


@irdl_op_definition
class ConvertLayoutOp(TileToTile):
    """The same tile, spread over the threads by another layout."""

    name = "tile.convert_layout"

    def __init__(self, input: SSAValue, layout: Attribute):
        t = input.type
        super().__init__(operands=[input], result_types=[tile_type(element_of(t), shape_of(t), layout)])

    def verify_(self) -> None:
        a, r = self.input.type, self.result.type
        if shape_of(a) != shape_of(r) or element_of(a) != element_of(r):
            raise VerifyException("convert_layout keeps the shape and the element type")


# --------------------------------------------------------------------------- math


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """Combine the elements along ``axis``: a 2-D tile gives a 1-D tile, a 1-D tile a scalar."""

    name = "tile.reduce"
    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    combine = prop_def(CombineAttr)
    result = result_def()
    traits = traits_def(Pure())
    assembly_format = "$combine $input `axis` $axis attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, axis: int, combine: CombineAttr, layout: Attribute | None = None):
        t = input.type
        shape = list(shape_of(t))
        del shape[axis]
        if shape and layout is None and layout_of(t) is not None:
            layout = SliceLayout(axis, layout_of(t))
        result = tile_type(element_of(t), shape, layout) if shape else element_of(t)
        super().__init__(
            operands=[input], result_types=[result],
            properties={"axis": IntegerAttr(axis, i64), "combine": combine},
        )  # fmt: skip

    def verify_(self) -> None:
        shape = list(shape_of(check_tile(self.input.type)))
        axis = self.axis.value.data
        if not 0 <= axis < len(shape):
            raise VerifyException(f"axis {axis} of a {len(shape)}-D tile")
        del shape[axis]
        r = self.result.type
        got = list(shape_of(r)) if isinstance(r, TensorType) else []
        if got != shape or (element_of(r) if isinstance(r, TensorType) else r) != element_of(self.input.type):
            raise VerifyException("the result has the input's type with the axis removed")
        t = element_of(self.input.type)
        if not isinstance(t, AnyFloat | IntegerType) or t == i1:
            raise VerifyException(f"cannot reduce {t} tiles")


def operand_shape(t: Attribute, transposed: bool) -> tuple[int, int]:
    """Shape of a dot operand (a tile, or a shared buffer holding it or its transpose)."""
    dims = t.tile if hasattr(t, "tile") else shape_of(t)  # type: ignore[attr-defined]
    if len(dims) != 2:
        raise VerifyException(f"dot operands are 2-D, got {t}")
    return (dims[1], dims[0]) if transposed else (dims[0], dims[1])


FP8_ELEMENTS: tuple[Attribute, ...] = (f8E4M3FN, f8E5M2)  # e4m3 (OCP "fn": no infinities) and e5m2


@irdl_op_definition
class DotOp(IRDLOperation):
    """``acc + a @ b`` with a (M, K), b (K, N) and acc (M, N) in f32 (or the input type); 8-bit
    integer operands accumulate in i32 (``unsigned`` says which of them are u8: the IR's i8 is
    signless), fp8 operands (e4m3 and e5m2 may mix) in f32."""

    name = "tile.dot"
    a = operand_def()
    b = operand_def()
    acc = operand_def(TensorType)
    transposed = opt_prop_def(ArrayAttr[IntAttr])  # [a, b]: the shared buffer holds the transpose
    unsigned = opt_prop_def(ArrayAttr[IntAttr])  # [a, b]: i8 operands read as u8
    result = result_def(TensorType)
    traits = traits_def(MemoryReadEffect())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$a `,` $b `,` $acc attr-dict `:` type($a) `,` type($b) `,` type($acc) `->` type($result)"

    def __init__(self, a: SSAValue, b: SSAValue, acc: SSAValue, transposed: tuple[bool, bool] = (False, False),
                 unsigned: tuple[bool, bool] = (False, False)):  # fmt: skip
        props = {"transposed": ArrayAttr([IntAttr(int(t)) for t in transposed])} if any(transposed) else {}
        if any(unsigned):
            props["unsigned"] = ArrayAttr([IntAttr(int(u)) for u in unsigned])
        super().__init__(operands=[a, b, acc], result_types=[acc.type], properties=props)

    @property
    def signs(self) -> tuple[bool, bool]:
        """(a, b) read as unsigned integers."""
        if self.unsigned is None:
            return (False, False)
        ua, ub = (bool(x.data) for x in self.unsigned.data)
        return ua, ub

    @property
    def trans(self) -> tuple[bool, bool]:
        if self.transposed is None:
            return (False, False)
        ta, tb = (bool(x.data) for x in self.transposed.data)
        return ta, tb

    def verify_(self) -> None:
        ta, tb = self.trans
        m, k = operand_shape(self.a.type, ta)
        k2, n = operand_shape(self.b.type, tb)
        acc = shape_of(check_tile(self.acc.type))
        if k != k2 or acc != (m, n):
            raise VerifyException(f"dot of {m}x{k} and {k2}x{n} into {acc[0]}x{acc[-1]}: shapes differ")
        ea, eb = element_of(self.a.type), element_of(self.b.type)
        if ea != eb and not (ea in FP8_ELEMENTS and eb in FP8_ELEMENTS):
            raise VerifyException("dot operands have one element type (e4m3 and e5m2 may mix)")
        if ea in FP8_ELEMENTS + (i8,) and element_of(self.acc.type) != (i32 if ea == i8 else f32):
            raise VerifyException(f"dot of {ea} operands accumulates in {'i32' if ea == i8 else 'f32'}")
        if self.result.type != self.acc.type:
            raise VerifyException("the result is like the accumulator")


Tile = Dialect(
    "tile",
    [
        ViewOp, LoadOp, StoreOp, GatherOp, ScatterOp, AtomicRMWOp, AtomicCasOp, MultipleOfOp,
        RangeOp, SplatOp, MapOp, YieldOp,
        BroadcastOp, ExpandDimsOp, TransOp, ConvertLayoutOp,
        ReduceOp, DotOp,
    ],
    [ViewType, BlockedLayout, MmaLayout, SliceLayout],
)  # fmt: skip
