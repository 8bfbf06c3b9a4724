"""``kaio.ops_library.dropout`` and ``dropout_add``: dropout whose mask is never stored.

    from kaio.ops_library import dropout, dropout_add
    y = dropout(x, 0.1, seed)                 # element i of x.flatten() kept iff rand(seed, i) > p
    y = dropout_add(x, residual, 0.1, seed)   # dropout(x, p, seed) + residual, in one pass

As Triton's "low-memory dropout" tutorial: element ``i`` of the flattened input is kept iff
``rand(seed, i) > p`` (``kaio.random.rand``: Triton's Philox, bit for bit) and then scaled by
``1 / (1 - p)`` (the f32 reciprocal, multiplied in f32); dropped elements are 0. The backward
regenerates the same mask from the seed instead of reading a stored one: the gradient of x is
``dropout(grad, p, seed)`` (of the residual: ``grad``). f16, bf16 or f32, any shape (contiguous),
computed in f32 and stored in x's type; the result has x's type and kind.

``p`` is a number in [0, 1) (else a KaioValueError). ``seed`` is an integer (taken modulo 2**64),
or a ``torch.Generator``, from which one 63-bit seed is drawn per call (the caller keeps it to
replay the mask: ``kaio.random.rand(seed, offsets)``). With ``training=False`` or ``p == 0`` the
op keeps everything: ``dropout`` returns x itself, ``dropout_add`` returns ``x + residual``.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioValueError
from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.random_args import check_p, check_seed, seed_as_int64
from kaio.prelude import Array, MutArray, f32, i32, u64

BLOCK = 1024  # elements per program: 8 per thread of 4 warps
MAX_ELEMENTS = 2**31 - BLOCK  # i32 indices; the counter is the element's index


@cache
def dropout_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def dropout(x: Array[T], residual: Array[T], y: MutArray[T], n: i32, p: f32, scale: f32, seed: u64,
                DROP: kaio.constexpr = True, HAS_RES: kaio.constexpr = False, BASE_X: kaio.constexpr = 16,
                BASE_R: kaio.constexpr = 16, BASE_Y: kaio.constexpr = 16, BLOCK: kaio.constexpr = 1024):  # fmt: skip
        x, residual, y = kt.multiple_of(x, BASE_X), kt.multiple_of(residual, BASE_R), kt.multiple_of(y, BASE_Y)
        start = i32(kt.program_id(0)) * BLOCK
        v = f32(kt.load(x, (start,), (BLOCK,), (n,)))  # blocks, not gathers: 16-byte accesses
        if DROP:
            v = kt.where(kt.rand(seed, start + kt.arange(BLOCK)) > p, v * scale, 0.0)
        if HAS_RES:
            v = v + f32(kt.load(residual, (start,), (BLOCK,), (n,)))
        kt.store(y, (start,), T(v), (n,))

    return dropout


def check(ops: Any, op: str, x: Any, residual: Any) -> tuple[Operand, Operand | None, int]:
    """x and residual as operands and x's element count, or a kaio error naming the argument
    (``ops``: the call's Operands, or the fake's TensorMetadata)."""
    ox = rowops.take_float(ops, op, "x", x)
    n = math.prod(ox.shape)
    if n > MAX_ELEMENTS:
        raise KaioValueError(f"{op}: `x` has {n} elements; at most {MAX_ELEMENTS}")
    orr = None
    if residual is not None:
        orr = rowops.take_float(ops, op, "residual", residual)
        rowops.same_dtype(op, "residual", orr, ox)
        rowops.same_shape(op, "residual", orr, tuple(ox.shape))
    return ox, orr, n


def run(op: str, x: Any, residual: Any, p: float, seed: int, device: Any) -> Any:
    """The op itself, without the torch custom-op routing (``p`` and ``seed`` checked)."""
    ops = Operands(op, x, residual, device=device)
    ox, orr, n = check(ops, op, x, residual)
    oy = ops.output(tuple(ox.shape), ox.dtype)
    if n:
        scale = 1.0 / (1.0 - p)
        dropout_kernel(ox.dtype).launch(
            ops.device, ox.value, (orr or ox).value, oy.value, n, p, scale, seed, grid=(math.ceil(n / BLOCK),),
            DROP=p > 0, HAS_RES=orr is not None, BASE_X=rowops.base_alignment(ox.ptr),
            BASE_R=rowops.base_alignment((orr or ox).ptr), BASE_Y=rowops.base_alignment(oy.ptr), BLOCK=BLOCK,
        )  # fmt: skip
    return ops.result(oy)


def dropout(x: Any, p: float, seed: Any, *, training: bool = True, device: Any = None) -> Any:
    """Dropout of ``x`` with probability ``p``, its mask from ``seed`` (see the module doc)."""
    p, seed = check_p("dropout", p), check_seed("dropout", seed)
    if not training or p == 0:
        return x
    if (ops := rowops.torch_op(x, device=device)) is not None:
        return ops.dropout(x, None, p, seed_as_int64(seed))
    return run("dropout", x, None, p, seed, device)


def dropout_add(x: Any, residual: Any, p: float, seed: Any, *, training: bool = True, device: Any = None) -> Any:
    """``dropout(x, p, seed) + residual`` in one pass (see the module doc)."""
    p, seed = check_p("dropout_add", p), check_seed("dropout_add", seed)
    if not training:
        p = 0.0
    if (ops := rowops.torch_op(x, residual, device=device)) is not None:
        return ops.dropout(x, residual, p, seed_as_int64(seed))
    return run("dropout_add", x, residual, p, seed, device)
