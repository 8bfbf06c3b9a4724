"""Builtins on the bits of words, for dequantising kernels: ``dp4a dp2a prmt lop3 bitcast
unpack_nibble``.

Words are 32-bit integers; a word's type says how its packed lanes read (``i32``: signed bytes,
``u32``: unsigned), so ``dp4a(a, b, c)`` picks ``dp4a.s32.u32`` from ``a: i32, b: u32`` and a
cast (``u32(a)``, free) changes it. Calls on constants fold with the runtime semantics.

``unpack_nibble(word, index, dtype=f16, zero=0)`` is Marlin's magic-number dequantisation: the
nibble ``(word >> 4*index) & 0xF`` is or-ed into the fraction of the 16-bit float 1024.0 (f16,
0x6400) or 128.0 (bf16, 0x4300), where one unit of the fraction is exactly 1.0, with one
``lop3``; subtracting ``1024 + zero`` (one half-precision ``sub``) leaves the exact ``q - zero``.
No integer-to-float conversion (a slow instruction) is needed, and in a tile two neighbouring
elements subtract as one ``sub.f16x2``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import i16

from kaio import prelude as kp
from kaio.dialects.kernel_bits import Dp2aOp, Dp4aOp, Lop3Op, PrmtOp
from kaio.dtypes import ScalarType, bf16, f16, i32, u32
from kaio.frontend.call_args import _arg_node, _signature
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.operators import compile_time, materialize
from kaio.frontend.typerules import wrap_int
from kaio.frontend.values import Const, PyObject, Scalar, Value, type_name

Args = list[Value]
Kwargs = dict[str, Value]

# 1.0 per unit in the last place: nibbles or-ed into the fraction are exact small integers
NIBBLE_MAGIC: dict[str, tuple[int, float]] = {"f16": (0x6400, 1024.0), "bf16": (0x4300, 128.0)}
LUT_AND_OR = (0xF0 & 0xCC) | 0xAA  # lop3 truth table of (a & b) | c


def _word(v: Value, what: str, node: ast.AST) -> Scalar | Const:
    """A 32-bit integer operand (i32 or u32; an int literal is i32 if it fits, else u32)."""
    if isinstance(v, Const) and v.type is None and isinstance(v.value, int) and not isinstance(v.value, bool):
        if not -(1 << 31) <= v.value < (1 << 32):
            raise SemanticError(f"{what} {v.value} does not fit 32 bits", None, node)
        return Const(v.value, i32 if v.value < (1 << 31) else u32)
    t = v.type if isinstance(v, Scalar | Const) else None
    if t is None or not t.is_int or t.bits != 32:
        raise SemanticError(f"{what} must be a 32-bit word (i32 or u32), got {type_name(v)}", "cast it: `u32(x)`", node)
    return v  # type: ignore[return-value]


def _ssa(fc: Any, v: Scalar | Const) -> Any:
    assert v.type is not None
    return materialize(fc.em, v, v.type) if isinstance(v, Scalar) else fc.em.constant(int(v.value), v.type)


def _u(v: Const) -> int:
    return int(v.value) & 0xFFFFFFFF


def _lanes(x: int, width: int, signed: bool) -> list[int]:
    out = [(x >> (width * k)) & ((1 << width) - 1) for k in range(32 // width)]
    return [q - (1 << width) if signed and q >> (width - 1) else q for q in out]


def _const_int(v: Value, what: str, node: ast.AST, lo: int, hi: int) -> int:
    c = compile_time(v)
    if c is None or isinstance(c.value, bool | float) or not lo <= int(c.value) <= hi:
        raise SemanticError(f"{what} must be a compile-time integer in {lo} .. {hi}, got {type_name(v)}", None, node)
    return int(c.value)


# ---------------------------------------------------------------------------- dp4a / dp2a


def _dot(pairs: int, fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    name = "dp4a" if pairs == 4 else "dp2a"
    spec = getattr(kp, name).signature
    names, defaults = (["a", "b", "c"], {}) if pairs == 4 else (["a", "b", "c", "hi"], {"hi": Const(False)})
    bound = _signature(node, args, kwargs, spec, names, defaults)  # type: ignore[arg-type]
    a, b = (_word(v, f"`{name}`'s {n}", _arg_node(node, i)) for i, (v, n) in enumerate(zip(bound[:2], "ab")))
    signed_a, signed_b = a.type.kind == "int", b.type.kind == "int"  # type: ignore[union-attr]
    out = i32 if signed_a or signed_b else u32
    c = _word(bound[2], f"`{name}`'s accumulator c", _arg_node(node, 2))
    if isinstance(c, Const) and (bound[2].type is None):  # a literal adapts to the result type
        c = Const(wrap_int(int(c.value), out), out)
    if c.type is not out:
        raise SemanticError(
            f"`{name}`'s accumulator c must be {out.name} (the result: a is {a.type.name}, b is {b.type.name}), got {c.type.name}",  # type: ignore[union-attr]
            f"cast it: `{out.name}(c)`", _arg_node(node, 2),
        )  # fmt: skip
    hi = False
    if pairs == 2:
        h = compile_time(bound[3])
        if h is None or not isinstance(h.value, bool):
            raise SemanticError("`dp2a`'s hi must be a compile-time bool (True: b's bytes 2-3)", None, node)
        hi = bool(h.value)
    if isinstance(a, Const) and isinstance(b, Const) and isinstance(c, Const):
        first = 2 if hi else 0
        xs = _lanes(_u(a), 8 if pairs == 4 else 16, signed_a)
        ys = _lanes(_u(b), 8, signed_b)[first : first + pairs]
        return Const(wrap_int(int(c.value) + sum(x * y for x, y in zip(xs, ys)), out), out)
    ops = (_ssa(fc, a), _ssa(fc, b), _ssa(fc, c))
    op = Dp4aOp(*ops, signed_a, signed_b) if pairs == 4 else Dp2aOp(*ops, signed_a, signed_b, hi)
    return Scalar(fc.em.value(op), out)


# ---------------------------------------------------------------------------- prmt / lop3


def prmt_fold(a: int, b: int, sel: int) -> int:
    """``prmt.b32`` (the default mode): byte k from nibble k of the selector."""
    src = (b << 32) | a
    out = 0
    for k in range(4):
        s = (sel >> (4 * k)) & 0xF
        byte = (src >> (8 * (s & 7))) & 0xFF
        if s & 8:  # replicate the byte's sign bit
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * k)
    return out


def _result_type(a: Scalar | Const) -> ScalarType:
    assert a.type is not None
    return a.type


def _prmt(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    a_v, b_v, s_v = _signature(node, args, kwargs, kp.prmt.signature, ["a", "b", "selector"])
    a, b = _word(a_v, "`prmt`'s a", _arg_node(node, 0)), _word(b_v, "`prmt`'s b", _arg_node(node, 1))
    sel = _word(s_v, "`prmt`'s selector", _arg_node(node, 2))
    t = _result_type(a)
    if isinstance(a, Const) and isinstance(b, Const) and isinstance(sel, Const):
        return Const(wrap_int(prmt_fold(_u(a), _u(b), _u(sel)), t), t)
    return Scalar(fc.em.value(PrmtOp(_ssa(fc, a), _ssa(fc, b), _ssa(fc, sel))), t)


def lop3_fold(a: int, b: int, c: int, lut: int) -> int:
    out = 0
    for bit in range(32):
        i = (((a >> bit) & 1) << 2) | (((b >> bit) & 1) << 1) | ((c >> bit) & 1)
        out |= ((lut >> i) & 1) << bit
    return out


def _lop3(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    bound = _signature(node, args, kwargs, kp.lop3.signature, ["a", "b", "c", "lut"])
    a, b, c = (_word(v, f"`lop3`'s {n}", _arg_node(node, i)) for i, (v, n) in enumerate(zip(bound[:3], "abc")))
    lut = _const_int(bound[3], "`lop3`'s lut (the truth table: f(0xF0, 0xCC, 0xAA))", _arg_node(node, 3), 0, 0xFF)
    t = _result_type(a)
    if all(isinstance(v, Const) for v in (a, b, c)):
        return Const(wrap_int(lop3_fold(_u(a), _u(b), _u(c), lut), t), t)  # type: ignore[arg-type]
    return Scalar(fc.em.value(Lop3Op(_ssa(fc, a), _ssa(fc, b), _ssa(fc, c), lut)), t)


# ---------------------------------------------------------------------------- bitcast


def _type_arg(v: Value, what: str, node: ast.AST) -> ScalarType:
    if not isinstance(v, PyObject) or not isinstance(v.obj, ScalarType):
        raise SemanticError(f"{what} must be a kaio type, got {type_name(v)}", "e.g. `f16`", node)
    return v.obj


def _bitcast(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    x_v, t_v = _signature(node, args, kwargs, kp.bitcast.signature, ["x", "T"])
    t = _type_arg(t_v, "`bitcast`'s T", _arg_node(node, 1))
    s = x_v.type if isinstance(x_v, Scalar | Const) else None
    if s is None:
        raise SemanticError(f"`bitcast` needs a typed value, got {type_name(x_v)}", f"give it a type: `u{t.bits}(...)`", _arg_node(node, 0))
    if s.is_bool or t.is_bool or s.bits != t.bits:
        raise SemanticError(f"`bitcast` reinterprets bits between types of one width, not {s.name} ({s.bits} bits) and {t.name} ({t.bits})", None, node)
    if s is t:
        return x_v
    if isinstance(x_v, Const):
        raw = np.array([x_v.value], dtype=s.np_dtype).view(t.np_dtype)[0]
        return Const(raw.item() if t.is_int else float(raw), t)
    x = materialize(fc.em, x_v, s)  # type: ignore[arg-type]
    if s.is_int and t.is_int:
        return Scalar(x, t)  # signless in the IR: the same value
    return Scalar(fc.em.value(arith.BitcastOp(x, t.ir_type)), t)


# ---------------------------------------------------------------------------- nibbles


def _unpack_nibble(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    w_v, i_v, d_v, z_v = _signature(node, args, kwargs, kp.unpack_nibble.signature, ["word", "index", "dtype", "zero"],
                                    {"dtype": PyObject(f16), "zero": Const(0)})  # fmt: skip
    word = _word(w_v, "`unpack_nibble`'s word", _arg_node(node, 0))
    t = _type_arg(d_v, "`unpack_nibble`'s dtype", _arg_node(node, 2))
    if t not in (f16, bf16):
        raise SemanticError(f"`unpack_nibble` makes f16 or bf16 values, not {t.name}", "convert the result: `f32(unpack_nibble(w, i))`", node)
    zero = _const_int(z_v, "`unpack_nibble`'s zero", _arg_node(node, 3), 0, 15)
    magic, base = NIBBLE_MAGIC[t.name]
    index_c = compile_time(i_v)
    if index_c is not None:
        index = _const_int(i_v, "`unpack_nibble`'s index", _arg_node(node, 1), 0, 7)
        if isinstance(word, Const):
            return Const(float(((_u(word) >> (4 * index)) & 0xF) - zero), t)
    em = fc.em
    w = _ssa(fc, word)
    if index_c is not None:
        shifted = w if index == 0 else em.value(arith.ShRUIOp(w, em.constant(4 * index, i32)))
    else:
        i = _word(i_v, "`unpack_nibble`'s index", _arg_node(node, 1))
        amount = em.value(arith.ShLIOp(_ssa(fc, i), em.constant(2, i32)))
        shifted = em.value(arith.ShRUIOp(w, amount))
    bits = em.value(Lop3Op(shifted, em.constant(0xF, i32), em.constant(magic, i32), LUT_AND_OR))
    half = em.value(arith.BitcastOp(em.value(arith.TruncIOp(bits, i16)), t.ir_type))
    return Scalar(em.value(arith.SubfOp(half, em.constant(base + zero, t))), t)


BIT_BUILTINS: dict[kp.Builtin, Callable[..., Value]] = {
    kp.dp4a: partial(_dot, 4),
    kp.dp2a: partial(_dot, 2),
    kp.prmt: _prmt,
    kp.lop3: _lop3,
    kp.bitcast: _bitcast,
    kp.unpack_nibble: _unpack_nibble,
}
