"""Random numbers in kernels, as Triton has them: ``randint4x randint rand randn``.

``rand(seed, offset)`` is a float32 in [0, 1), ``randn`` a standard normal float32, ``randint`` an
i32 and ``randint4x`` a tuple of four i32: counter-based Philox 4x32 (``kernel.philox``, 10
rounds by default, ``n_rounds=`` a compile-time int), the seed its key and the offset its counter,
so the same seed and offset give the same number in every thread, kernel, GPU and run, and the
same bits as Triton's ``tl.rand``/``tl.randint``/``tl.randint4x`` (``tl.randn`` within the last
bits of its log and cos). On tiles (``kt.rand(seed, offsets)``) every element is its offset's
number. :mod:`kaio.random` is the same in numpy, for the host.

``seed``: an integer scalar of any width (a kernel argument, usually ``u64``/``i64``; a literal
or constexpr), taken as uint64 (signed values sign-extended, as Triton's ``seed.to(uint64)``).
``offset``: an integer; a 64-bit offset puts its high word in the counter's second word.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import i64 as ir_i64
from xdsl.ir import SSAValue

from kaio import prelude as kp
from kaio import random as host
from kaio.dialects.kernel_random import MAX_ROUNDS, PhiloxOp
from kaio.dtypes import f32, i32, i64, u64
from kaio.frontend.call_args import _arg_node, _signature
from kaio.frontend.diagnostics import SemanticError
from kaio.frontend.operators import compile_time
from kaio.frontend.values import Const, Scalar, TupleValue, Value, type_name

Args = list[Value]
Kwargs = dict[str, Value]
Words = tuple[SSAValue, SSAValue, SSAValue, SSAValue]


def _integer(v: Value, what: str, node: ast.AST) -> Scalar | Const:
    if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool):
        return v
    t = v.type if isinstance(v, Scalar) else None
    if t is None or not t.is_int:
        raise SemanticError(f"{what} must be an integer, got {type_name(v)}", "e.g. a `u64` seed argument and `i32` offsets", node)
    return v  # type: ignore[return-value]


def _words64(fc: Any, v: Scalar) -> tuple[SSAValue, SSAValue]:
    """The low and high 32-bit words of an integer taken as 64 bits (signed: sign-extended)."""
    em, t = fc.em, v.type
    x = v.ssa
    if t.bits < 64:
        x = em.value((arith.ExtSIOp if t.kind == "int" else arith.ExtUIOp)(x, ir_i64))
    lo = em.value(arith.TruncIOp(x, i32.ir_type))
    hi = em.value(arith.TruncIOp(em.value(arith.ShRUIOp(x, em.constant(32, i64))), i32.ir_type))
    return lo, hi


def _counter_words(fc: Any, v: Scalar) -> tuple[SSAValue, SSAValue]:
    """Triton's counter: the offset as uint32 (narrower: extended by its sign), its high word
    when 64-bit, else zero."""
    if v.type.bits == 64:
        return _words64(fc, v)
    lo, _ = _words64(fc, v)
    return lo, fc.em.constant(0, i32)


def _rounds(v: Value, node: ast.AST) -> int:
    c = compile_time(v)
    if c is None or isinstance(c.value, bool) or not isinstance(c.value, int) or not 1 <= c.value <= MAX_ROUNDS:
        raise SemanticError(f"n_rounds must be a compile-time integer in 1 .. {MAX_ROUNDS}, got {type_name(v)}", None, node)
    return int(c.value)


def _bound(name: str, node: ast.Call, args: Args, kwargs: Kwargs) -> tuple[Scalar | Const, Scalar | Const, int]:
    seed, offset, rounds = _signature(node, args, kwargs, getattr(kp, name).signature, ["seed", "offset", "n_rounds"],
                                      {"n_rounds": Const(host.ROUNDS)})  # fmt: skip
    return (_integer(seed, f"`{name}`'s seed", _arg_node(node, 0)),
            _integer(offset, f"`{name}`'s offset", _arg_node(node, 1)), _rounds(rounds, node))  # fmt: skip


def _offset_const(c: Const) -> np.ndarray:
    """A constant offset as Triton would type it (a literal: i32 when it fits, else i64)."""
    t = c.type or (i32 if -(1 << 31) <= int(c.value) < (1 << 31) else i64 if int(c.value) < (1 << 63) else u64)
    return np.array(int(c.value) % (1 << t.bits), dtype=np.uint64).astype(t.np_dtype)


def _philox(fc: Any, name: str, node: ast.Call, args: Args, kwargs: Kwargs) -> tuple[int, ...] | Words:
    """The four words for this call: Python ints when seed and offset are constants."""
    seed, offset, rounds = _bound(name, node, args, kwargs)
    if isinstance(seed, Const) and isinstance(offset, Const):
        return tuple(int(w) for w in host.randint4x(int(seed.value), _offset_const(offset), rounds))
    em = fc.em
    if isinstance(seed, Const):
        k0, k1 = (em.constant(w, i32) for w in host.seed_words(int(seed.value)))
    else:
        k0, k1 = _words64(fc, seed)
    if isinstance(offset, Const):
        lo, hi = (np.asarray(w).view(np.int32).item() for w in host._counter(_offset_const(offset)))
        c0, c1 = em.constant(lo, i32), em.constant(hi, i32)
    else:
        c0, c1 = _counter_words(fc, offset)
    zero = em.constant(0, i32)
    op = em.add(PhiloxOp((c0, c1, zero, zero), (k0, k1), rounds))
    return tuple(op.results)  # type: ignore[return-value]


def _signed(w: int) -> int:
    return w - (1 << 32) if w >> 31 else w


def _uniform(fc: Any, word: SSAValue) -> SSAValue:
    """Triton's uint_to_uniform_float: ``(x < 0 ? ~x : x) * 4.6566127342e-10`` in f32."""
    em = fc.em
    negative = em.value(arith.CmpiOp(word, em.constant(0, i32), "slt"))
    flipped = em.value(arith.XOrIOp(word, em.constant(-1, i32)))
    x = em.value(arith.SelectOp(negative, flipped, word))
    return em.value(arith.MulfOp(em.value(arith.SIToFPOp(x, f32.ir_type)), em.constant(float(host.UNIFORM_SCALE), f32)))


