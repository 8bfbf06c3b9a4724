"""The ``tma`` dialect: bulk copies between global and shared memory (Hopper's Tensor Memory
Accelerator, sm_90).

- ``tma.load %tmap[%x, %y] -> %dst barrier %bar``: copy the box of the tensor map at the
  coordinates (innermost first) into shared memory at ``%dst``; box elements outside the tensor
  read as zero. Completion is counted on the mbarrier ``%bar`` in bytes (the copy performs
  complete_tx): arm it with ``mbarrier.arrive_expect_tx`` and wait on its phase.
- ``tma.store %src -> %tmap[%x, %y]``: the reverse (elements outside the tensor are not
  written); stores complete in bulk groups: ``tma.commit``, ``tma.wait {pending = 0}``.
- ``tma.bulk_load %src, %bytes -> %dst barrier %bar`` / ``tma.bulk_store``: plain contiguous
  copies (sizes and addresses multiples of 16 bytes).
- ``tma.fence``: ``fence.proxy.async.shared::cta``: orders the generic-proxy shared-memory
  accesses before it (the thread's own, and through a block barrier or an mbarrier phase the
  block's) with the async-proxy ones after it, both ways: ordinary writes become visible to the
  TMA stores and wgmmas that follow, an ``mbarrier.init`` to the complete_tx of TMA loads, and
  ordinary reads (``ldmatrix``) are done before a TMA load overwrites those bytes.
- ``tma.issuer {warp = W}``: true in exactly one thread of warp W (``elect.sync`` in that warp,
  once, where the kernel starts): the thread that arms a block's barriers and issues its copies.
  Unlike ``tid == W * 32`` it tells ptxas the copies' operands are warp-uniform, so each copy
  is one instruction instead of a loop electing a lane for every distinct operand value.
- ``tma.alloc {bytes, align}``: a shared buffer aligned for swizzled boxes (1024 bytes for the
  128-byte swizzle).

A tensor map is a 64-bit generic address (or a ``!kernel.array`` or ``!kernel.tensor_map``
parameter) of 128 bytes: on a GPU the ``CUtensorMap`` the runtime
builds with ``cuTensorMapEncodeTiled``; on the simulator kaio's own format
(``kaio.targets.sim.tensor_map``). Shared addresses are 32-bit ``.shared`` addresses.
"""

from __future__ import annotations

