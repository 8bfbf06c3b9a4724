"""What a Python expression in a kernel evaluates to, at compile time.

A runtime scalar is an SSA value with its kaio type (integers are signless in the IR; the kaio
type keeps the signedness). Compile-time values stay Python values until a use needs them in the
IR. Arrays, shared buffers, tuples and Python objects (modules, builtins, types, device
functions) are compile-time handles: they never become a merged SSA value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xdsl.ir import SSAValue

from kaio.dtypes import ArrayType as KaioArrayType
from kaio.dtypes import ScalarType, bool_

Number = int | float | bool


@dataclass(frozen=True, eq=False)
class Scalar:
    """A runtime scalar.

    ``stand_in`` is only set while checking a kernel whose constexpr parameter has no default:
    the parameter is an unknown runtime value, yet a place that needs a compile-time number
    (a shared-memory size, a ``static_range`` bound) uses the stand-in so checking can go on.
    """

    ssa: SSAValue
    type: ScalarType
    stand_in: int | float | bool | None = None
    # A loop value: the variable of a ``range`` whose bounds are all literals, or + - * of such
    # values and int literals. It is an i32 at runtime, but ``bounds`` (inclusive) are known, so
    # like a literal it adapts to the type it meets when all its values fit that type.
    bounds: tuple[int, int] | None = None


@dataclass(frozen=True)
class Const:
    """A compile-time number. ``type`` is None for an untyped Python literal, which adapts to the
    type of whatever it meets (``x + 1``); a typed constant (``f32(1.5)``, ``constexpr[i32]``) is
    as strict as a runtime value. Python bools are typed ``bool_``."""

    value: int | float | bool
    type: ScalarType | None = None


@dataclass(frozen=True, eq=False)
class ArrayRef:
    """A global array parameter (``Array[T]`` / ``MutArray[T]``)."""

    ssa: SSAValue
    kaio_type: KaioArrayType
    name: str
    align: int = 16  # bytes the base address is assumed a multiple of (tile views; checked at launch)

    @property
    def elem(self) -> ScalarType:
        return self.kaio_type.elem


@dataclass(frozen=True, eq=False)
class SharedRef:
    """A shared-memory buffer from ``shared_mem``."""

    ssa: SSAValue
    elem: ScalarType
    shape: tuple[int, ...]


@dataclass(frozen=True)
class TileType:
    """A tile's type in a tile kernel: element type and power-of-two shape (no layout: the
    ``tile-layout`` pass picks it)."""

    elem: ScalarType
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"tile<{'x'.join(map(str, self.shape))}x{self.elem.name}>"

    @property
    def ir_type(self) -> Any:
        from kaio.dialects.tile import tile_type

        return tile_type(self.elem.ir_type, self.shape)


@dataclass(frozen=True, eq=False)
class TileValue:
    """A tile owned by the whole CTA of a tile kernel."""

    ssa: SSAValue
    type: TileType

    @property
    def elem(self) -> ScalarType:
        return self.type.elem

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape


@dataclass(frozen=True)
class TupleValue:
    items: tuple[Value, ...]


@dataclass(frozen=True, eq=False)
class PyObject:
    """A compile-time Python object: a module, a builtin, a type, a device function..."""

    obj: Any


@dataclass(frozen=True)
class NoneValue:
    """What a call that returns nothing evaluates to."""


@dataclass(frozen=True)
class Undefined:
    """A variable that is not defined on every path reaching this point."""

    reason: str


Value = Scalar | Const | ArrayRef | SharedRef | TileValue | TupleValue | PyObject | NoneValue | Undefined
ValueType = ScalarType | TileType  # the type of a runtime value (what an SSA merge yields)


def runtime_value(ssa: SSAValue, t: ValueType) -> Scalar | TileValue:
    """The frontend value of an SSA value of type ``t`` (a merge, loop or region result)."""
    return TileValue(ssa, t) if isinstance(t, TileType) else Scalar(ssa, t)


def const_of(obj: Any) -> Const | None:
    """The compile-time constant for a Python or numpy scalar, or None."""
    if isinstance(obj, bool):
        return Const(obj, bool_)
    if isinstance(obj, int | float):
        return Const(obj)
    np_type = getattr(obj, "dtype", None)
    if np_type is not None and getattr(obj, "shape", None) == ():
        from kaio.dtypes import from_numpy

        try:
            t = from_numpy(np_type)
        except TypeError:
            return None
        item = obj.item()
        return Const(bool(item) if t.is_bool else item, t)
    return None


def type_name(v: Value) -> str:
    """How a value's type reads in an error message."""
    match v:
        case Scalar(type=t):
            return t.name
        case Const(value=value, type=None):
            return "float literal" if isinstance(value, float) else "int literal"
        case Const(type=t) if t is not None:
            return t.name
        case ArrayRef(kaio_type=t):
            return repr(t)
        case SharedRef(elem=e, shape=shape):
            return f"shared {e.name}[{', '.join(map(str, shape))}]"
        case TileValue(type=t):
            return t.name
        case TupleValue():
            return "tuple"
        case NoneValue():
            return "None"
        case Undefined():
            return "undefined"
        case PyObject(obj=obj):
            from kaio.prelude import Builtin

            if isinstance(obj, Builtin):
                return f"builtin `{obj.name}`"
            if isinstance(obj, ScalarType):
                return f"type `{obj.name}`"
            return f"Python {type(obj).__name__}"
    return type(v).__name__  # pragma: no cover


def scalar_type_of(v: Value) -> ScalarType | None:
    """The kaio type of a scalar value; None for untyped literals and non-scalars."""
    if isinstance(v, Scalar):
        return v.type
    if isinstance(v, Const):
        return v.type
    return None


def is_scalar(v: Value) -> bool:
    return isinstance(v, Scalar | Const)
