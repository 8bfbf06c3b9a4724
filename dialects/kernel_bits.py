"""``kernel`` ops on the bits of 32-bit words: what a dequantising kernel computes with.

Part of the ``kernel`` dialect (listed in its ``Kernel`` object); one thread's view, pure:

- ``kernel.dp4a``: four byte products of two words plus a 32-bit accumulator; ``kernel.dp2a``:
  two 16-bit-by-byte products (``lo``/``hi``: which two bytes of ``b``). Each source's
  signedness is part of the op (``s32.u32``: ``a``'s bytes signed, ``b``'s unsigned), as in PTX.
- ``kernel.prmt``: four bytes picked from the eight of ``a`` and ``b`` by a selector (optionally
  a PTX mode: ``f4e b4e rc8 ecl ecr rc16``).
- ``kernel.lop3``: any boolean function of three words, bit by bit, given by its 8-bit truth table.

Operands and results are i32 (signless: the frontend's i32/u32 share them).
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import I32, IntegerAttr, StringAttr, i32
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

DOT_SIGNS = frozenset(("s32.s32", "s32.u32", "u32.s32", "u32.u32"))
PRMT_MODES = frozenset(("f4e", "b4e", "rc8", "ecl", "ecr", "rc16"))


class _DotOp(IRDLOperation):
    """``d = c + sum(a_k * b_k)`` over packed lanes, in 32 bits (wrapping)."""

    a = operand_def(i32)
    b = operand_def(i32)
    c = operand_def(i32)
    signs = prop_def(StringAttr)
    result = result_def(i32)
    traits = traits_def(Pure())
    SIGNS: ClassVar[frozenset[str]] = DOT_SIGNS

    def verify_(self) -> None:
        if self.signs.data not in DOT_SIGNS:
            raise VerifyException(f"{self.name}: signs must be one of {sorted(DOT_SIGNS)}, got {self.signs.data!r}")

    @property
    def a_signed(self) -> bool:
        return self.signs.data.startswith("s")

    @property
    def b_signed(self) -> bool:
        return self.signs.data.endswith("s32")


@irdl_op_definition
class Dp4aOp(_DotOp):
    name = "kernel.dp4a"
    assembly_format = "$a `,` $b `,` $c $signs attr-dict"

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue, a_signed: bool, b_signed: bool):
        signs = f"{'s' if a_signed else 'u'}32.{'s' if b_signed else 'u'}32"
        super().__init__(operands=[a, b, c], result_types=[i32], properties={"signs": StringAttr(signs)})


@irdl_op_definition
class Dp2aOp(_DotOp):
    """``a`` holds two 16-bit values; ``half`` (lo/hi) picks bytes 0-1 or 2-3 of ``b``."""

    name = "kernel.dp2a"
    half = prop_def(StringAttr)
    assembly_format = "$half $a `,` $b `,` $c $signs attr-dict"

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue, a_signed: bool, b_signed: bool, hi: bool):
        signs = f"{'s' if a_signed else 'u'}32.{'s' if b_signed else 'u'}32"
        props = {"signs": StringAttr(signs), "half": StringAttr("hi" if hi else "lo")}
        super().__init__(operands=[a, b, c], result_types=[i32], properties=props)

    def verify_(self) -> None:
        super().verify_()
        if self.half.data not in ("lo", "hi"):
            raise VerifyException(f"kernel.dp2a: half must be lo or hi, got {self.half.data!r}")


@irdl_op_definition
class PrmtOp(IRDLOperation):
    """Byte ``k`` of the result is byte ``selector[4k+2:4k]`` of ``b:a`` (bit 4k+3: replicate
    its sign bit), or as the PTX ``mode`` defines with the selector's low two bits."""

    name = "kernel.prmt"
    a = operand_def(i32)
    b = operand_def(i32)
    selector = operand_def(i32)
    mode = opt_prop_def(StringAttr)
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "$a `,` $b `,` $selector (`mode` $mode^)? attr-dict"

    def __init__(self, a: SSAValue, b: SSAValue, selector: SSAValue, mode: str | None = None):
        props = {"mode": StringAttr(mode)} if mode else {}
        super().__init__(operands=[a, b, selector], result_types=[i32], properties=props)

    def verify_(self) -> None:
        if self.mode is not None and self.mode.data not in PRMT_MODES:
            raise VerifyException(f"kernel.prmt: mode must be one of {sorted(PRMT_MODES)}, got {self.mode.data!r}")


@irdl_op_definition
class Lop3Op(IRDLOperation):
    """Bit i of the result is bit ``4*a_i + 2*b_i + c_i`` of ``lut`` (so ``lut`` is the function
    applied to 0xF0, 0xCC, 0xAA: ``(0xF0 & 0xCC) | 0xAA`` is ``(a & b) | c``)."""

    name = "kernel.lop3"
    a = operand_def(i32)
    b = operand_def(i32)
    c = operand_def(i32)
    lut = prop_def(IntegerAttr[I32])
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "$a `,` $b `,` $c `lut` $lut attr-dict"

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue, lut: int):
        super().__init__(operands=[a, b, c], result_types=[i32], properties={"lut": IntegerAttr(lut, i32)})

    def verify_(self) -> None:
        if not 0 <= self.lut.value.data <= 0xFF:
            raise VerifyException(f"kernel.lop3: the truth table is 8 bits, got {self.lut.value.data}")


BIT_OPS = [Dp4aOp, Dp2aOp, PrmtOp, Lop3Op]

__all__ = ["BIT_OPS", "Dp2aOp", "Dp4aOp", "Lop3Op", "PrmtOp"]
