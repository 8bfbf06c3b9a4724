"""Sizes and kinds of IR element types, read by the tile stages and the PTX lowering alike
(``tile-layout`` sizes shared buffers by them; ``lower-to-ptx`` picks registers and specs)."""

from __future__ import annotations

from xdsl.dialects.builtin import AnyFloat, IntegerType, f8E4M3FN, f8E5M2, i1
from xdsl.ir import Attribute

FP8_TYPES: dict[Attribute, str] = {f8E4M3FN: "e4m3", f8E5M2: "e5m2"}
"""The OCP FP8 element types and their PTX names."""


def width(t: Attribute) -> int:
    if t == i1:
        return 1
    if isinstance(t, IntegerType):
        return t.width.data
    assert isinstance(t, AnyFloat)
    return t.bitwidth


def is_float(t: Attribute) -> bool:
    return isinstance(t, AnyFloat)


def element_bytes(t: Attribute) -> int:
    return max(width(t) // 8, 1)
