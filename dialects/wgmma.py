"""The ``wgmma`` dialect: warpgroup matrix multiply-accumulate from shared-memory descriptors
(Hopper, sm_90a).

A warpgroup (four consecutive warps, 128 threads) computes a 64xN f32 tile ``D = A * B + D``
with A (64x16) and B (16xN) of f16 or bf16 read from shared memory through 64-bit *matrix
descriptors*. The accumulator ``!wgmma.acc<N>`` lives in the registers of the warpgroup (N/2
f32 per thread, the layout of the PTX ISA's wgmma D fragment).

- ``wgmma.descriptor %addr swizzle "128B" lbo 16 sbo 1024`` builds a descriptor for a tile at
  shared address ``%addr`` laid out in one of the ISA's canonical layouts (``swizzle``: none,
  32B, 64B, 128B; LBO/SBO: the leading/stride byte offsets between 8x16-byte core matrices);
  ``wgmma.advance %d by 32`` moves its start (the next k16 step inside a swizzle atom).
  :func:`matrix_descriptor` is the same encoding in Python.
- ``wgmma.warpgroup_id`` is this thread's warpgroup in the block (thread index / 128), read
  from lane 0 of its warp where the kernel starts, so ptxas knows it is warp-uniform and keeps
  the descriptors built from it in uniform registers.
- ``wgmma.mma_async`` issues one m64nNk16 product; it is asynchronous: ``wgmma.fence`` before
  the first one (after writing the accumulators or the operands), ``wgmma.commit_group`` to
  close a group, and ``wgmma.wait_group %accs {pending = N}`` to wait until at most N groups
  are in flight. The wait takes and returns the accumulators: only its results may be read,
  which keeps the order in SSA form.
- ``wgmma.split`` / ``wgmma.join`` view an f32 accumulator tile in the ``#tile.mma<[W, 1]>``
  layout with M = 16 W (each warp a 16-row strip of all N columns, W a multiple of 4) as the
  accumulators of its warpgroups, N split in column chunks of at most 256, and back: the
  tile's registers are ordered exactly like the wgmma D fragment (lane 4g + t of warp w holds
  rows 16w + g and + 8, columns 8j + 2t and + 1, four registers per 8 columns), so no data
  moves; warpgroup G computes rows 64G.. of the tile.
- ``wgmma.zero`` makes an accumulator of zeros; ``wgmma.store`` writes one to a row-major f32
  matrix in global memory (the epilogue of a test or of a simple kernel).
"""

from __future__ import annotations

from typing import ClassVar

from kaio.dialects.mma import FAMILY, FragType, accumulator_of, si8, ui8
from kaio.dialects.tile_layout import MmaLayout, layout_of
from kaio.dialects.tma import GLOBAL_ADDRESS
from xdsl.dialects.builtin import I64, IntAttr, IntegerAttr, StringAttr, TensorType, bf16, f8E4M3FN, f8E5M2, f16, f32, i32, i64
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    AnyOf,
    BaseAttr,
    EqAttrConstraint,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
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
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

# swizzle mode -> its code in descriptor bits 62-63 (PTX ISA, "Matrix Descriptor Format")
SWIZZLE_MODES: dict[str, int] = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
_FIELD = 0x3FFF  # 14-bit fields, in units of 16 bytes


def matrix_descriptor(address: int, lbo: int, sbo: int, swizzle: str) -> int:
    """The 64-bit wgmma matrix descriptor: start address >> 4 (bits 0-13), leading byte offset
    >> 4 (16-29), stride byte offset >> 4 (32-45), base offset 0 (49-51), swizzle (62-63).
    ``address`` is a shared-memory address (only its low 18 bits matter)."""
    check_descriptor_fields(lbo, sbo, swizzle)
    return descriptor_bits(lbo, sbo, swizzle) | ((address & 0x3FFFF) >> 4)


def descriptor_bits(lbo: int, sbo: int, swizzle: str) -> int:
    """Every field of the descriptor but the start address."""
    return ((lbo >> 4) & _FIELD) << 16 | ((sbo >> 4) & _FIELD) << 32 | SWIZZLE_MODES[swizzle] << 62


