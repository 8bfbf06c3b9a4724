"""Atomics in tile kernels: ``kt.atomic_add/max/min/xchg/and/or/xor/cas`` (Triton's semantics).

With a tile among the offsets, values and mask, there is one atomic per element (after
broadcasting them together), done exactly once however many threads hold copies of the element,
and the result is a tile of the old values. With scalars only, the atomic is one per program
(Triton runs a scalar atomic once per program too): a program is a whole CTA, and updating once
per thread would multiply the update by the CTA's size. The SIMT builtins ``atomic_add`` ...
(``kaio.prelude``) mean the same inside a tile kernel; importing this module registers both.
"""

from __future__ import annotations

import ast
from functools import partial

from kaio import prelude as kp
from kaio import tile as kt
from kaio.dialects import tile
from kaio.dialects.kernel import Combine
from kaio.dtypes import ScalarType, bool_, i32
from kaio.frontend.call_args import _arg_node, _signature
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.tiles import (
    Args,
    Kwargs,
    TileCompiler,
    _array,
    _element,
    _index32,
    _index_tile,
    _mask_tile,
    _writable,
    broadcast_shape,
    register_tile_builtins,
)
from kaio.frontend.values import Const, PyObject, Scalar, TileType, TileValue, Value, type_name

# kind -> (float, signed, unsigned) combine; None: no such atomic on that kind of element
_COMBINES: dict[str, tuple[Combine | None, Combine, Combine]] = {
    "add": (Combine.ADDF, Combine.ADDI, Combine.ADDI),
    "max": (Combine.MAXF, Combine.MAXS, Combine.MAXU),
    "min": (Combine.MINF, Combine.MINS, Combine.MINU),
    "xchg": (Combine.EXCH, Combine.EXCH, Combine.EXCH),
    "and": (None, Combine.ANDI, Combine.ANDI),
    "or": (None, Combine.ORI, Combine.ORI),
    "xor": (None, Combine.XORI, Combine.XORI),
    "cas": (None, Combine.EXCH, Combine.EXCH),  # the combine is unused: cas has its own op
}
_FLOATS = {"add": ("f16", "bf16", "f32", "f64"), "max": ("f32",), "min": ("f32",), "xchg": ("f32", "f64")}


def _combine(kind: str, t: ScalarType, name: str, node: ast.AST) -> Combine:
    """The update of ``kind`` on ``t`` elements, or an error naming what the hardware has."""
    f, s, u = _COMBINES[kind]
    if t.is_float and t.name in _FLOATS.get(kind, ()) and f is not None:
        return f
    if t.is_int and t.bits in (32, 64):
        return s if t.kind == "int" else u
    floats = ", ".join(_FLOATS.get(kind, ()))
    raise SemanticError(
        f"{name} works on 32- and 64-bit integer{' and ' + floats if floats else ''} arrays, not {t.name}",
        "keep the array in a type the atomic has (view 16-bit data as pairs in a 32-bit array)",
        node,
    )


def _value_tile(fc: TileCompiler, v: Value, t: ScalarType, shape: tuple[int, ...], name: str, node: ast.AST) -> TileValue:
    """``v`` (a tile or a scalar of the array's type) as a tile of ``shape``."""
    if isinstance(v, TileValue):
        if v.elem is not t:
            raise SemanticError(f"{name} of {v.elem.name} values into an array of {t.name}", f"cast the tile: `{t.name}(v)`", node)
        return fc.broadcast(v, shape)
    ssa = _scalar_value(fc, v, t, name, node)
    return TileValue(fc.em.value(tile.SplatOp(ssa, shape)), TileType(t, shape))


def _scalar_value(fc: TileCompiler, v: Value, t: ScalarType, name: str, node: ast.AST) -> object:
    if isinstance(v, Scalar) and v.type is not t:
        raise SemanticError(f"{name} of a {v.type.name} value into an array of {t.name}", f"cast it: `{t.name}(v)`", node)
    if not isinstance(v, Scalar | Const):
        raise SemanticError(f"{name}'s values must be a tile or a {t.name} scalar, got {type_name(v)}", None, node)
    return _element(fc, v, t, "the value")


def _scalar_mask(fc: TileCompiler, mask: Value, node: ast.AST) -> object:
    if isinstance(mask, PyObject) and mask.obj is None:
        return fc.em.constant(True, bool_)
    if isinstance(mask, Scalar | Const) and (mask.type is bool_ or isinstance(mask, Const) and isinstance(mask.value, bool)):
        return _element(fc, mask, bool_, "the mask")
    raise SemanticError(f"the mask must be a bool or a bool tile, got {type_name(mask)}", "compare: `offs < n`", node)


def _atomic(kind: str, spec: str, names: list[str], fc: TileCompiler, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    name = spec.split("(")[0]
    array, index, *values, mask = _signature(node, args, kwargs, spec, [*names, "mask"], {"mask": PyObject(None)})
    ref = _writable(_array(array, "the array", _arg_node(node, 0)), _arg_node(node, 0))
    t = ref.elem
    combine = _combine(kind, t, name, node)
    tiles = [v for v in (index, *values, mask) if isinstance(v, TileValue)]
    if not tiles:  # one atomic per program
        idx = _index32(fc, index, "the index", _arg_node(node, 1))
        vals = [_scalar_value(fc, v, t, name, node) for v in values]
        m = _scalar_mask(fc, mask, node)
        op = (
            tile.AtomicCasOp(ref.ssa, idx, vals[0], vals[1], m)  # type: ignore[arg-type]
            if kind == "cas" else tile.AtomicRMWOp(combine, ref.ssa, idx, vals[0], m)  # type: ignore[arg-type]
        )  # fmt: skip
        return Scalar(fc.em.value(op), t)
    shape = broadcast_shape([v.shape for v in tiles], name)
    if isinstance(index, TileValue):
        idx_t = fc.broadcast(_index_tile(fc, index, _arg_node(node, 1)), shape)
    else:
        splat = tile.SplatOp(_index32(fc, index, "the index", _arg_node(node, 1)), shape)
        idx_t = TileValue(fc.em.value(splat), TileType(i32, shape))
    vals_t = [_value_tile(fc, v, t, shape, name, node).ssa for v in values]
    m_t = _mask_tile(fc, mask, idx_t, node).ssa
    op = (
        tile.AtomicCasOp(ref.ssa, idx_t.ssa, vals_t[0], vals_t[1], m_t)
        if kind == "cas" else tile.AtomicRMWOp(combine, ref.ssa, idx_t.ssa, vals_t[0], m_t)
    )  # fmt: skip
    return TileValue(fc.em.value(op), TileType(t, shape))


def _handlers() -> dict[object, object]:
    handlers: dict[object, object] = {}
    for kind in _COMBINES:
        marker = getattr(kt, f"atomic_{kind}")
        names = ["array", "offsets", "compare", "values"] if kind == "cas" else ["array", "offsets", "values"]
        handlers[marker] = partial(_atomic, kind, marker.signature, names)
    for kind, simt in (("add", "add"), ("max", "max"), ("min", "min"), ("xchg", "exch"), ("cas", "cas")):
        marker = getattr(kp, f"atomic_{simt}")  # the SIMT spelling, with its argument names
        names = ["array", "index", "compare", "value"] if kind == "cas" else ["array", "index", "value"]
        signature = marker.signature[:-1] + ", mask=None)"
        handlers[marker] = partial(_atomic, kind, signature, names)
    return handlers


register_tile_builtins(_handlers())
