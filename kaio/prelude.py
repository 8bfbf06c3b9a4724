"""Everything a kernel body uses: ``from kaio.prelude import *``.

The scalar types (callable as casts inside a kernel), ``Array``/``MutArray`` for parameter
annotations, ``constexpr``, and the kernel builtins. A builtin here is only a marker: the
frontend recognizes it by identity (so ``import kaio.prelude as kp; kp.sqrt(x)`` and aliases work)
and compiles the call. Called on the host, a GPU builtin raises a clear error; ``abs``, ``min`` and
``max`` shadow Python's and behave exactly like them on the host, so a star import does not break
host code in the same module.

Importing this module does not import xDSL.
"""

from __future__ import annotations

import builtins as _py
from collections.abc import Callable
from typing import Any

from kaio.dtypes import (
    Array,
    MutArray,
    bf16,
    bool_,
    constexpr,
    f8e4m3,
    f8e5m2,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
)
from kaio.errors import KaioError


class Builtin:
    """A function that only exists inside kernels; ``signature`` is shown in errors and docs."""

    def __init__(self, name: str, signature: str, host: Callable[..., Any] | None = None):
        self.name = name
        self.signature = signature
        self._host = host

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._host is not None:
            return self._host(*args, **kwargs)
        raise KaioError(
            f"kaio builtin `{self.signature}` can only be called inside a @kaio.gpu_kernel or "
            "@kaio.device function"
        )

    def __repr__(self) -> str:
        return f"<kaio builtin {self.name}>"


def _builtin(signature: str, host: Callable[..., Any] | None = None) -> Builtin:
    return Builtin(signature.split("(")[0], signature, host)


# SIMT indices (all u32)
thread_idx_x = _builtin("thread_idx_x()")
thread_idx_y = _builtin("thread_idx_y()")
thread_idx_z = _builtin("thread_idx_z()")
block_idx_x = _builtin("block_idx_x()")
block_idx_y = _builtin("block_idx_y()")
block_idx_z = _builtin("block_idx_z()")
block_dim_x = _builtin("block_dim_x()")
block_dim_y = _builtin("block_dim_y()")
block_dim_z = _builtin("block_dim_z()")
grid_dim_x = _builtin("grid_dim_x()")
grid_dim_y = _builtin("grid_dim_y()")
grid_dim_z = _builtin("grid_dim_z()")
lane_id = _builtin("lane_id()")
warp_id = _builtin("warp_id()")

# memory and synchronization
shared_mem = _builtin("shared_mem(T, size)")
bar_sync = _builtin("bar_sync()")
index_2d = _builtin("index_2d(row, col, row_stride)")

# warp shuffles and reductions
shfl_sync_down = _builtin("shfl_sync_down(value, offset, width=32, mask=0xFFFFFFFF)")
shfl_sync_up = _builtin("shfl_sync_up(value, offset, width=32, mask=0xFFFFFFFF)")
shfl_sync_bfly = _builtin("shfl_sync_bfly(value, lane_mask, width=32, mask=0xFFFFFFFF)")
shfl_sync_idx = _builtin("shfl_sync_idx(value, lane, width=32, mask=0xFFFFFFFF)")
warp_reduce_sum = _builtin("warp_reduce_sum(value)")
warp_reduce_max = _builtin("warp_reduce_max(value)")
warp_reduce_min = _builtin("warp_reduce_min(value)")
block_reduce_sum = _builtin("block_reduce_sum(value)")
block_reduce_max = _builtin("block_reduce_max(value)")
block_reduce_min = _builtin("block_reduce_min(value)")

# atomics (return the old value)
atomic_add = _builtin("atomic_add(array, index, value)")
atomic_min = _builtin("atomic_min(array, index, value)")
atomic_max = _builtin("atomic_max(array, index, value)")
atomic_exch = _builtin("atomic_exch(array, index, value)")
atomic_cas = _builtin("atomic_cas(array, index, compare, value)")

# math
sqrt = _builtin("sqrt(x)")
rsqrt = _builtin("rsqrt(x)")
exp = _builtin("exp(x)")
exp2 = _builtin("exp2(x)")
log = _builtin("log(x)")
log2 = _builtin("log2(x)")
tanh = _builtin("tanh(x)")
sin = _builtin("sin(x)")
cos = _builtin("cos(x)")
floor = _builtin("floor(x)")
ceil = _builtin("ceil(x)")
fma = _builtin("fma(a, b, c)")
# These three deliberately shadow Python's (and behave like them on the host).
abs = _builtin("abs(x)", host=_py.abs)
min = _builtin("min(a, b, ...)", host=_py.min)
max = _builtin("max(a, b, ...)", host=_py.max)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ceiling division of integers, in a kernel (``cdiv(n, BLOCK)`` trips of a loop) and on the
# host (grids: ``kaio.cdiv(1000, 256) == 4``); for a >= 0 and b > 0, as Triton's
cdiv = _builtin("cdiv(a, b)", host=_ceil_div)

# bits of 32-bit words (dequantisation): kaio.frontend.bit_builtins
dp4a = _builtin("dp4a(a, b, c)")
dp2a = _builtin("dp2a(a, b, c, hi=False)")
prmt = _builtin("prmt(a, b, selector)")
lop3 = _builtin("lop3(a, b, c, lut)")
bitcast = _builtin("bitcast(x, T)")
unpack_nibble = _builtin("unpack_nibble(word, index, dtype=f16, zero=0)")

# random numbers, Triton's (counter-based Philox 4x32): kaio.frontend.random_builtins, kaio.random
randint4x = _builtin("randint4x(seed, offset, n_rounds=10)")
randint = _builtin("randint(seed, offset, n_rounds=10)")
rand = _builtin("rand(seed, offset, n_rounds=10)")
randn = _builtin("randn(seed, offset, n_rounds=10)")

# loops
static_range = _builtin("static_range(stop) / static_range(start, stop[, step])")

BUILTINS: tuple[Builtin, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Builtin))

__all__ = [
    "Array",
    "MutArray",
    "constexpr",
    "f16",
    "bf16",
    "f32",
    "f64",
    "i8",
    "u8",
    "i16",
    "u16",
    "i32",
    "u32",
    "i64",
    "u64",
    "bool_",
    "f8e4m3",
    "f8e5m2",
    *(b.name for b in BUILTINS),
]
