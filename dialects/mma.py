"""The ``mma`` dialect: warp-level tensor-core fragments for ``mma.sync.m16n8k16`` (16-bit
inputs) and ``mma.sync.m16n8k32`` (8-bit inputs: s8/u8 into s32, e4m3/e5m2 into f32).

A fragment is a matrix spread over the 32 lanes of a warp, each lane holding a few registers.
In bytes the two shapes are one layout: a 16x32-byte A block and a 32-byte x 8 B block, so
K per fragment is 32 / element bytes (``k_step``):

- ``!mma.frag<a, f16>``: a 16x16 A block, 4 x b32 per lane (2 halves each; 16x32 and 4 bytes
  each for ``si8``/``ui8``/``f8E4M3FN``/``f8E5M2``: integer fragments carry their signedness,
  which the shared buffers they load from, signless ``i8``, do not);
- ``!mma.frag<b, f16>``: a 16x8 B block (k x n), 2 x b32 per lane;
- ``!mma.frag<acc, f32>`` (``i32`` for integer inputs): a 16x8 accumulator, 4 x 32 bits per
  lane: lane L holds rows L/4 and L/4 + 8, columns 2*(L%4) and 2*(L%4) + 1.

``mma.load_a`` / ``mma.load_b`` read fragments from shared buffers with ``ldmatrix`` (``.trans``
for a row-major B tile or a transposed A; ``transposed`` says the buffer holds the operand's
transpose), ``mma.pack_a`` builds an A fragment from the registers of a tile in the
``#tile.mma<[WM, 1]>`` layout (an accumulator cast to f16/bf16: the accumulator layout of two
adjacent 16x8 blocks is the A layout of one 16x16 block, so no data moves between lanes; this
is how attention's probabilities feed ``p @ v`` without shared memory), ``mma.mma`` is one
``mma.sync``. ``mma.split`` / ``mma.join`` view an accumulator tile
in the ``#tile.mma`` layout as its fragments (each 4 of the tile's registers per thread) and
back: no data moves.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    bf16,
    f8E4M3FN,
    f8E5M2,
    f16,
    f32,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    ParsePropInAttrDict,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, Pure
from xdsl.utils.exceptions import VerifyException

from kaio.dialects.smem import BufferType
from kaio.dialects.tile_layout import MmaLayout, layout_of

ROLES = {"a": 4, "b": 2, "acc": 4}  # registers per lane
si8 = IntegerType(8, Signedness.SIGNED)
ui8 = IntegerType(8, Signedness.UNSIGNED)
# fragment element type -> its PTX type in mma.sync; families may mix A and B (s8 x u8, e4m3 x e5m2)
OPERAND_PTX: dict[Attribute, str] = {f16: "f16", bf16: "bf16", si8: "s8", ui8: "u8", f8E4M3FN: "e4m3", f8E5M2: "e5m2"}
FAMILY = {f16: "f16", bf16: "bf16", si8: "int8", ui8: "int8", f8E4M3FN: "fp8", f8E5M2: "fp8"}
BUFFER_ELEMENTS = (f16, bf16, i8, f8E4M3FN, f8E5M2)  # what fragments load from (ints signless)


def storage_of(elem: Attribute) -> Attribute:
    """The shared buffer element a fragment of ``elem`` loads from (integers are signless)."""
    return i8 if elem in (si8, ui8) else elem


def accumulator_of(elem: Attribute) -> Attribute:
    """Integer inputs accumulate in i32, float ones in f32."""
    return i32 if elem in (si8, ui8) else f32


def k_step(elem: Attribute) -> int:
    """K of one mma.sync on inputs of ``elem``: 32 bytes of K (m16n8k16 f16, m16n8k32 8-bit)."""
    return 32 // max(getattr(elem, "bitwidth", 16) // 8, 1)


def fragment_element(buffer_elem: Attribute, unsigned: bool) -> Attribute:
    """The fragment element type of an operand staged as ``buffer_elem``."""
    if buffer_elem == i8:
        return ui8 if unsigned else si8
    return buffer_elem


@irdl_attr_definition
class FragType(ParametrizedAttribute, TypeAttribute):
    """``!mma.frag<a, f16>``, ``!mma.frag<b, bf16>``, ``!mma.frag<acc, f32>``."""

    name = "mma.frag"
    role: StringAttr
    element_type: Attribute

    def __init__(self, role: str, element_type: Attribute):
        super().__init__(StringAttr(role), element_type)

    @property
    def registers(self) -> int:
        return ROLES[self.role.data]

    def verify(self) -> None:
        role = self.role.data
        if role not in ROLES:
            raise VerifyException(f"fragment role is one of {list(ROLES)}, not '{role}'")
        allowed = (f32, i32) if role == "acc" else tuple(OPERAND_PTX)
        if self.element_type not in allowed:
            raise VerifyException(f"{role} fragments hold {allowed}, not {self.element_type}")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(f"{self.role.data}, ")
            printer.print_attribute(self.element_type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[StringAttr, Attribute]:
        with parser.in_angle_brackets():
            role = parser.parse_identifier()
            parser.parse_punctuation(",")
            elem = parser.parse_type()
        return StringAttr(role), elem


def _check_buffer(buf: Attribute, row_multiple: int) -> BufferType:
    if not isinstance(buf, BufferType) or len(buf.dims) != 2:
        raise VerifyException("fragments load from a single-stage smem.buffer")
    if buf.element_type not in BUFFER_ELEMENTS:
        raise VerifyException(f"fragments load {BUFFER_ELEMENTS}, not {buf.element_type}")
    rows, cols = buf.tile
    if rows % row_multiple or cols % 16:
        raise VerifyException(f"buffer tile {rows}x{cols} is not made of 16x16 blocks")
    return buf


@irdl_op_definition
class ZeroOp(IRDLOperation):
    name = "mma.zero"
    result = result_def(FragType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self) -> None:
        super().__init__(result_types=[FragType("acc", f32)])


class _FragmentLoad(IRDLOperation):
    """(row, col) index the operand; with ``transposed`` the buffer holds its transpose."""

    buffer = operand_def(BufferType)
    row = operand_def(i32)
    col = operand_def(i32)
    transposed = opt_prop_def(IntegerAttr[I64])
    traits = traits_def(MemoryReadEffect())
    irdl_options = (ParsePropInAttrDict(),)

    @property
    def is_transposed(self) -> bool:
        return self.transposed is not None and bool(self.transposed.value.data)

    @staticmethod
    def props(transposed: bool) -> dict[str, IntegerAttr]:
        return {"transposed": IntegerAttr(1, i64)} if transposed else {}


@irdl_op_definition
class LoadAOp(_FragmentLoad):
    """The 16x16 A block whose top-left is (row, col) of the operand (``ldmatrix.x4``)."""

    name = "mma.load_a"
    result = result_def(FragType)
    assembly_format = "$buffer `[` $row `,` $col `]` attr-dict `:` type($buffer) `->` type($result)"

    def __init__(self, buffer: SSAValue, row: SSAValue, col: SSAValue, transposed: bool = False, element_type: Attribute | None = None):
        assert isinstance(buffer.type, BufferType)
        super().__init__(
            operands=[buffer, row, col], properties=self.props(transposed),
            result_types=[FragType("a", element_type or buffer.type.element_type)],
        )  # fmt: skip

    def verify_(self) -> None:
        buf = _check_buffer(self.buffer.type, 16)
        frag = self.result.type
        if not isinstance(frag, FragType) or frag.role.data != "a" or storage_of(frag.element_type) != buf.element_type:
            raise VerifyException("load_a yields an A fragment of the buffer's element type")


@irdl_op_definition
class LoadBOp(_FragmentLoad):
    """The 16(k) x 16(n) block of B at (row, col), as the two 16x8 B fragments of its column
    halves (``ldmatrix.x4.trans`` from a row-major B, ``ldmatrix.x4`` from a transposed one), or
    with one result the 16(k) x 8(n) block (``ldmatrix.x2``: a warp owning 8 columns)."""

    name = "mma.load_b"
    results_ = var_result_def(FragType)
    assembly_format = "$buffer `[` $row `,` $col `]` attr-dict `:` type($buffer) `->` type($results_)"

    def __init__(self, buffer: SSAValue, row: SSAValue, col: SSAValue, transposed: bool = False, count: int = 2,
                 element_type: Attribute | None = None):  # fmt: skip
        assert isinstance(buffer.type, BufferType)
        frag = FragType("b", element_type or buffer.type.element_type)
        super().__init__(operands=[buffer, row, col], properties=self.props(transposed), result_types=[[frag] * count])

    def verify_(self) -> None:
        buf = _check_buffer(self.buffer.type, 16)
        frag = self.results_[0].type if self.results_ else None
        if not isinstance(frag, FragType) or frag.role.data != "b" or storage_of(frag.element_type) != buf.element_type:
            raise VerifyException("load_b yields one or two B fragments of the buffer's element type")
        if [r.type for r in self.results_] not in ([frag], [frag, frag]):
            raise VerifyException("load_b yields one or two B fragments of the buffer's element type")


def _whole_rows(t: Attribute, acc: Attribute) -> bool:
    """A 2-D tile in ``acc``'s ``#tile.mma`` layout, whose warps own whole rows (WN == 1), in
    16x16 blocks: each lane holds the A fragment elements of the warp's rows."""
    layout = layout_of(t)
    if not isinstance(t, TensorType) or not isinstance(layout, MmaLayout) or layout != layout_of(acc):
        return False
    if layout.warp_grid[1] != 1 or len(t.get_shape()) != 2:
        return False
    tm, tk = layout.warp_tile(t.get_shape())
    return tm % 16 == 0 and tk % 16 == 0