def check_descriptor_fields(lbo: int, sbo: int, swizzle: str) -> None:
    if swizzle not in SWIZZLE_MODES:
        raise VerifyException(f"swizzle mode is one of {list(SWIZZLE_MODES)}, not '{swizzle}'")
    for name, v in (("lbo", lbo), ("sbo", sbo)):
        if v % 16 or not 0 <= v < (1 << 18):
            raise VerifyException(f"{name} {v} must be a multiple of 16 below 2^18")


@irdl_attr_definition
class AccType(ParametrizedAttribute, TypeAttribute):
    """``!wgmma.acc<N>``: a 64xN f32 accumulator of a warpgroup (N/2 registers per thread);
    ``!wgmma.acc<N, i32>`` the int32 one of 8-bit integer inputs."""

    name = "wgmma.acc"
    n: IntAttr
    element: Attribute

    def __init__(self, n: int, element: Attribute = f32):
        super().__init__(IntAttr(n), element)

    @property
    def registers(self) -> int:
        return self.n.data // 2

    def verify(self) -> None:
        if self.n.data % 8 or not 8 <= self.n.data <= 256:
            raise VerifyException(f"wgmma N is 8..256 in steps of 8, not {self.n.data}")
        if self.element not in (f32, i32):
            raise VerifyException(f"wgmma accumulators are f32 or i32, not {self.element}")

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.n.data}" + (">" if self.element == f32 else ", "))
        if self.element != f32:
            printer.print_attribute(self.element)
            printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[IntAttr, Attribute]:
        with parser.in_angle_brackets():
            n = IntAttr(parser.parse_integer())
            element = parser.parse_type() if parser.parse_optional_punctuation(",") else f32
            return n, element


@irdl_op_definition
class DescriptorOp(IRDLOperation):
    name = "wgmma.descriptor"
    address = operand_def(i32)
    swizzle = prop_def(StringAttr)
    lbo = prop_def(IntegerAttr[I64])
    sbo = prop_def(IntegerAttr[I64])
    result = result_def(i64)
    traits = traits_def(Pure())
    assembly_format = "$address `swizzle` $swizzle `lbo` $lbo `sbo` $sbo attr-dict"

    def __init__(self, address: SSAValue, swizzle: str, lbo: int, sbo: int):
        super().__init__(
            operands=[address],
            properties={"swizzle": StringAttr(swizzle), "lbo": IntegerAttr(lbo, i64), "sbo": IntegerAttr(sbo, i64)},
            result_types=[i64],
        )

    def verify_(self) -> None:
        check_descriptor_fields(self.lbo.value.data, self.sbo.value.data, self.swizzle.data)


@irdl_op_definition
class AdvanceOp(IRDLOperation):
    """The descriptor of the tile ``bytes`` further on (start address + bytes)."""

    name = "wgmma.advance"
    desc = operand_def(i64)
    bytes = prop_def(IntegerAttr[I64])
    result = result_def(i64)
    traits = traits_def(Pure())
    assembly_format = "$desc `by` $bytes attr-dict"

    def __init__(self, desc: SSAValue, nbytes: int):
        super().__init__(operands=[desc], properties={"bytes": IntegerAttr(nbytes, i64)}, result_types=[i64])

    def verify_(self) -> None:
        if self.bytes.value.data % 16:
            raise VerifyException("a descriptor advances by a multiple of 16 bytes")


@irdl_op_definition
class ZeroOp(IRDLOperation):
    name = "wgmma.zero"
    result = result_def(AccType)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, n: int):
        super().__init__(result_types=[AccType(n)])


@irdl_op_definition
class FenceOp(IRDLOperation):
    name = "wgmma.fence"
    assembly_format = "attr-dict"


@irdl_op_definition
class CommitGroupOp(IRDLOperation):
    name = "wgmma.commit_group"
    assembly_format = "attr-dict"


