"""PTX scalar types and how the simulator stores them.

Every value lives in an *unsigned container* as wide as its type (raw bits), and instructions
``.view()`` it as the typed numpy dtype they compute in. Keeping raw bits means a ``mov.b32``
of a float, a NaN payload or a ``-0.0`` survive exactly, and one register file layout serves
every type. Predicates are numpy ``bool`` arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)  # OCP FP8: no infinities, NaN is S.1111.111
E5M2 = np.dtype(ml_dtypes.float8_e5m2)

CONTAINER_BY_BITS: dict[int, np.dtype] = {
    8: np.dtype(np.uint8),
    16: np.dtype(np.uint16),
    32: np.dtype(np.uint32),
    64: np.dtype(np.uint64),
}
SIGNED_BY_BITS: dict[int, np.dtype] = {
    8: np.dtype(np.int8),
    16: np.dtype(np.int16),
    32: np.dtype(np.int32),
    64: np.dtype(np.int64),
}
PRED = np.dtype(np.bool_)


@dataclass(frozen=True)
class PtxType:
    """One PTX type: ``kind`` is ``b`` (bits), ``u``, ``s``, ``f`` or ``pred``.

    ``bits`` is the whole width (``f16x2`` is 32); ``value`` is the numpy dtype of one lane,
    the dtype instructions compute in; ``lanes`` is 2 for the packed half types.
    """

    name: str
    kind: str
    bits: int
    value: np.dtype
    lanes: int = 1

    @property
    def container(self) -> np.dtype:
        return PRED if self.kind == "pred" else CONTAINER_BY_BITS[self.bits]

    @property
    def nbytes(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_signed(self) -> bool:
        return self.kind == "s"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("b", "u", "s")

    @property
    def lane_bits(self) -> int:
        return self.bits // self.lanes

    def __repr__(self) -> str:
        return f".{self.name}"


def _int(name: str, kind: str, bits: int) -> PtxType:
    value = SIGNED_BY_BITS[bits] if kind == "s" else CONTAINER_BY_BITS[bits]
    return PtxType(name, kind, bits, value)


PTX_TYPES: dict[str, PtxType] = {
    t.name: t
    for t in (
        *(_int(f"b{n}", "b", n) for n in (8, 16, 32, 64)),
        *(_int(f"u{n}", "u", n) for n in (8, 16, 32, 64)),
        *(_int(f"s{n}", "s", n) for n in (8, 16, 32, 64)),
        PtxType("e4m3", "f", 8, E4M3),
        PtxType("e5m2", "f", 8, E5M2),
        PtxType("e4m3x2", "f", 16, E4M3, lanes=2),
        PtxType("e5m2x2", "f", 16, E5M2, lanes=2),
        PtxType("f16", "f", 16, np.dtype(np.float16)),
        PtxType("bf16", "f", 16, BF16),
        PtxType("f32", "f", 32, np.dtype(np.float32)),
        PtxType("f64", "f", 64, np.dtype(np.float64)),
        PtxType("f16x2", "f", 32, np.dtype(np.float16), lanes=2),
        PtxType("bf16x2", "f", 32, BF16, lanes=2),
        PtxType("pred", "pred", 1, PRED),
    )
}


def ptx_type(name: str) -> PtxType:
    """The type named ``name`` (without the dot); KeyError if PTX has no such type."""
    return PTX_TYPES[name]


def bits_type(bits: int) -> PtxType:
    """The untyped ``.bN`` type of a width."""
    return PTX_TYPES[f"b{bits}"]


def unsigned_type(bits: int) -> PtxType:
    return PTX_TYPES[f"u{bits}"]


def signed_type(bits: int) -> PtxType:
    return PTX_TYPES[f"s{bits}"]
