"""Scalar types of the kernel language: ``f16 bf16 f32 f64 i8 u8 i16 u16 i32 u32 i64 u64 bool_``
and the 8-bit floats ``f8e4m3 f8e5m2``.

One object per type carries everything the layers need: the numpy dtype (host side), the xDSL
type (IR side; integers are signless there, signedness lives here and picks the arith op), and
the PTX spelling. Calling a type converts: on the host ``f32(1.5)`` is ``numpy.float32(1.5)``,
inside a kernel ``f32(x)`` is a cast.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kaio.errors import KaioTypeError

if TYPE_CHECKING:  # numpy loads when a host value is first converted: `import kaio` stays light
    import numpy as np


@dataclass(frozen=True, eq=False)
class ScalarType:
    name: str
    kind: str  # "float", "int" (signed), "uint", "bool"
    bits: int
    np_dtype_name: str

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind in ("int", "float")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_fp8(self) -> bool:
        """An 8-bit float (OCP FP8): a storage and conversion type, with no arithmetic of its
        own on the GPU (tensor cores aside)."""
        return self.kind == "float" and self.bits == 8

    @property
    def nbytes(self) -> int:
        return max(self.bits // 8, 1)

    @cached_property
    def np_dtype(self) -> np.dtype:
        import numpy as np

        if self.name in ("bf16", "f8e4m3", "f8e5m2"):  # numpy has none: ml_dtypes' are standard
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, self.np_dtype_name))
        return np.dtype(self.np_dtype_name)

    @cached_property
    def ir_type(self) -> Any:
        from xdsl.dialects import builtin

        if self.kind == "float":
            return {
                "f16": builtin.f16,
                "bf16": builtin.bf16,
                "f32": builtin.f32,
                "f64": builtin.f64,
                "f8e4m3": builtin.f8E4M3FN,
                "f8e5m2": builtin.f8E5M2,
            }[self.name]
        return builtin.IntegerType(1 if self.is_bool else self.bits)

    @property
    def ptx(self) -> str:
        """The PTX type of a value of this type (``s32``, ``u64``, ``f32``, ``pred``...)."""
        if self.kind == "bool":
            return "pred"
        if self.is_fp8:
            return self.name.removeprefix("f8")  # e4m3, e5m2
        if self.kind == "float":
            return self.name
        return ("s" if self.kind == "int" else "u") + str(self.bits)

    def __call__(self, value: Any) -> Any:
        # Host-side conversion; the frontend treats the same call inside a kernel as a cast.
        return self.np_dtype.type(value)

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


f16 = ScalarType("f16", "float", 16, "float16")
bf16 = ScalarType("bf16", "float", 16, "bfloat16")
f32 = ScalarType("f32", "float", 32, "float32")
f64 = ScalarType("f64", "float", 64, "float64")
i8 = ScalarType("i8", "int", 8, "int8")
u8 = ScalarType("u8", "uint", 8, "uint8")
i16 = ScalarType("i16", "int", 16, "int16")
u16 = ScalarType("u16", "uint", 16, "uint16")
i32 = ScalarType("i32", "int", 32, "int32")
u32 = ScalarType("u32", "uint", 32, "uint32")
i64 = ScalarType("i64", "int", 64, "int64")
u64 = ScalarType("u64", "uint", 64, "uint64")
bool_ = ScalarType("bool", "bool", 1, "bool")
# OCP FP8 (PTX .e4m3/.e5m2): e4m3 has no infinity and one NaN per sign (S.1111.111), max 448;
# e5m2 is IEEE-like (inf, NaNs), max 57344. Conversions to them saturate (satfinite).
f8e4m3 = ScalarType("f8e4m3", "float", 8, "float8_e4m3fn")
f8e5m2 = ScalarType("f8e5m2", "float", 8, "float8_e5m2")

ALL_TYPES: tuple[ScalarType, ...] = (
    f16,
    bf16,
    f32,
    f64,
    i8,
    u8,
    i16,
    u16,
    i32,
    u32,
    i64,
    u64,
    bool_,
    f8e4m3,
    f8e5m2,
)
BY_NAME: dict[str, ScalarType] = {t.name: t for t in ALL_TYPES}


def from_numpy(dtype: Any) -> ScalarType:
    """The kernel type of a numpy dtype (``ml_dtypes.bfloat16`` included)."""
    import numpy as np

    dt = np.dtype(dtype)
    for t in ALL_TYPES:
        if t.np_dtype == dt:
            return t
    raise TypeError(f"numpy dtype {dt} has no kaio scalar type")


def is_int_value(value: Any) -> bool:
    """A Python or numpy integer, not a bool: what counts as an int in a shape, a size or a
    config field (``True`` for a dimension is a mistake, not 1)."""
    np = sys.modules.get("numpy")  # not loaded: no value can be a numpy integer
    if np is None:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class ArrayType:
    """A global-memory buffer parameter: ``Array[T]`` (read-only) or ``MutArray[T]`` (writable)."""

    elem: ScalarType
    mutable: bool

    def __repr__(self) -> str:
        return f"{'MutArray' if self.mutable else 'Array'}[{self.elem.name}]"


def _meant(elem: Any) -> str:
    """What a Python or numpy element type most likely meant, as a hint ("" if unclear)."""
    import numpy as np

    if elem is bool or elem is bool_ or elem is np.bool_:
        return "; arrays of bool are not supported: use u8"
    if elem is int or elem is float:
        wide = {int: "i32 (or i64)", float: "f32 (or f64)"}[elem]
        return f"; Python's {elem.__name__} has no width: use {wide}"
    if isinstance(elem, type) and issubclass(elem, np.generic):
        try:
            return f"; use {from_numpy(np.dtype(elem)).name}"
        except TypeError:
            return ""
    return ""


class _ArrayFactory:
    def __init__(self, mutable: bool):
        self.mutable = mutable

    def __getitem__(self, elem: ScalarType) -> ArrayType:
        if not isinstance(elem, ScalarType) or elem.is_bool:
            numeric = ", ".join(t.name for t in ALL_TYPES if not t.is_bool)
            raise KaioTypeError(
                f"{self!r}[{getattr(elem, '__name__', repr(elem))}]: the element type must be a "
                f"numeric kaio type ({numeric}), not {elem!r}{_meant(elem)}"
            )
        return ArrayType(elem, self.mutable)

    def __repr__(self) -> str:
        return "MutArray" if self.mutable else "Array"


Array = _ArrayFactory(mutable=False)
MutArray = _ArrayFactory(mutable=True)


class _Constexpr:
    """Marks a compile-time constant parameter: ``BLOCK: kaio.constexpr``.

    Each distinct value specializes (and caches) its own kernel, as in Triton.
    ``kaio.constexpr[i32]`` additionally names the type the value has inside the kernel.
    """

    def __getitem__(self, t: ScalarType) -> "ConstexprType":
        return ConstexprType(t)

    def __repr__(self) -> str:
        return "constexpr"


@dataclass(frozen=True)
class ConstexprType:
    elem: ScalarType | None = None


constexpr = _Constexpr()
