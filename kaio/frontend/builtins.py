"""The kernel builtins: a table from prelude object to the function that compiles a call.

Builtins are recognized by identity, so aliases (``from kaio.prelude import sqrt as s``) and
module access (``kp.thread_idx_x()``) work; Python's own ``abs``/``min``/``max`` mean the same as
the prelude's. Calling a kaio type is a cast. The resolvers of these callees are registered in
``call_handlers`` (with ``@kaio.builtin``'s, whose builders ``user_builtins`` holds).
"""

from __future__ import annotations

import ast
import builtins as py
import math as pymath
from collections.abc import Callable
from functools import partial
from types import BuiltinFunctionType
from typing import Any

from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.ir import Operation, SSAValue

from kaio import prelude as kp
from kaio.dialects.kernel import (
    AtomicCasOp,
    AtomicRMWOp,
    BarrierOp,
    BlockDimOp,
    BlockIdOp,
    BlockReduceOp,
    Combine,
    Dim,
    GridDimOp,
    LaneIdOp,
    SharedAllocOp,
    ShuffleMode,
    ShuffleOp,
    ThreadIdOp,
    WarpIdOp,
    WarpReduceOp,
)
from kaio.dtypes import ScalarType, i32, u32
from kaio.frontend.bit_builtins import BIT_BUILTINS
from kaio.frontend.call_args import _arg_node, _signature
from kaio.frontend.call_handlers import CallHandler, calls
from kaio.frontend.context import MAX_SHARED_BYTES, CompilerBase
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.operators import binary, cast, compile_time, materialize, require_scalar
from kaio.frontend.random_builtins import RANDOM_BUILTINS
from kaio.frontend.user_builtins import user_builtin_handler
from kaio.frontend.typerules import adapt, default_type, normalize, require_not_fp8, unify
from kaio.frontend.values import (
    ArrayRef,
    Const,
    NoneValue,
    PyObject,
    Scalar,
    SharedRef,
    TupleValue,
    Value,
    type_name,
)

Args = list[Value]
Kwargs = dict[str, Value]
Handler = Callable[[CompilerBase, ast.Call, Args, Kwargs], Value]


@calls(kp.Builtin)
def builtin_handler(fc: CompilerBase, obj: kp.Builtin) -> CallHandler:
    handler = _TABLE.get(obj) or user_builtin_handler(obj)
    if handler is None:  # a kaio.tile builtin in a SIMT kernel
        raise SemanticError(
            f"`{obj.signature}` can only be used in a @kaio.tile_kernel",
            "decorate the kernel with @kaio.tile_kernel to work on tiles",
        )
    return partial(handler, fc)


@calls(BuiltinFunctionType)
def _python_builtin_handler(fc: CompilerBase, obj: Any) -> CallHandler | None:
    """Python's ``abs``/``min``/``max`` are the prelude's; no other C function means anything."""
    alias = _PYTHON_ALIASES.get(id(obj))
    return builtin_handler(fc, alias) if alias is not None else None


@calls(ScalarType)
def _cast_handler(fc: CompilerBase, t: ScalarType) -> CallHandler:
    return partial(_cast, fc, t)


