"""The tile language: ``import kaio.tile as kt`` inside ``@kaio.tile_kernel`` functions.

A tile kernel is one *program* run by one CTA; its values are scalars (as in
``@kaio.gpu_kernel``) and tiles: 1-D or 2-D, power-of-two compile-time shapes, owned by the
whole CTA. Every function here is a marker the frontend compiles (calling one on the host raises
a clear error); the reference is docs/tile_language.md.

Elementwise operators (``+ - * / // % **``, comparisons, ``& | ^``), the prelude's math builtins
(``exp exp2 log log2 sqrt rsqrt tanh sin cos abs min max fma``), the bit builtins (``dp4a dp2a
prmt lop3 bitcast unpack_nibble``), ``cdiv``, the random numbers (``rand randn randint randint4x``:
Triton's Philox, bit for bit), casts (``f16(t)``, ``f32(t)``, ``f8e4m3(t)``) and
``@kaio.device`` functions apply to tiles element by element, with numpy broadcasting
between tiles and scalars.
"""

from __future__ import annotations

from kaio.prelude import (
    Builtin,
    abs,
    bitcast,
    cdiv,
    cos,
    dp2a,
    dp4a,
    exp,
    exp2,
    fma,
    log,
    log2,
    lop3,
    prmt,
    rand,
    randint,
    randint4x,
    randn,
    rsqrt,
    sin,
    sqrt,
    tanh,
    unpack_nibble,
)


def _marker(signature: str) -> Builtin:
    return Builtin(signature.split("(")[0], "kt." + signature)


# program indices (u32)
program_id = _marker("program_id(axis=0)")
num_programs = _marker("num_programs(axis=0)")

# making tiles
arange = _marker("arange(n)")
zeros = _marker("zeros(shape, dtype)")
full = _marker("full(shape, value, dtype)")

# memory
load = _marker("load(array, offsets, shape, bounds, strides=None, other=0) | load(array, index, mask=None, other=0)")
store = _marker("store(array, offsets, tile, bounds, strides=None) | store(array, index, tile, mask=None)")
multiple_of = _marker("multiple_of(value, n)")  # an int: n divides it; an array: its base is n-byte aligned

# atomics: one per element of the offsets tile (one per program for scalars); the old values come back
atomic_add = _marker("atomic_add(array, offsets, values, mask=None)")
atomic_max = _marker("atomic_max(array, offsets, values, mask=None)")
atomic_min = _marker("atomic_min(array, offsets, values, mask=None)")
atomic_xchg = _marker("atomic_xchg(array, offsets, values, mask=None)")
atomic_and = _marker("atomic_and(array, offsets, values, mask=None)")
atomic_or = _marker("atomic_or(array, offsets, values, mask=None)")
atomic_xor = _marker("atomic_xor(array, offsets, values, mask=None)")
atomic_cas = _marker("atomic_cas(array, offsets, compare, values, mask=None)")

# shapes
trans = _marker("trans(t)")
expand_dims = _marker("expand_dims(t, axis)")
broadcast_to = _marker("broadcast_to(t, shape)")

# math on tiles
dot = _marker("dot(a, b, acc)")
where = _marker("where(cond, a, b)")
maximum = _marker("maximum(a, b)")
minimum = _marker("minimum(a, b)")
sum = _marker("sum(t, axis)")  # noqa: A001 (the tile language's own names, as in Triton)
max = _marker("max(t, axis)")  # noqa: A001
min = _marker("min(t, axis)")  # noqa: A001

__all__ = [
    "program_id", "num_programs", "arange", "zeros", "full", "load", "store", "multiple_of",
    "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_cas",
    "trans", "expand_dims", "broadcast_to", "dot", "where", "maximum", "minimum", "sum", "max",
    "min", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sin", "cos", "abs", "fma",
    "dp4a", "dp2a", "prmt", "lop3", "bitcast", "unpack_nibble", "rand", "randn", "randint", "randint4x",
    "cdiv",
]  # fmt: skip