from kaio.dialects.kernel import ArrayType, TensorMapType
from xdsl.dialects.builtin import I64, IntegerAttr, i1, i32, i64
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import (
    AnyOf,
    BaseAttr,
    EqAttrConstraint,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

MAX_RANK = 5
# a global address: an i64, a kernel parameter buffer (lowered to its address), or a tensor-map
# parameter (lowered to the generic address of the parameter)
GLOBAL_ADDRESS = AnyOf((EqAttrConstraint(i64), BaseAttr(ArrayType), BaseAttr(TensorMapType)))


def _check_coords(coords: tuple[SSAValue, ...] | list[SSAValue]) -> None:
    if not 1 <= len(coords) <= MAX_RANK:
        raise VerifyException(f"a tensor box has 1..{MAX_RANK} coordinates, got {len(coords)}")


@irdl_op_definition
class AllocOp(IRDLOperation):
    name = "tma.alloc"
    bytes = prop_def(IntegerAttr[I64])
    align = prop_def(IntegerAttr[I64])
    result = result_def(i32)
    assembly_format = "`bytes` $bytes `align` $align attr-dict"

    def __init__(self, nbytes: int, align: int = 1024):
        super().__init__(properties={"bytes": IntegerAttr(nbytes, i64), "align": IntegerAttr(align, i64)}, result_types=[i32])

    def verify_(self) -> None:
        align = self.align.value.data
        if self.bytes.value.data <= 0 or align < 16 or align & (align - 1):
            raise VerifyException("tma.alloc: a positive size and a power-of-two alignment of at least 16")


@irdl_op_definition
class LoadOp(IRDLOperation):
    name = "tma.load"
    tmap = operand_def(GLOBAL_ADDRESS)
    coords = var_operand_def(i32)
    dst = operand_def(i32)
    barrier = operand_def(i32)
    assembly_format = "$tmap `[` $coords `]` `->` $dst `barrier` $barrier attr-dict `:` type($tmap)"

    def __init__(self, tmap: SSAValue, coords: list[SSAValue], dst: SSAValue, barrier: SSAValue):
        super().__init__(operands=[tmap, coords, dst, barrier])

    def verify_(self) -> None:
        _check_coords(self.coords)


@irdl_op_definition
class StoreOp(IRDLOperation):
    name = "tma.store"
    src = operand_def(i32)
    tmap = operand_def(GLOBAL_ADDRESS)
    coords = var_operand_def(i32)
    assembly_format = "$src `->` $tmap `[` $coords `]` attr-dict `:` type($tmap)"

    def __init__(self, src: SSAValue, tmap: SSAValue, coords: list[SSAValue]):
        super().__init__(operands=[src, tmap, coords])

    def verify_(self) -> None:
        _check_coords(self.coords)


@irdl_op_definition
class BulkLoadOp(IRDLOperation):
    name = "tma.bulk_load"
    src = operand_def(GLOBAL_ADDRESS)
    size = operand_def(i32)
    dst = operand_def(i32)
    barrier = operand_def(i32)
    assembly_format = "$src `,` $size `->` $dst `barrier` $barrier attr-dict `:` type($src)"

    def __init__(self, src: SSAValue, size: SSAValue, dst: SSAValue, barrier: SSAValue):
        super().__init__(operands=[src, size, dst, barrier])


@irdl_op_definition
class BulkStoreOp(IRDLOperation):
    name = "tma.bulk_store"
    src = operand_def(i32)
    size = operand_def(i32)
    dst = operand_def(GLOBAL_ADDRESS)
    assembly_format = "$src `,` $size `->` $dst attr-dict `:` type($dst)"

    def __init__(self, src: SSAValue, size: SSAValue, dst: SSAValue):
        super().__init__(operands=[src, size, dst])


@irdl_op_definition
class CommitOp(IRDLOperation):
    name = "tma.commit"
    assembly_format = "attr-dict"


@irdl_op_definition
class WaitOp(IRDLOperation):
    """At most ``pending`` store groups in flight (``read = 1``: only their shared reads done,
    so the source buffer may be reused)."""

    name = "tma.wait"
    pending = prop_def(IntegerAttr[I64])
    read = prop_def(IntegerAttr[I64])
    assembly_format = "`pending` $pending `read` $read attr-dict"

    def __init__(self, pending: int = 0, read: bool = False):
        super().__init__(properties={"pending": IntegerAttr(pending, i64), "read": IntegerAttr(int(read), i64)})

    def verify_(self) -> None:
        if self.pending.value.data < 0 or self.read.value.data not in (0, 1):
            raise VerifyException("tma.wait: pending >= 0, read 0 or 1")


@irdl_op_definition
class FenceOp(IRDLOperation):
    name = "tma.fence"
    assembly_format = "attr-dict"


@irdl_op_definition
class IssuerOp(IRDLOperation):
    name = "tma.issuer"
    warp = prop_def(IntegerAttr[I64])
    result = result_def(i1)
    traits = traits_def(Pure())
    assembly_format = "`warp` $warp attr-dict"

    def __init__(self, warp: int = 0):
        super().__init__(properties={"warp": IntegerAttr(warp, i64)}, result_types=[i1])

    def verify_(self) -> None:
        if self.warp.value.data < 0:
            raise VerifyException("tma.issuer: the warp is >= 0")


Tma = Dialect("tma", [AllocOp, LoadOp, StoreOp, BulkLoadOp, BulkStoreOp, CommitOp, WaitOp, FenceOp, IssuerOp], [])