def _cast(fc: CompilerBase, t: ScalarType, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    (v,) = _signature(node, args, kwargs, f"{t.name}(x)", ["x"])
    return cast(fc.em, v, t)


# ---------------------------------------------------------------------------- SIMT indices


def _index(
    op: Callable[[], Operation], fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs
) -> Value:
    _signature(node, args, kwargs, "this builtin", [])
    return Scalar(fc.em.value(op()), u32)


# ---------------------------------------------------------------------------- memory


def _shared_mem(fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    t_value, size = _signature(node, args, kwargs, kp.shared_mem.signature, ["T", "size"])
    if not isinstance(t_value, PyObject) or not isinstance(t_value.obj, ScalarType):
        raise SemanticError(
            "the first argument of `shared_mem` must be a kaio type",
            "e.g. `shared_mem(f32, 256)`",
            _arg_node(node, 0),
        )
    t = t_value.obj
    if t.is_bool:
        raise SemanticError(
            "shared memory of bool is not supported", "use u8 or i32", _arg_node(node, 0)
        )
    dims = size.items if isinstance(size, TupleValue) else (size,)
    shape: list[int] = []
    for d in dims:
        c = compile_time(d)
        if c is None or isinstance(c.value, bool) or not isinstance(c.value, int) or c.value <= 0:
            raise SemanticError(
                f"shared_mem sizes must be positive compile-time integers, got {type_name(d)}"
                + (f" {c.value!r}" if c is not None else ""),
                "use a literal, a global constant or a kaio.constexpr parameter",
                _arg_node(node, 1),
            )
        shape.append(c.value)
    nbytes = t.nbytes * pymath.prod(shape)
    state = fc.state
    state.shared_bytes += nbytes
    if state.shared_bytes > MAX_SHARED_BYTES:
        raise SemanticError(
            f"the kernel uses {state.shared_bytes} bytes of shared memory, more than the "
            f"{MAX_SHARED_BYTES} a block can have statically",
            "use smaller tiles",
        )
    op = SharedAllocOp(f"smem{state.shared_count}", t.ir_type, shape)
    state.shared_count += 1
    fc.em.hoist(op)  # static allocation: visible from the whole kernel
    return SharedRef(op.results[0], t, tuple(shape))


def _bar_sync(fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    _signature(node, args, kwargs, "bar_sync()", [])
    fc.em.add(BarrierOp())
    return NoneValue()


def _index_2d(fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    row, col, stride = _signature(
        node, args, kwargs, kp.index_2d.signature, ["row", "col", "row_stride"]
    )
    return binary(fc.em, "+", binary(fc.em, "*", row, stride), col)


# ---------------------------------------------------------------------------- warp and block


def _warp_value(v: Value, what: str) -> tuple[Scalar | Const, ScalarType]:
    s = require_scalar(v, what)
    t = s.type if s.type is not None else default_type(s)
    if t.is_bool or t.bits < 16:
        raise SemanticError(
            f"{what} works on 16-, 32- and 64-bit values, not {t.name}", "cast it, e.g. `i32(x)`"
        )
    return s, t


def _i32_operand(fc: CompilerBase, v: Value, what: str, node: ast.AST) -> Any:
    if isinstance(v, Const):
        if isinstance(v.value, bool | float) or (v.type is not None and not v.type.is_int):
            raise SemanticError(f"{what} must be an integer, got {type_name(v)}", None, node)
        if not -(1 << 31) <= v.value < (1 << 32):
            raise SemanticError(f"{what} {v.value} does not fit 32 bits", None, node)
        return fc.em.constant(int(v.value), i32 if v.value < (1 << 31) else u32)
    if isinstance(v, Scalar) and v.type.is_int and v.type.bits == 32:
        return v.ssa
    raise SemanticError(
        f"{what} must be a 32-bit integer, got {type_name(v)}", "cast: `u32(x)`", node
    )


def _shuffle(
    mode: ShuffleMode, fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs
) -> Value:
    spec = getattr(kp, f"shfl_sync_{mode.value}").signature
    second = (
        "lane"
        if mode == ShuffleMode.IDX
        else ("lane_mask" if mode == ShuffleMode.BFLY else "offset")
    )
    value, offset, width, mask = _signature(
        node, args, kwargs, spec, ["value", second, "width", "mask"],
        {"width": Const(32), "mask": Const(0xFFFFFFFF)},
    )  # fmt: skip
    s, t = _warp_value(value, f"shfl_sync_{mode.value}")
    w = compile_time(width)
    if w is None or not isinstance(w.value, int) or w.value not in (1, 2, 4, 8, 16, 32):
        raise SemanticError("`width` must be a compile-time power of two up to 32", None, node)
    x = materialize(fc.em, s, t)
    off = _i32_operand(fc, offset, f"the {second}", _arg_node(node, 1))
    m = _i32_operand(fc, mask, "the mask", node)
    return Scalar(fc.em.value(ShuffleOp(mode, x, off, m, int(w.value))), t)


_COMBINES: dict[str, tuple[Combine, Combine, Combine]] = {
    # name: (float, signed int, unsigned int)
    "sum": (Combine.ADDF, Combine.ADDI, Combine.ADDI),
    "max": (Combine.MAXF, Combine.MAXS, Combine.MAXU),
    "min": (Combine.MINF, Combine.MINS, Combine.MINU),
    "add": (Combine.ADDF, Combine.ADDI, Combine.ADDI),
    "exch": (Combine.EXCH, Combine.EXCH, Combine.EXCH),
}


def _combine(kind: str, t: ScalarType) -> Combine:
    f, s, u = _COMBINES[kind]
    return f if t.is_float else (s if t.kind == "int" else u)


def _reduce(
    kind: str, block: bool, fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs
) -> Value:
    name = f"{'block' if block else 'warp'}_reduce_{kind}"
    (value,) = _signature(node, args, kwargs, f"{name}(value)", ["value"])
    s, t = _warp_value(value, name)
    op_cls = BlockReduceOp if block else WarpReduceOp
    return Scalar(fc.em.value(op_cls(_combine(kind, t), materialize(fc.em, s, t))), t)


# The element types PTX's ``atom`` has per operation (PTX ISA, "atom"; sm_70 and newer, kaio's
# oldest target): integers of 32 and 64 bits (``cas`` also 16: ``atom.cas.b16``), and the floats
# below (f32 min/max as a compare-and-swap loop; bf16 add needs sm_90, checked by the PTX op).
# Nothing else assembles: ``atom.add.u8`` or ``atom.exch.b16`` would fail only at module load.
ATOMIC_INT_BITS = {
    "add": (32, 64), "min": (32, 64), "max": (32, 64), "exch": (32, 64), "cas": (16, 32, 64),
}  # fmt: skip
ATOMIC_FLOATS = {
    "add": ("f16", "bf16", "f32", "f64"), "min": ("f32",), "max": ("f32",), "exch": ("f32", "f64"),
}  # fmt: skip


def atomic_element_problem(kind: str, t: ScalarType) -> tuple[str, str] | None:
    """(message, hint) when ``atomic_{kind}`` has no PTX atom for ``t`` elements, else None."""
    bits, floats = ATOMIC_INT_BITS[kind], ATOMIC_FLOATS.get(kind, ())
    if (t.is_int and t.bits in bits) or (t.is_float and t.name in floats):
        return None
    widths = ", ".join(f"{b}-" for b in bits[:-1]) + f" and {bits[-1]}-bit integer"
    supported = f"{widths} and {', '.join(floats)}" if floats else widths
    if t.is_int:
        hint = f"PTX has no {t.bits}-bit atom.{kind}: keep the array in i32/u32"
    else:
        hint = (
            f"PTX has no {t.name} atom.{kind}: keep the array in f32, or atomic_cas its bits "
            f"through a MutArray[u{t.bits}] parameter on the same buffer"
        )
    return f"atomic_{kind} works on {supported} arrays, not {t.name}", hint


def _atomic(kind: str, fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    names = ["array", "index", "compare", "value"] if kind == "cas" else ["array", "index", "value"]
    spec = getattr(kp, f"atomic_{kind}").signature
    bound = _signature(node, args, kwargs, spec, names)
    if not isinstance(bound[0], ArrayRef | SharedRef):
        raise SemanticError(
            f"atomic_{kind} works on a MutArray or a shared buffer, got {type_name(bound[0])}",
            None,
            _arg_node(node, 0),
        )
    ref = bound[0]
    if isinstance(ref, ArrayRef) and not ref.kaio_type.mutable:
        raise SemanticError(
            f"atomic_{kind} on `{ref.name}`, a read-only {ref.kaio_type!r}",
            f"declare the parameter as MutArray[{ref.elem.name}]",
            _arg_node(node, 0),
        )
    t = ref.elem
    if kind == "cas" and t.is_float:
        raise SemanticError(
            f"atomic_cas works on integer arrays, not {t.name}",
            "compare the bits: view the data as an integer array of the same width",
            node,
        )
    if kind in ("min", "max") and t.is_float and t.bits != 32:
        raise SemanticError(
            f"atomic_{kind} on floats works on f32 arrays, not {t.name}",
            "keep the array in f32",
            node,
        )
    if (problem := atomic_element_problem(kind, t)) is not None:
        raise SemanticError(problem[0], problem[1], node)
    index_node = node.args[1] if len(node.args) > 1 else node
    assert isinstance(index_node, ast.expr) or index_node is node
    indices = fc.indices(ref, bound[1], index_node)
    operands = [_element(fc, ref, v, node) for v in bound[2:]]
    if kind == "cas":
        op: Operation = AtomicCasOp(operands[0], operands[1], ref.ssa, indices)
    else:
        op = AtomicRMWOp(_combine(kind, t), operands[0], ref.ssa, indices)
    return Scalar(fc.em.value(op), t)


def _element(fc: CompilerBase, ref: ArrayRef | SharedRef, v: Value, node: ast.AST) -> Any:
    try:
        return fc.element_value(ref, v)
    except SemanticError as e:
        raise e.locate(node, fc.src) from None


# ---------------------------------------------------------------------------- math


_FLOAT_MATH: dict[str, tuple[Callable[[SSAValue], Operation], Callable[[float], float]]] = {
    "sqrt": (xmath.SqrtOp, lambda x: pymath.sqrt(x) if not x < 0 else pymath.nan),  # IEEE
    "rsqrt": (xmath.RsqrtOp, lambda x: 1.0 / pymath.sqrt(x)),
    "exp": (xmath.ExpOp, pymath.exp),
    "exp2": (xmath.Exp2Op, lambda x: 2.0**x),
    "log": (xmath.LogOp, pymath.log),
    "log2": (xmath.Log2Op, pymath.log2),
    "tanh": (xmath.TanhOp, pymath.tanh),
    "sin": (xmath.SinOp, pymath.sin),
    "cos": (xmath.CosOp, pymath.cos),
    # as the runtime op: the sign of a zero result is x's (ceil(-0.5) is -0.0), inf/nan stay
    "floor": (xmath.FloorOp, lambda x: pymath.copysign(float(pymath.floor(x)), x) if pymath.isfinite(x) else x),
    "ceil": (xmath.CeilOp, lambda x: pymath.copysign(float(pymath.ceil(x)), x) if pymath.isfinite(x) else x),
}


def _float_arg(v: Value, name: str) -> Scalar | Const:
    s = require_scalar(v, f"`{name}`")
    t = s.type
    if t is not None and not t.is_float:
        raise SemanticError(f"`{name}` needs a float, got {t.name}", f"cast it: `{name}(f32(x))`")
    if t is not None:
        require_not_fp8(t, f"`{name}`")
    if isinstance(s, Const) and isinstance(s.value, bool):
        raise SemanticError(f"`{name}` needs a float, got bool")
    return s


def _unary_math(
    name: str, fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs
) -> Value:
    (value,) = _signature(node, args, kwargs, f"{name}(x)", ["x"])
    s = _float_arg(value, name)
    op_cls, fold = _FLOAT_MATH[name]
    if isinstance(s, Const):
        try:
            return normalize(Const(fold(float(s.value)), s.type))
        except (ValueError, ZeroDivisionError, OverflowError):
            raise SemanticError(f"`{name}({s.value!r})` is undefined") from None
    return Scalar(fc.em.value(op_cls(s.ssa)), s.type)


def _abs(fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    (value,) = _signature(node, args, kwargs, "abs(x)", ["x"])
    s = require_scalar(value, "`abs`")
    if isinstance(s, Const):
        if isinstance(s.value, bool):
            raise SemanticError("`abs` does not apply to bool")
        return normalize(Const(py.abs(s.value), s.type))
    t = s.type
    require_not_fp8(t, "`abs`")
    if t.is_bool:
        raise SemanticError("`abs` does not apply to bool")
    if t.kind == "uint":
        return s
    op_cls = xmath.AbsFOp if t.is_float else xmath.AbsIOp
    return Scalar(fc.em.value(op_cls(s.ssa)), t)


def _cdiv(fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    """``(a + b - 1) // b`` of two integers (folded when both are known), as Triton's cdiv."""
    a, b = (require_scalar(v, "`cdiv`") for v in _signature(node, args, kwargs, "cdiv(a, b)", ["a", "b"]))
    for v in (a, b):
        integer = v.type.is_int if v.type is not None else type(v.value) is int  # type: ignore[union-attr]
        if not integer:
            raise SemanticError(f"`cdiv` takes integers, got {type_name(v)}", None, node)
    if isinstance(b, Const) and int(b.value) <= 0:
        raise SemanticError(f"`cdiv` divides by a positive integer, got {b.value}", None, node)
    return binary(fc.em, "//", binary(fc.em, "+", a, binary(fc.em, "-", b, Const(1))), b)


def _min_max(
    is_max: bool, fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs
) -> Value:
    name = "max" if is_max else "min"
    if kwargs or len(args) < 2:
        raise SemanticError(f"`{name}` takes two or more values (no keywords)", None, node)
    result = require_scalar(args[0], f"`{name}`")
    for v in args[1:]:
        result = _min_max_pair(fc, is_max, result, require_scalar(v, f"`{name}`"))
    return result


def _min_max_pair(
    fc: CompilerBase, is_max: bool, a: Scalar | Const, b: Scalar | Const
) -> Scalar | Const:
    t = unify(a, b, f"`{'max' if is_max else 'min'}`")
    require_not_fp8(t, f"`{'max' if is_max else 'min'}`")
    if t.is_bool:
        raise SemanticError("`min`/`max` do not apply to bool")
    if isinstance(a, Const) and isinstance(b, Const):
        x, y = adapt(a, t).value, adapt(b, t).value
        c = Const(_fold_min_max(x, y, is_max) if t.is_float else (py.max(x, y) if is_max else py.min(x, y)), t)
        return c if a.type is not None or b.type is not None else Const(c.value)
    op_cls: Callable[[SSAValue, SSAValue], Operation]
    if t.is_float:
        op_cls = arith.MaxnumfOp if is_max else arith.MinnumfOp
    elif t.kind == "int":
        op_cls = arith.MaxSIOp if is_max else arith.MinSIOp
    else:
        op_cls = arith.MaxUIOp if is_max else arith.MinUIOp
    lhs, rhs = materialize(fc.em, a, t), materialize(fc.em, b, t)
    return Scalar(fc.em.value(op_cls(lhs, rhs)), t)


def _fold_min_max(x: float, y: float, is_max: bool) -> float:
    """Float min/max as the runtime op (IEEE minNum/maxNum, PTX min/max): a NaN operand yields
    the other one, and -0.0 is below +0.0."""
    x, y = float(x), float(y)
    if pymath.isnan(x) or pymath.isnan(y):
        return y if pymath.isnan(x) else x
    if x == y == 0.0:
        negative = pymath.copysign(1.0, x) < 0, pymath.copysign(1.0, y) < 0
        zero_is_negative = all(negative) if is_max else any(negative)
        return -0.0 if zero_is_negative else 0.0
    return py.max(x, y) if is_max else py.min(x, y)


def _fma(fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    bound = _signature(node, args, kwargs, "fma(a, b, c)", ["a", "b", "c"])
    operands = [require_scalar(v, "`fma`") for v in bound]
    anchor = next((v for v in operands if v.type is not None), None)
    if anchor is None:  # three literals
        p, q, r = (float(v.value) for v in operands)  # type: ignore[union-attr]
        return Const(p * q + r)
    t = anchor.type
    assert t is not None
    for v in operands:
        unify(anchor, v, "`fma`")
    require_not_fp8(t, "`fma`")
    if not t.is_float:
        raise SemanticError(
            f"`fma` needs floats, got {t.name}", "cast: `fma(f32(a), f32(b), f32(c))`"
        )
    constants = [v for v in operands if isinstance(v, Const)]
    if len(constants) == 3:
        p, q, r = (float(adapt(v, t).value) for v in constants)
        return normalize(Const(p * q + r, t))
    a, b, c = (materialize(fc.em, v, t) for v in operands)
    return Scalar(fc.em.value(xmath.FmaOp(a, b, c)), t)


def _only_in_for(fc: CompilerBase, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    raise SemanticError("`static_range` can only be the iterable of a `for` loop", None, node)


_TABLE: dict[kp.Builtin, Handler] = {
    kp.thread_idx_x: partial(_index, partial(ThreadIdOp, Dim.X)),
    kp.thread_idx_y: partial(_index, partial(ThreadIdOp, Dim.Y)),
    kp.thread_idx_z: partial(_index, partial(ThreadIdOp, Dim.Z)),
    kp.block_idx_x: partial(_index, partial(BlockIdOp, Dim.X)),
    kp.block_idx_y: partial(_index, partial(BlockIdOp, Dim.Y)),
    kp.block_idx_z: partial(_index, partial(BlockIdOp, Dim.Z)),
    kp.block_dim_x: partial(_index, partial(BlockDimOp, Dim.X)),
    kp.block_dim_y: partial(_index, partial(BlockDimOp, Dim.Y)),
    kp.block_dim_z: partial(_index, partial(BlockDimOp, Dim.Z)),
    kp.grid_dim_x: partial(_index, partial(GridDimOp, Dim.X)),
    kp.grid_dim_y: partial(_index, partial(GridDimOp, Dim.Y)),
    kp.grid_dim_z: partial(_index, partial(GridDimOp, Dim.Z)),
    kp.lane_id: partial(_index, LaneIdOp),
    kp.warp_id: partial(_index, WarpIdOp),
    kp.shared_mem: _shared_mem,
    kp.bar_sync: _bar_sync,
    kp.index_2d: _index_2d,
    kp.shfl_sync_down: partial(_shuffle, ShuffleMode.DOWN),
    kp.shfl_sync_up: partial(_shuffle, ShuffleMode.UP),
    kp.shfl_sync_bfly: partial(_shuffle, ShuffleMode.BFLY),
    kp.shfl_sync_idx: partial(_shuffle, ShuffleMode.IDX),
    kp.warp_reduce_sum: partial(_reduce, "sum", False),
    kp.warp_reduce_max: partial(_reduce, "max", False),
    kp.warp_reduce_min: partial(_reduce, "min", False),
    kp.block_reduce_sum: partial(_reduce, "sum", True),
    kp.block_reduce_max: partial(_reduce, "max", True),
    kp.block_reduce_min: partial(_reduce, "min", True),
    kp.atomic_add: partial(_atomic, "add"),
    kp.atomic_min: partial(_atomic, "min"),
    kp.atomic_max: partial(_atomic, "max"),
    kp.atomic_exch: partial(_atomic, "exch"),
    kp.atomic_cas: partial(_atomic, "cas"),
    **{getattr(kp, name): partial(_unary_math, name) for name in _FLOAT_MATH},
    kp.abs: _abs,
    kp.min: partial(_min_max, False),
    kp.max: partial(_min_max, True),
    kp.fma: _fma,
    kp.cdiv: _cdiv,
    kp.static_range: _only_in_for,
    **BIT_BUILTINS,
    **RANDOM_BUILTINS,
}
assert set(_TABLE) == set(kp.BUILTINS), "every prelude builtin has a handler"

_PYTHON_ALIASES: dict[int, kp.Builtin] = {
    id(py.abs): kp.abs,
    id(py.min): kp.min,
    id(py.max): kp.max,
}
