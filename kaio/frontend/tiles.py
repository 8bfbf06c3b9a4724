"""Tile kernels: the SIMT frontend's compiler, taught tiles.

Everything scalar works as in ``@kaio.gpu_kernel`` (same scope, types, control flow and
diagnostics). A tile is a :class:`TileValue`; an operator, math builtin, cast or device
function applied to tiles is *lifted*: the scalar frontend compiles it once on block arguments
inside a ``tile.map`` region, so tiles follow exactly the scalar semantics and errors. Tiles of
different shapes broadcast as numpy arrays do; scalars are used inside the region as they are.
The ``kt.*`` builtins (``kaio.tile``) build the other tile ops.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from functools import partial
from typing import Any

from xdsl.dialects import arith
from xdsl.ir import Block, Region, SSAValue
from xdsl.traits import MemoryWriteEffect

from kaio import tile as kt
from kaio.dialects import tile
from kaio.dialects.kernel import BlockIdOp, Combine, CombineAttr, Dim, GridDimOp
from kaio.dtypes import ScalarType, f32, i32, u32
from kaio.frontend.call_args import _arg_node, _signature
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.function_compiler import FunctionCompiler
from kaio.frontend.operators import (
    BINOPS,
    CMPOPS,
    UNARYOPS,
    binary,
    cast,
    compare,
    compile_time,
    materialize,
    unary,
)
from kaio.frontend.random_builtins import COMPONENTS, RANDOM_BUILTINS
from kaio.frontend.typerules import adapt, default_type, unify
from kaio.frontend.values import (
    ArrayRef,
    Const,
    NoneValue,
    PyObject,
    Scalar,
    TileType,
    TileValue,
    TupleValue,
    Value,
    type_name,
)
from kaio.frontend.view_operands import view_dim

Args = list[Value]
Kwargs = dict[str, Value]

MAX_TILE_ELEMENTS = 1 << 16  # per tile: beyond this a tile cannot live in registers + shared memory


class TileCompiler(FunctionCompiler):
    """Compiles a ``@kaio.tile_kernel`` function."""

    # ------------------------------------------------------------------ lifting

    def lift(self, fn: Callable[..., Value], args: Args, kwargs: Kwargs, what: str) -> TileValue:
        """``fn`` (a scalar operation) applied to every element of the tile arguments."""
        tiles = [v for v in (*args, *kwargs.values()) if isinstance(v, TileValue)]
        shape = broadcast_shape([t.shape for t in tiles], what)
        block = Block()
        inputs: list[SSAValue] = []
        arg_of: dict[SSAValue, SSAValue] = {}

        def element(v: Value) -> Value:
            if not isinstance(v, TileValue):
                return v
            b = self.broadcast(v, shape)
            if b.ssa not in arg_of:
                arg_of[b.ssa] = block.insert_arg(b.elem.ir_type, len(block.args))
                inputs.append(b.ssa)
            return Scalar(arg_of[b.ssa], b.elem)

        scalar_args = [element(a) for a in args]
        scalar_kwargs = {k: element(v) for k, v in kwargs.items()}
        with self.em.in_block(block):
            r = fn(*scalar_args, **scalar_kwargs)
            _check_pure(block, what)
            if isinstance(r, Const):
                t = r.type or default_type(r)
                r = Scalar(materialize(self.em, r, t), t)
            if not isinstance(r, Scalar):
                raise SemanticError(f"{what} on tiles must give one scalar per element, got {type_name(r)}")
            block.add_op(tile.YieldOp(r.ssa))
        result = TileType(r.type, shape)
        op = tile.MapOp(inputs, result.ir_type, Region(block))
        self.em.add(op)
        return TileValue(op.result, result)

    def broadcast(self, v: TileValue, shape: tuple[int, ...]) -> TileValue:
        """``v`` grown to ``shape`` (numpy rules: missing leading dims, then size-1 dims)."""
        while len(v.shape) < len(shape):
            v = self.expand_dims(v, 0)
        if v.shape == shape:
            return v
        t = TileType(v.elem, shape)
        return TileValue(self.em.value(tile.BroadcastOp(v.ssa, shape)), t)

    def expand_dims(self, v: TileValue, axis: int) -> TileValue:
        shape = list(v.shape)
        shape.insert(axis, 1)
        return TileValue(self.em.value(tile.ExpandDimsOp(v.ssa, axis)), TileType(v.elem, tuple(shape)))

    # ------------------------------------------------------------------ operators on tiles

    def expr_BinOp(self, node: ast.BinOp) -> Value:
        op = BINOPS.get(type(node.op))
        if op is None:
            raise SemanticError("the `@` operator is not supported in kernels", "use `kt.dot(a, b, acc)`")
        return self.binop(op, self.eval(node.left), self.eval(node.right))

    def binop(self, op: str, a: Value, b: Value) -> Value:
        if isinstance(a, TileValue) or isinstance(b, TileValue):
            return self.lift(partial(binary, self.em, op), [a, b], {}, f"operator `{op}`")
        return binary(self.em, op, a, b)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        v = self.eval(node.operand)
        if isinstance(v, TileValue):
            word = UNARYOPS[type(node.op)]
            if word == "not":
                raise SemanticError("`not` takes one bool, not a tile", "use `~mask` for bool tiles")
            return self.lift(partial(unary, self.em, word), [v], {}, f"operator `{word}`")
        return super().expr_UnaryOp(node)

    def expr_Compare(self, node: ast.Compare) -> Value:
        left = self.eval(node.left)
        if len(node.ops) == 1:
            right = self.eval(node.comparators[0])
            if isinstance(left, TileValue) or isinstance(right, TileValue):
                op = CMPOPS.get(type(node.ops[0]))
                if op is None:
                    raise SemanticError("tiles compare with == != < <= > >=")
                return self.lift(partial(compare, self.em, op), [left, right], {}, f"comparison `{op}`")
            return super()._compare_chain(left, node.ops, node.comparators)
        if isinstance(left, TileValue):
            raise SemanticError("chained comparisons of tiles are not supported", "combine masks with `&`")
        return super()._compare_chain(left, node.ops, node.comparators)

    def expr_BoolOp(self, node: ast.BoolOp) -> Value:
        first = self.eval(node.values[0])
        if isinstance(first, TileValue):
            raise SemanticError("`and`/`or` take bools, not tiles", "combine bool tiles with `&` and `|`")
        return super().expr_BoolOp(node)

    def expr_IfExp(self, node: ast.IfExp) -> Value:
        test = self.eval(node.test)
        if isinstance(test, TileValue):
            raise SemanticError("a tile cannot be the condition of `... if ... else ...`", "use `kt.where(cond, a, b)`")
        return super().expr_IfExp(node)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        target = node.target
        if isinstance(target, ast.Name):
            op = BINOPS.get(type(node.op))
            if op is None:
                raise SemanticError("the `@=` operator is not supported in kernels")
            self.assign_target(target, self.binop(op, self.lookup(target.id), self.eval(node.value)))
            return
        super().stmt_AugAssign(node)

    def expr_Subscript(self, node: ast.Subscript) -> Value:
        base = self.eval(node.value)
        if isinstance(base, TileValue):
            raise SemanticError(
                "tiles cannot be indexed element by element",
                "reduce them (`kt.sum(t, 0)`), or load and store whole tiles",
            )
        return super().expr_Subscript(node)

    def store(self, base: Value, index_node: ast.expr, value: Value) -> None:
        if isinstance(value, TileValue):
            raise SemanticError("a tile is written with `kt.store(array, offsets, tile, bounds)`")
        super().store(base, index_node, value)

    # ------------------------------------------------------------------ calls

    def call_handler(self, obj: Any, node: ast.Call) -> Callable[[ast.Call, Args, Kwargs], Value]:
        handler = _TILE_BUILTINS.get(id(obj))  # kaio.tile's markers live as long as the module
        if handler is not None:
            return partial(handler, self)
        scalar = super().call_handler(obj, node)
        name = getattr(obj, "name", None) or getattr(obj, "__name__", "this function")

        def lifted(node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
            if any(isinstance(v, TileValue) for v in (*args, *kwargs.values())):
                return self.lift(lambda *a, **k: scalar(node, list(a), k), args, kwargs, f"`{name}`")
            return scalar(node, args, kwargs)

        return lifted


def _check_pure(block: Block, what: str) -> None:
    """Elementwise code may run once per copy of an element, or not at all: it cannot write."""
    for op in block.walk():
        if op.has_trait(MemoryWriteEffect):
            raise SemanticError(
                f"{what} on tiles would write memory element by element (`{op.name}`)",
                "update arrays from tiles with kt.store or kt.atomic_add(array, offsets, values, mask)",
            )


# ---------------------------------------------------------------------------- shapes


def broadcast_shape(shapes: list[tuple[int, ...]], what: str) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + s for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            listed = " and ".join(str(s) for s in shapes)
            raise SemanticError(
                f"{what}: tiles of shapes {listed} do not broadcast",
                "dims must match or be 1; use kt.expand_dims / kt.broadcast_to to line them up",
            )
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _shape_arg(v: Value, what: str, node: ast.AST) -> tuple[int, ...]:
    items = v.items if isinstance(v, TupleValue) else (v,)
    shape = []
    for item in items:
        c = compile_time(item)
        if c is None or isinstance(c.value, bool) or not isinstance(c.value, int):
            raise SemanticError(f"{what} must be compile-time ints, got {type_name(item)}", "use literals or constexprs", node)
        shape.append(int(c.value))
    check_shape(tuple(shape), what, node)
    return tuple(shape)


def check_shape(shape: tuple[int, ...], what: str, node: ast.AST) -> None:
    if not 1 <= len(shape) <= 2:
        raise SemanticError(f"{what}: tiles are 1-D or 2-D, got {len(shape)} dims", None, node)
    for d in shape:
        if d < 1 or d & (d - 1):
            raise SemanticError(
                f"{what}: tile dims must be powers of two, got {shape}",
                "round the tile up to a power of two and mask the edge with the bounds",
                node,
            )
    if math.prod(shape) > MAX_TILE_ELEMENTS:
        raise SemanticError(
            f"{what}: a {shape} tile has {math.prod(shape)} elements, more than the "
            f"{MAX_TILE_ELEMENTS} one CTA can hold in registers and shared memory",
            "use smaller tiles and loop over the rest",
            node,
        )


def _tile(v: Value, what: str, node: ast.AST) -> TileValue:
    if not isinstance(v, TileValue):
        raise SemanticError(f"{what} must be a tile, got {type_name(v)}", None, node)
    return v


def _dtype(v: Value, what: str, node: ast.AST) -> ScalarType:
    if isinstance(v, PyObject) and isinstance(v.obj, ScalarType):
        return v.obj
    raise SemanticError(f"{what} must be a kaio type (f32, f16, i32...), got {type_name(v)}", None, node)


def _index32(fc: TileCompiler, v: Value, what: str, node: ast.AST) -> SSAValue:
    """A 32-bit integer operand of a view (offsets, bounds, strides)."""
    if isinstance(v, Const):
        if isinstance(v.value, bool | float) or (v.type is not None and not v.type.is_int) or not 0 <= v.value < 1 << 31:
            raise SemanticError(f"{what} must be a non-negative 32-bit integer, got {v.value!r}", None, node)
        return fc.em.constant(int(v.value), i32)
    if isinstance(v, Scalar) and v.type.is_int and v.type.bits == 32:
        return v.ssa
    if isinstance(v, Scalar) and v.type.is_int:
        return cast(fc.em, v, u32 if v.type.kind == "uint" else i32).ssa  # type: ignore[union-attr]
    raise SemanticError(f"{what} must be an integer, got {type_name(v)}", "cast it: `i32(x)`", node)


def _tuple_of(v: Value, n: int, what: str, node: ast.AST) -> tuple[Value, ...]:
    items = v.items if isinstance(v, TupleValue) else (v,)
    if len(items) != n:
        raise SemanticError(f"{what} needs {n} value(s) for a {n}-D tile, got {len(items)}", None, node)
    return items


def _array(v: Value, what: str, node: ast.AST) -> ArrayRef:
    if not isinstance(v, ArrayRef):
        raise SemanticError(f"{what} must be an Array or MutArray parameter, got {type_name(v)}", None, node)
    return v


def _element(fc: TileCompiler, v: Value, t: ScalarType, what: str) -> SSAValue:
    if isinstance(v, Const):
        return materialize(fc.em, adapt(v, t), t)
    if isinstance(v, Scalar) and v.type is t:
        return v.ssa
    raise SemanticError(f"{what} must be a {t.name} scalar, got {type_name(v)}", f"cast it: `{t.name}(x)`")


# ---------------------------------------------------------------------------- kt builtins


def _program_id(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    return _grid_index(BlockIdOp, fc, node, args, kwargs)


def _num_programs(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    return _grid_index(GridDimOp, fc, node, args, kwargs)


def _grid_index(cls: Any, fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    (axis,) = _signature(node, args, kwargs, "kt.program_id(axis=0)", ["axis"], {"axis": Const(0)})
    c = compile_time(axis)
    if c is None or c.value not in (0, 1, 2) or isinstance(c.value, bool):
        raise SemanticError("the axis is 0, 1 or 2", None, node)
    return Scalar(fc.em.value(cls(list(Dim)[int(c.value)])), u32)


def _arange(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    (n,) = _signature(node, args, kwargs, kt.arange.signature, ["n"])
    (size,) = _shape_arg(n, "kt.arange(n)", node)
    return TileValue(fc.em.value(tile.RangeOp(size)), TileType(i32, (size,)))


def _full(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    shape_v, value, dtype = _signature(node, args, kwargs, kt.full.signature, ["shape", "value", "dtype"])
    return _splat(fc, _shape_arg(shape_v, "the shape", _arg_node(node, 0)), value, _dtype(dtype, "dtype", node), node)


def _zeros(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    shape_v, dtype = _signature(node, args, kwargs, kt.zeros.signature, ["shape", "dtype"])
    return _splat(fc, _shape_arg(shape_v, "the shape", _arg_node(node, 0)), Const(0), _dtype(dtype, "dtype", node), node)


def _splat(fc: TileCompiler, shape: tuple[int, ...], value: Value, t: ScalarType, node: ast.AST) -> TileValue:
    if isinstance(value, Scalar) and value.type is not t:
        raise SemanticError(f"the fill value is {value.type.name}, the tile {t.name}", f"cast it: `{t.name}(v)`", node)
    ssa = _element(fc, value, t, "the fill value")
    return TileValue(fc.em.value(tile.SplatOp(ssa, shape)), TileType(t, shape))


def _view(fc: TileCompiler, array: ArrayRef, offsets: Value, shape: tuple[int, ...], bounds: Value,
          strides: Value, node: ast.Call) -> SSAValue:  # fmt: skip
    rank = len(shape)
    offs_v, bnds_v = _tuple_of(offsets, rank, "offsets", node), _tuple_of(bounds, rank, "bounds", node)
    dims = [view_dim(fc.em, o, b, lambda v, what: _index32(fc, v, what, node)) for o, b in zip(offs_v, bnds_v, strict=True)]
    offs, bnds = [o for o, _ in dims], [b for _, b in dims]
    if isinstance(strides, NoneValue) or (isinstance(strides, PyObject) and strides.obj is None):
        strides_v: tuple[Value, ...] = (bnds_v[1], Const(1)) if rank == 2 else (Const(1),)
    else:
        strides_v = _tuple_of(strides, rank, "strides", node)
    strd = [_index32(fc, v, "a stride", node) for v in strides_v]
    align = max(array.align // array.elem.nbytes, 1)  # base assumed aligned so (checked at launch)
    view = tile.ViewOp(array.ssa, offs, bnds, strd, shape, align)
    return fc.em.value(view)


def _load(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    if len(args) >= 2 and isinstance(args[1], TileValue):  # gather form
        array, index, mask, other = _signature(
            node, args, kwargs, kt.load.signature, ["array", "index", "mask", "other"],
            {"mask": PyObject(None), "other": Const(0)},
        )  # fmt: skip
        ref = _array(array, "the array", node)
        idx = _index_tile(fc, index, node)
        m = _mask_tile(fc, mask, idx, node)
        o = _element(fc, other, ref.elem, "`other`")
        op = tile.GatherOp(ref.ssa, idx.ssa, m.ssa, o)
        return TileValue(fc.em.value(op), TileType(ref.elem, idx.shape))
    array, offsets, shape_v, bounds, strides, other = _signature(
        node, args, kwargs, kt.load.signature, ["array", "offsets", "shape", "bounds", "strides", "other"],
        {"strides": PyObject(None), "other": Const(0)},
    )  # fmt: skip
    ref = _array(array, "the array", node)
    shape = _shape_arg(shape_v, "the shape", _arg_node(node, 2))
    view = _view(fc, ref, offsets, shape, bounds, strides, node)
    o = _element(fc, other, ref.elem, "`other`")
    return TileValue(fc.em.value(tile.LoadOp(view, o)), TileType(ref.elem, shape))


def _store(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    if len(args) >= 2 and isinstance(args[1], TileValue):  # scatter form
        array, index, value, mask = _signature(
            node, args, kwargs, kt.store.signature, ["array", "index", "tile", "mask"], {"mask": PyObject(None)}
        )
        ref = _writable(_array(array, "the array", node), node)
        idx = _index_tile(fc, index, node)
        v = _store_value(fc, value, ref, idx.shape, node)
        m = _mask_tile(fc, mask, idx, node)
        fc.em.add(tile.ScatterOp(ref.ssa, idx.ssa, v.ssa, m.ssa))
        return NoneValue()
    array, offsets, value, bounds, strides = _signature(
        node, args, kwargs, kt.store.signature, ["array", "offsets", "tile", "bounds", "strides"],
        {"strides": PyObject(None)},
    )  # fmt: skip
    ref = _writable(_array(array, "the array", node), node)
    t = _tile(value, "the stored value", _arg_node(node, 2))
    v = _store_value(fc, t, ref, t.shape, node)
    view = _view(fc, ref, offsets, v.shape, bounds, strides, node)
    fc.em.add(tile.StoreOp(view, v.ssa))
    return NoneValue()


def _writable(ref: ArrayRef, node: ast.AST) -> ArrayRef:
    if not ref.kaio_type.mutable:
        raise SemanticError(
            f"cannot write to `{ref.name}`: it is a read-only {ref.kaio_type!r}",
            f"declare the parameter as MutArray[{ref.elem.name}]",
            node,
        )
    return ref


def _store_value(fc: TileCompiler, v: Value, ref: ArrayRef, shape: tuple[int, ...], node: ast.AST) -> TileValue:
    if isinstance(v, Scalar | Const):
        return _splat(fc, shape, v, ref.elem, node)
    t = _tile(v, "the stored value", node)
    if t.elem is not ref.elem:
        raise SemanticError(
            f"cannot store a {t.type.name} into `{ref.name}` of {ref.elem.name}",
            f"cast the tile: `{ref.elem.name}(t)`",
            node,
        )
    if t.shape != shape:
        return fc.broadcast(t, broadcast_shape([t.shape, shape], "kt.store"))
    return t


def _index_tile(fc: TileCompiler, v: Value, node: ast.AST) -> TileValue:
    t = _tile(v, "the index", node)
    if not t.elem.is_int or t.elem.bits != 32:
        raise SemanticError(f"gather/scatter indices are i32 or u32 tiles, got {t.type.name}", "cast: `i32(idx)`", node)
    if t.elem is not i32:
        t = TileValue(t.ssa, TileType(i32, t.shape))  # the same bits: indices are compared unsigned
    return t


def _mask_tile(fc: TileCompiler, mask: Value, idx: TileValue, node: ast.AST) -> TileValue:
    from kaio.dtypes import bool_

    if isinstance(mask, PyObject) and mask.obj is None:
        return _splat(fc, idx.shape, Const(True, bool_), bool_, node)
    if isinstance(mask, Const | Scalar):
        return _splat(fc, idx.shape, mask, bool_, node)
    m = _tile(mask, "the mask", node)
    if m.elem is not bool_:
        raise SemanticError(f"the mask is a bool tile, got {m.type.name}", "compare: `offs < n`", node)
    return fc.broadcast(m, broadcast_shape([m.shape, idx.shape], "the mask"))


def _multiple_of(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    value, n = _signature(node, args, kwargs, kt.multiple_of.signature, ["value", "n"])
    c = compile_time(n)
    if c is None or not isinstance(c.value, int) or c.value < 1 or c.value & (c.value - 1):
        raise SemanticError("kt.multiple_of takes a compile-time power of two", None, node)
    if isinstance(value, Const):
        return value
    if isinstance(value, ArrayRef):  # the base address, in bytes: never more than a launch proved
        return ArrayRef(value.ssa, value.kaio_type, value.name, min(int(c.value), value.align))
    if not isinstance(value, Scalar) or not value.type.is_int or value.type.bits != 32:
        raise SemanticError(f"kt.multiple_of takes a 32-bit integer, got {type_name(value)}", None, node)
    return Scalar(fc.em.value(tile.MultipleOfOp(value.ssa, int(c.value))), value.type)


def _trans(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    (t,) = _signature(node, args, kwargs, kt.trans.signature, ["t"])
    v = _tile(t, "kt.trans's argument", node)
    if len(v.shape) != 2:
        raise SemanticError(f"kt.trans takes a 2-D tile, got {v.type.name}", None, node)
    return TileValue(fc.em.value(tile.TransOp(v.ssa)), TileType(v.elem, (v.shape[1], v.shape[0])))


def _expand_dims(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    t, axis = _signature(node, args, kwargs, kt.expand_dims.signature, ["t", "axis"])
    v = _tile(t, "kt.expand_dims's argument", node)
    c = compile_time(axis)
    if c is None or not isinstance(c.value, int) or not -len(v.shape) - 1 <= c.value <= len(v.shape):
        raise SemanticError(f"axis must be a compile-time int in range for a {v.type.name}", None, node)
    if len(v.shape) >= 2:
        raise SemanticError("tiles are at most 2-D: expand_dims takes a 1-D tile", None, node)
    return fc.expand_dims(v, int(c.value) % (len(v.shape) + 1))


def _broadcast_to(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    t, shape_v = _signature(node, args, kwargs, kt.broadcast_to.signature, ["t", "shape"])
    shape = _shape_arg(shape_v, "the shape", node)
    if isinstance(t, Scalar | Const):
        s = t.type if isinstance(t, Scalar) else (t.type or default_type(t))
        return _splat(fc, shape, t, s, node)
    v = _tile(t, "kt.broadcast_to's argument", node)
    if broadcast_shape([v.shape, shape], "kt.broadcast_to") != shape:
        raise SemanticError(f"cannot broadcast a {v.type.name} to {shape}", None, node)
    return fc.broadcast(v, shape)


def _where(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    cond, a, b = _signature(node, args, kwargs, kt.where.signature, ["cond", "a", "b"])

    def select(c: Value, x: Value, y: Value) -> Value:
        from kaio.dtypes import bool_

        if not isinstance(c, Scalar | Const) or (c.type is not bool_):
            raise SemanticError(f"kt.where's condition must be bool, got {type_name(c)}", "compare: `x > 0`")
        t = unify(x, y, "kt.where")
        return Scalar(fc.em.value(arith.SelectOp(materialize(fc.em, c, bool_), materialize(fc.em, x, t), materialize(fc.em, y, t))), t)

    if not any(isinstance(v, TileValue) for v in (cond, a, b)):
        return select(cond, a, b)
    return fc.lift(select, [cond, a, b], {}, "kt.where")


def _extreme(is_max: bool, fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    from kaio import prelude as kp

    name = "maximum" if is_max else "minimum"
    a, b = _signature(node, args, kwargs, f"kt.{name}(a, b)", ["a", "b"])
    scalar = fc.call_handler(kp.max if is_max else kp.min, node)
    return scalar(node, [a, b], {})


def _maximum(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    return _extreme(True, fc, node, args, kwargs)


def _minimum(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    return _extreme(False, fc, node, args, kwargs)


_COMBINE = {
    "sum": (Combine.ADDF, Combine.ADDI, Combine.ADDI),
    "max": (Combine.MAXF, Combine.MAXS, Combine.MAXU),
    "min": (Combine.MINF, Combine.MINS, Combine.MINU),
}


def _reduction(kind: str, fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    t, axis = _signature(node, args, kwargs, f"kt.{kind}(t, axis)", ["t", "axis"])
    v = _tile(t, f"kt.{kind}'s argument", node)
    c = compile_time(axis)
    if c is None or not isinstance(c.value, int) or isinstance(c.value, bool) or not -len(v.shape) <= c.value < len(v.shape):
        raise SemanticError(f"kt.{kind}: axis must be a compile-time int in range for a {v.type.name}", None, node)
    ax = int(c.value) % len(v.shape)
    if v.elem.is_bool:
        raise SemanticError(f"kt.{kind} of a bool tile", "cast it first: `i32(mask)`", node)
    narrow = v.elem.is_float and v.elem.bits < 32  # reduce 16-bit floats in f32, as accumulators should
    src = fc.lift(lambda x: cast(fc.em, x, f32), [v], {}, "the cast") if narrow else v
    f, s, u = _COMBINE[kind]
    combine = f if src.elem.is_float else (s if src.elem.kind == "int" else u)
    if src.elem.is_int and src.elem.bits < 32:
        raise SemanticError(f"kt.{kind} of {src.elem.name} tiles", "cast to a 32-bit type first", node)
    op = tile.ReduceOp(src.ssa, ax, CombineAttr(combine))
    fc.em.add(op)
    shape = tuple(d for i, d in enumerate(src.shape) if i != ax)
    result: Value = TileValue(op.result, TileType(src.elem, shape)) if shape else Scalar(op.result, src.elem)
    if narrow:
        result = fc.lift(lambda x: cast(fc.em, x, v.elem), [result], {}, "the cast") if shape else cast(fc.em, result, v.elem)
    return result


def _sum(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    return _reduction("sum", fc, node, args, kwargs)


def _max(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    return _reduction("max", fc, node, args, kwargs)


def _min(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    return _reduction("min", fc, node, args, kwargs)


def _dot(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    a, b, acc = _signature(node, args, kwargs, kt.dot.signature, ["a", "b", "acc"])
    ta, tb = _tile(a, "A", _arg_node(node, 0)), _tile(b, "B", _arg_node(node, 1))
    tc = _tile(acc, "the accumulator", _arg_node(node, 2))
    if len(ta.shape) != 2 or len(tb.shape) != 2 or len(tc.shape) != 2:
        raise SemanticError("kt.dot takes 2-D tiles", None, node)
    (m, k), (k2, n) = ta.shape, tb.shape
    if k != k2 or tc.shape != (m, n):
        raise SemanticError(
            f"kt.dot of A {ta.shape} and B {tb.shape} into an accumulator {tc.shape}: shapes do not match",
            "A is (M, K), B is (K, N), acc is (M, N); `kt.trans(t)` transposes a tile",
            node,
        )
    family = _DOT_FAMILIES.get(ta.elem.name)
    if family is None:
        raise SemanticError(f"kt.dot takes f16, bf16, f32, i8/u8 or f8e4m3/f8e5m2 tiles, not {ta.elem.name}", None, node)
    if _DOT_FAMILIES.get(tb.elem.name) != family or (family in ("f16", "bf16", "f32") and ta.elem is not tb.elem):
        raise SemanticError(f"kt.dot of {ta.elem.name} and {tb.elem.name} tiles", "cast one: `f16(b)` (i8 and u8 may mix, and so may f8e4m3 and f8e5m2)", node)
    acc_name = "i32" if family == "int8" else "f32"
    if tc.elem.name != acc_name:
        raise SemanticError(
            f"kt.dot of {ta.elem.name} tiles accumulates in {acc_name}, got a {tc.elem.name} accumulator ({tc.type.name})",
            f"start from `kt.zeros(shape, {acc_name})`", node,
        )  # fmt: skip
    low = 32 if family in ("int8", "fp8") else 16
    if family != "f32" and (min(m, n) < 16 or k < low):
        raise SemanticError(f"kt.dot of {ta.elem.name} tiles needs M and N of at least 16 and K of at least {low}, got {m}x{n}x{k}", f"pad the tiles to {low}", node)
    unsigned = (ta.elem.name == "u8", tb.elem.name == "u8")
    return TileValue(fc.em.value(tile.DotOp(ta.ssa, tb.ssa, tc.ssa, unsigned=unsigned)), tc.type)


# operand type -> its kt.dot family (one family per dot): the accumulator is i32 for 8-bit integers, else f32
_DOT_FAMILIES = {"f16": "f16", "bf16": "bf16", "f32": "f32", "i8": "int8", "u8": "int8", "f8e4m3": "fp8", "f8e5m2": "fp8"}


def _randint4x(fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    """Four tiles of random words: each word lifted on its own (a lift gives one scalar per
    element); the maps hold the same Philox op, which fusing them and CSE make one."""
    parts = COMPONENTS[kt.randint4x]
    if not any(isinstance(v, TileValue) for v in (*args, *kwargs.values())):
        return RANDOM_BUILTINS[kt.randint4x](fc, node, args, kwargs)
    lifted = (fc.lift(lambda *a, part=part, **k: part(fc, node, list(a), k), args, kwargs, "kt.randint4x") for part in parts)
    return TupleValue(tuple(lifted))


_TILE_BUILTINS: dict[int, Callable[..., Value]] = {
    id(getattr(kt, h.__name__.lstrip("_"))): h
    for h in (
        _program_id, _num_programs, _arange, _zeros, _full, _load, _store, _multiple_of, _trans,
        _expand_dims, _broadcast_to, _where, _maximum, _minimum, _sum, _max, _min, _dot, _randint4x,
    )
}  # fmt: skip


def register_tile_builtins(handlers: dict[object, Callable[..., Value]]) -> None:
    """Compile calls of these markers (``kt.*`` or prelude builtins) in tile kernels with these
    handlers ``(compiler, node, args, kwargs) -> Value``."""
    _TILE_BUILTINS.update({id(marker): h for marker, h in handlers.items()})
