"""The ``cpasync`` dialect: asynchronous global->shared tile copies (``cp.async``, sm_80+).

A copy only starts the transfer; the data may be read after ``cpasync.wait`` lets its group
complete and a barrier orders it for the other threads. Copies issued between two
``cpasync.commit`` form one group; ``cpasync.wait {pending = N}`` waits until at most N groups
are still in flight. With an N-stage ring of shared buffers (``smem.buffer<N x ...>``) the
loads of the next tiles overlap the math on the current one.
"""

from __future__ import annotations

from xdsl.dialects.builtin import I64, IntegerAttr, i64
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, irdl_op_definition, prop_def
from xdsl.utils.exceptions import VerifyException

from kaio.dialects.smem import TileCopy


@irdl_op_definition
class CopyOp(TileCopy):
    """Start copying a global tile into a shared buffer (zero-filling outside the bounds)."""

    name = "cpasync.copy"


@irdl_op_definition
class CommitOp(IRDLOperation):
    """Close the current group of copies."""

    name = "cpasync.commit"
    assembly_format = "attr-dict"


@irdl_op_definition
class WaitOp(IRDLOperation):
    """Wait until at most ``pending`` committed groups are still in flight."""

    name = "cpasync.wait"
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: int):
        super().__init__(properties={"pending": IntegerAttr(pending, i64)})

    def verify_(self) -> None:
        if self.pending.value.data < 0:
            raise VerifyException("pending groups cannot be negative")


Cpasync = Dialect("cpasync", [CopyOp, CommitOp, WaitOp], [])