def _randint4x(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    words = _philox(fc, "randint4x", node, args, kwargs)
    if isinstance(words[0], int):
        return TupleValue(tuple(Const(_signed(w), i32) for w in words))  # type: ignore[arg-type]
    return TupleValue(tuple(Scalar(w, i32) for w in words))  # type: ignore[arg-type]


def _randint(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    words = _philox(fc, "randint", node, args, kwargs)
    return Const(_signed(words[0]), i32) if isinstance(words[0], int) else Scalar(words[0], i32)  # type: ignore[arg-type]


def _rand(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    words = _philox(fc, "rand", node, args, kwargs)
    if isinstance(words[0], int):
        return Const(float(host.uniform(np.uint32(words[0]))), f32)
    return Scalar(_uniform(fc, words[0]), f32)  # type: ignore[arg-type]


def _randn(fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    """Box-Muller on the first two words, as Triton: ``sqrt(-2 log max(1e-7, u1)) cos(2 pi u2)``."""
    words = _philox(fc, "randn", node, args, kwargs)
    if isinstance(words[0], int):
        u1, u2 = (host.uniform(np.uint32(w)) for w in words[:2])
        r = np.sqrt(np.float32(-2.0) * np.log(np.maximum(host.MIN_UNIFORM, u1)))
        return Const(float(r * np.cos(host.TWO_PI * u2)), f32)
    em = fc.em
    u1 = em.value(arith.MaxnumfOp(em.constant(float(host.MIN_UNIFORM), f32), _uniform(fc, words[0])))  # type: ignore[arg-type]
    theta = em.value(arith.MulfOp(em.constant(float(host.TWO_PI), f32), _uniform(fc, words[1])))  # type: ignore[arg-type]
    r = em.value(xmath.SqrtOp(em.value(arith.MulfOp(em.constant(-2.0, f32), em.value(xmath.LogOp(u1))))))
    return Scalar(em.value(arith.MulfOp(r, em.value(xmath.CosOp(theta)))), f32)


RANDOM_BUILTINS: dict[kp.Builtin, Callable[..., Value]] = {
    kp.randint4x: _randint4x,
    kp.randint: _randint,
    kp.rand: _rand,
    kp.randn: _randn,
}


def component(handler: Callable[..., Value], index: int, fc: Any, node: ast.Call, args: Args, kwargs: Kwargs) -> Value:
    """One word of a tuple-valued builtin (tiles lift one scalar per element)."""
    result = handler(fc, node, args, kwargs)
    assert isinstance(result, TupleValue)
    return result.items[index]


COMPONENTS = {kp.randint4x: [partial(component, _randint4x, i) for i in range(4)]}

__all__ = ["COMPONENTS", "RANDOM_BUILTINS"]
