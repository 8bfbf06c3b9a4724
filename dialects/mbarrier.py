"""The ``mbarrier`` dialect: shared-memory barriers with phases and transaction counts (sm_90
for the transaction forms).

An mbarrier counts the arrivals it expects (``count`` at init) and the bytes bulk copies still
owe it; a *phase* completes when both are in, and the next phase begins at once. Waits name the
phase by its parity, which is how pipelines reuse one barrier per stage:

- ``mbarrier.alloc``: an 8-byte shared slot for one barrier (32-bit shared address);
  ``mbarrier.alloc count N``: N consecutive slots (a ring's barriers: slot i at + 8 i);
- ``mbarrier.init %bar count 1``: run by one thread, before a ``kernel.barrier``;
- ``mbarrier.arrive %bar``, ``mbarrier.arrive_expect_tx %bar, %bytes`` (arm the phase for the
  bytes of the TMA loads that complete on it, and arrive);
- ``%done = mbarrier.try_wait_parity %bar, %parity`` (true once the phase of that parity has
  completed) and ``mbarrier.wait_parity %bar, %parity`` (loop until it has).
"""

from __future__ import annotations

from xdsl.dialects.builtin import I64, IntegerAttr, i1, i32, i64
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class AllocOp(IRDLOperation):
    name = "mbarrier.alloc"
    count = opt_prop_def(IntegerAttr[I64])
    result = result_def(i32)
    assembly_format = "(`count` $count^)? attr-dict"

    def __init__(self, count: int = 1) -> None:
        props = {"count": IntegerAttr(count, i64)} if count != 1 else {}
        super().__init__(result_types=[i32], properties=props)

    @property
    def slots(self) -> int:
        return 1 if self.count is None else self.count.value.data

    def verify_(self) -> None:
        if not 1 <= self.slots <= 64:
            raise VerifyException("mbarrier.alloc: 1..64 barriers")


@irdl_op_definition
class InitOp(IRDLOperation):
    name = "mbarrier.init"
    barrier = operand_def(i32)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$barrier `count` $count attr-dict"

    def __init__(self, barrier: SSAValue, count: int):
        super().__init__(operands=[barrier], properties={"count": IntegerAttr(count, i64)})

    def verify_(self) -> None:
        if not 1 <= self.count.value.data < (1 << 20):
            raise VerifyException("an mbarrier expects 1..2^20-1 arrivals")


@irdl_op_definition
class ArriveOp(IRDLOperation):
    name = "mbarrier.arrive"
    barrier = operand_def(i32)
    assembly_format = "$barrier attr-dict"

    def __init__(self, barrier: SSAValue):
        super().__init__(operands=[barrier])


@irdl_op_definition
class ArriveExpectTxOp(IRDLOperation):
    name = "mbarrier.arrive_expect_tx"
    barrier = operand_def(i32)
    bytes = operand_def(i32)
    assembly_format = "$barrier `,` $bytes attr-dict"

    def __init__(self, barrier: SSAValue, nbytes: SSAValue):
        super().__init__(operands=[barrier, nbytes])


@irdl_op_definition
class TryWaitParityOp(IRDLOperation):
    name = "mbarrier.try_wait_parity"
    barrier = operand_def(i32)
    parity = operand_def(i32)
    result = result_def(i1)
    assembly_format = "$barrier `,` $parity attr-dict"

    def __init__(self, barrier: SSAValue, parity: SSAValue):
        super().__init__(operands=[barrier, parity], result_types=[i1])


@irdl_op_definition
class WaitParityOp(IRDLOperation):
    name = "mbarrier.wait_parity"
    barrier = operand_def(i32)
    parity = operand_def(i32)
    assembly_format = "$barrier `,` $parity attr-dict"

    def __init__(self, barrier: SSAValue, parity: SSAValue):
        super().__init__(operands=[barrier, parity])


Mbarrier = Dialect("mbarrier", [AllocOp, InitOp, ArriveOp, ArriveExpectTxOp, TryWaitParityOp, WaitParityOp], [])