@irdl_op_definition
class MmaAsyncOp(IRDLOperation):
    """``%d = wgmma.mma_async %acc, %a_desc, %b_desc {element = f16, trans_b = 1}``: issue
    ``D = A * B + acc`` (``accumulate = 0``: ``D = A * B``). ``trans_a``/``trans_b`` 1: A is
    M-major / B is N-major in shared memory (0: K-major). A is a descriptor, or an
    ``!mma.frag<a, T>``: each warp's m16n8k16 A fragment of its 16 rows of the 64 (registers).
    fp8 (``element`` e4m3 or e5m2, ``element_b`` the other when they differ): K = 32 per
    instruction, both operands K-major descriptors."""

    name = "wgmma.mma_async"
    T: ClassVar = VarConstraint("T", base(AccType))
    acc = operand_def(T)
    a = operand_def(AnyOf((EqAttrConstraint(i64), BaseAttr(FragType))))
    b = operand_def(i64)
    element = prop_def(TypeAttribute)
    element_b = opt_prop_def(TypeAttribute)  # B's type where it differs from A's (fp8 mixes)
    trans_a = prop_def(IntegerAttr[I64])
    trans_b = prop_def(IntegerAttr[I64])
    accumulate = prop_def(IntegerAttr[I64])
    result = result_def(T)
    irdl_options = (ParsePropInAttrDict(),)  # element_b, where present, in the attribute dictionary
    assembly_format = "$acc `,` $a `,` $b `element` $element `trans` $trans_a `,` $trans_b `accumulate` $accumulate attr-dict `:` type($acc) `,` type($a)"

    def __init__(self, acc: SSAValue, a: SSAValue, b: SSAValue, element: Attribute = f16, trans_a: int = 0, trans_b: int = 0,
                 accumulate: int = 1, element_b: Attribute | None = None):  # fmt: skip
        props = {
            "element": element,
            "trans_a": IntegerAttr(trans_a, i64),
            "trans_b": IntegerAttr(trans_b, i64),
            "accumulate": IntegerAttr(accumulate, i64),
        }
        if element_b is not None and element_b != element:
            props["element_b"] = element_b
        super().__init__(operands=[acc, a, b], properties=props, result_types=[acc.type])

    @property
    def b_element(self) -> Attribute:
        return self.element_b or self.element

    def verify_(self) -> None:
        eight_bit = (f8E4M3FN, f8E5M2, si8, ui8)
        if self.element not in (f16, bf16, *eight_bit):
            raise VerifyException(f"wgmma.mma_async multiplies f16, bf16, fp8 or s8/u8, not {self.element}")
        if self.b_element != self.element and FAMILY.get(self.b_element) != FAMILY.get(self.element):
            raise VerifyException(f"wgmma.mma_async: A and B are of one family (e4m3/e5m2, s8/u8 may mix), not {self.element} and {self.b_element}")
        if self.element in eight_bit and (self.trans_a.value.data or self.trans_b.value.data or isinstance(self.a.type, FragType)):
            raise VerifyException("8-bit wgmma reads K-major A and B descriptors (no transpose, no A in registers)")
        acc = self.acc.type
        if isinstance(acc, AccType) and acc.element != accumulator_of(self.element):
            raise VerifyException(f"{self.element} inputs accumulate in {accumulator_of(self.element)}, not {acc.element}")
        a = self.a.type
        if isinstance(a, FragType) and (a != FragType("a", self.element) or self.trans_a.value.data):
            raise VerifyException("an A from registers is an untransposed A fragment of the element type")
        for name in ("trans_a", "trans_b", "accumulate"):
            if getattr(self, name).value.data not in (0, 1):
                raise VerifyException(f"{name} is 0 or 1")
        if self.result.type != self.acc.type:
            raise VerifyException("the result is an accumulator like acc")


@irdl_op_definition
class WaitGroupOp(IRDLOperation):
    """Wait until at most ``pending`` groups are in flight; the accumulators pass through."""

    name = "wgmma.wait_group"
    accs = var_operand_def(AccType)
    pending = prop_def(IntegerAttr[I64])
    results_ = var_result_def(AccType)
    assembly_format = "$accs `pending` $pending attr-dict `:` type($accs) `->` type($results_)"

    def __init__(self, accs: list[SSAValue], pending: int = 0):
        super().__init__(operands=[accs], properties={"pending": IntegerAttr(pending, i64)}, result_types=[[a.type for a in accs]])

    def verify_(self) -> None:
        if not 0 <= self.pending.value.data <= 7:
            raise VerifyException("wgmma.wait_group waits for 0..7 pending groups")
        if [r.type for r in self.results_] != [a.type for a in self.accs]:
            raise VerifyException("the results are the accumulators, in order")


