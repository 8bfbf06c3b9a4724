"""A Builder with the few i32 helpers the tiling passes use, so pass code reads as math."""

from __future__ import annotations

from xdsl.builder import Builder
from xdsl.dialects import arith
from xdsl.ir import SSAValue


class IndexBuilder:
    """Builds i32 index arithmetic (``arith``) at a builder's insertion point."""

    def __init__(self, builder: Builder):
        self.b = builder

    def const(self, value: int) -> SSAValue:
        return self.b.insert(arith.ConstantOp.from_int_and_width(value, 32)).result

    def add(self, x: SSAValue, y: SSAValue) -> SSAValue:
        return self.b.insert(arith.AddiOp(x, y)).result

    def sub(self, x: SSAValue, y: SSAValue) -> SSAValue:
        return self.b.insert(arith.SubiOp(x, y)).result

    def mul(self, x: SSAValue, y: SSAValue) -> SSAValue:
        return self.b.insert(arith.MuliOp(x, y)).result

    def div(self, x: SSAValue, y: SSAValue) -> SSAValue:
        return self.b.insert(arith.DivUIOp(x, y)).result

    def rem(self, x: SSAValue, y: SSAValue) -> SSAValue:
        return self.b.insert(arith.RemUIOp(x, y)).result

    def min(self, x: SSAValue, y: SSAValue) -> SSAValue:
        return self.b.insert(arith.MinSIOp(x, y)).result

    def ceil_div(self, x: SSAValue, d: int) -> SSAValue:
        return self.div(self.add(x, self.const(d - 1)), self.const(d))