def register_a_operand(a: Attribute, acc: Attribute) -> bool:
    """Whether a dot's A operand of type ``a`` can feed an accumulator of type ``acc`` straight
    from registers (``mma.pack_a``): an f16/bf16 tile in the accumulator's ``#tile.mma``
    layout, whose warps each own whole rows (WN == 1), in 16x16 blocks."""
    return isinstance(a, TensorType) and a.element_type in (f16, bf16) and _whole_rows(a, acc)


@irdl_op_definition
class PackAOp(IRDLOperation):
    """The A fragment of the 16x16 block (``row``, ``col``) (in blocks) of a warp's rows of a
    tile in the ``#tile.mma<[WM, 1]>`` layout, built from the registers each lane already
    holds: A registers a0..a3 are (row g, k 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..),
    the accumulator registers c0c1, c2c3 of the block's left 16x8 half and c0c1, c2c3 of its
    right half, in pairs. An f16/bf16 tile's pairs are packed as they are; an f32 tile's
    (the accumulator a cast would round) are rounded to the fragment's type as they are packed."""

    name = "mma.pack_a"
    tile = operand_def(TensorType)
    row = prop_def(IntegerAttr[I64])
    col = prop_def(IntegerAttr[I64])
    result = result_def(FragType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$tile attr-dict `:` type($tile) `->` type($result)"

    def __init__(self, tile: SSAValue, row: int, col: int, element_type: Attribute | None = None):
        assert isinstance(tile.type, TensorType)
        super().__init__(
            operands=[tile], properties={"row": IntegerAttr(row, i64), "col": IntegerAttr(col, i64)},
            result_types=[FragType("a", element_type or tile.type.element_type)],
        )  # fmt: skip

    def verify_(self) -> None:
        t, frag = self.tile.type, self.result.type
        assert isinstance(frag, FragType)
        if not _whole_rows(t, t):
            raise VerifyException(f"pack_a takes a tile in a #tile.mma<[WM, 1]> layout of 16x16 blocks, got {t}")
        assert isinstance(t, TensorType)
        if t.element_type not in (f32, frag.element_type):
            raise VerifyException(f"pack_a packs {frag.element_type} or rounds f32, not {t.element_type}")
        layout = layout_of(t)
        assert isinstance(layout, MmaLayout)
        tm, tk = layout.warp_tile(t.get_shape())
        row, col = self.row.value.data, self.col.value.data
        if not (0 <= row < tm // 16 and 0 <= col < tk // 16):
            raise VerifyException(f"block ({row}, {col}) is outside a warp's {tm}x{tk} rows")


@irdl_op_definition
class MmaOp(IRDLOperation):
    """``d = a @ b + c`` on one m16n8k16 tile (``mma.sync.aligned.m16n8k16.row.col``)."""

    name = "mma.mma"
    T: ClassVar = VarConstraint("T", base(FragType))
    a = operand_def(FragType)
    b = operand_def(FragType)
    c = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$a `,` $b `,` $c attr-dict `:` type($a) `,` type($b) `->` type($result)"

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue):
        super().__init__(operands=[a, b, c], result_types=[c.type])

    def verify_(self) -> None:
        a, b, c = self.a.type, self.b.type, self.c.type
        assert isinstance(a, FragType) and isinstance(b, FragType) and isinstance(c, FragType)
        if (a.role.data, b.role.data, c.role.data) != ("a", "b", "acc"):
            raise VerifyException("mma.mma takes an A, a B and an accumulator fragment")
        if FAMILY.get(a.element_type) != FAMILY.get(b.element_type):
            raise VerifyException(f"A and B fragments are of one family (f16, bf16, s8/u8, e4m3/e5m2), not {a.element_type} and {b.element_type}")
        if c.element_type != accumulator_of(a.element_type):
            raise VerifyException(f"{a.element_type} fragments accumulate in {accumulator_of(a.element_type)}, not {c.element_type}")
        if self.result.type != c:
            raise VerifyException("the result is an accumulator like c")


def fragment_count(t: Attribute) -> int:
    """Accumulator fragments (16x8 each) of one thread's share of an mma-layout tile."""
    layout = layout_of(t)
    if not isinstance(t, TensorType) or not isinstance(layout, MmaLayout) or t.element_type not in (f32, i32):
        raise VerifyException(f"expected an f32 or i32 tile in the #tile.mma layout, got {t}")
    m, n = t.get_shape()
    tm, tn = layout.warp_tile((m, n))
    if tm < 16 or tn < 8:
        raise VerifyException(f"a {m}x{n} tile is smaller than one fragment per warp")
    return (tm // 16) * (tn // 8)


@irdl_op_definition
class SplitOp(IRDLOperation):
    """An mma-layout accumulator tile as its fragments, fragment (i, j) at i * (tile N/8) + j."""

    name = "mma.split"
    tile = operand_def(TensorType)
    fragments = var_result_def(FragType)
    traits = traits_def(Pure())
    assembly_format = "$tile attr-dict `:` type($tile) `->` type($fragments)"

    def __init__(self, tile: SSAValue):
        acc = FragType("acc", tile.type.element_type)  # type: ignore[attr-defined]
        super().__init__(operands=[tile], result_types=[[acc] * fragment_count(tile.type)])

    def verify_(self) -> None:
        if len(self.fragments) != fragment_count(self.tile.type):
            raise VerifyException("mma.split gives every fragment of the tile")


@irdl_op_definition
class JoinOp(IRDLOperation):
    """Fragments back into the accumulator tile they make up."""

    name = "mma.join"
    fragments = var_operand_def(FragType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$fragments attr-dict `:` type($fragments) `->` type($result)"

    def __init__(self, fragments: list[SSAValue], tile_type: Attribute):
        super().__init__(operands=[fragments], result_types=[tile_type])

    def verify_(self) -> None:
        if len(self.fragments) != fragment_count(self.result.type):
            raise VerifyException("mma.join takes every fragment of the tile")


Mma = Dialect("mma", [ZeroOp, LoadAOp, LoadBOp, PackAOp, MmaOp, SplitOp, JoinOp], [FragType])