def tile_chunks(t: Attribute) -> list[int]:
    """The accumulator widths an f32 (or i32) tile in the #tile.mma<[W, 1]> layout (M = 16 W,
    W a multiple of 4) splits into: N in equal chunks of at most 256 columns. VerifyException
    if the tile is not such a tile."""
    layout = layout_of(t)
    if not isinstance(t, TensorType) or not isinstance(layout, MmaLayout) or t.element_type not in (f32, i32):
        raise VerifyException(f"wgmma accumulators are an f32 or i32 tile in the #tile.mma layout, not {t}")
    m, n = t.get_shape()
    wm, wn = layout.warp_grid
    if wn != 1 or wm % 4 or m != 16 * wm or n % 8:
        raise VerifyException(f"a {m}x{n} tile over {wm}x{wn} warps is not made of m64 wgmma accumulators (needs warps [W, 1], W a multiple of 4, M = 16 W)")
    return column_chunks(n)


def accumulators(t: Attribute) -> list[Attribute]:
    """The accumulator types of a tile (see :func:`tile_chunks`)."""
    return [AccType(c, t.element_type) for c in tile_chunks(t)]  # type: ignore[attr-defined]


INT8_N = (8, 16, 24, *range(32, 257, 16))  # the N of integer (s8/u8) wgmma


def column_chunks(n: int) -> list[int]:
    """N (a multiple of 8) in equal chunks of at most 256 columns (one wgmma each)."""
    pieces = -(-n // 256)
    while n % (8 * pieces):
        pieces += 1
    return [n // pieces] * pieces


@irdl_op_definition
class SplitOp(IRDLOperation):
    """An accumulator tile as its warpgroup's accumulators (column chunks of N, in order)."""

    name = "wgmma.split"
    tile = operand_def(TensorType)
    accs = var_result_def(AccType)
    traits = traits_def(Pure())
    assembly_format = "$tile attr-dict `:` type($tile) `->` type($accs)"

    def __init__(self, tile: SSAValue):
        super().__init__(operands=[tile], result_types=[accumulators(tile.type)])

    def verify_(self) -> None:
        if [a.type for a in self.accs] != accumulators(self.tile.type):
            raise VerifyException("wgmma.split gives the tile's column chunks, in order")


@irdl_op_definition
class JoinOp(IRDLOperation):
    """Accumulators back into the tile they make up."""

    name = "wgmma.join"
    accs = var_operand_def(AccType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$accs attr-dict `:` type($accs) `->` type($result)"

    def __init__(self, accs: list[SSAValue], tile_type: Attribute):
        super().__init__(operands=[accs], result_types=[tile_type])

    def verify_(self) -> None:
        if [a.type for a in self.accs] != accumulators(self.result.type):
            raise VerifyException("wgmma.join takes the tile's column chunks, in order")


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Store the accumulator to the row-major f32 matrix at global address ``%ptr`` with
    ``%ld`` elements per row (the warpgroup is the first one of a 1-D block)."""

    name = "wgmma.store"
    acc = operand_def(AccType)
    ptr = operand_def(GLOBAL_ADDRESS)
    ld = operand_def(i32)
    assembly_format = "$acc `,` $ptr `,` $ld attr-dict `:` type($acc) `,` type($ptr)"

    def __init__(self, acc: SSAValue, ptr: SSAValue, ld: SSAValue):
        super().__init__(operands=[acc, ptr, ld])


@irdl_op_definition
class WarpgroupIdOp(IRDLOperation):
    name = "wgmma.warpgroup_id"
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[i32])


Wgmma = Dialect(
    "wgmma",
    [WarpgroupIdOp, DescriptorOp, AdvanceOp, ZeroOp, FenceOp, CommitGroupOp, MmaAsyncOp, WaitGroupOp, SplitOp, JoinOp, StoreOp],
    [AccType],
)
