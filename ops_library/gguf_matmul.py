"""``kaio.ops_library.gguf_matmul``: ``x @ W.T`` with W a GGUF (llama.cpp) quantised tensor.

    from kaio.ops_library import gguf_matmul
    t = gguf.GGUFReader("model.gguf").tensors[i]        # t.data: uint8 (N, K_bytes)
    y = gguf_matmul(x, t.data, t.tensor_type)           # or qtype="Q4_K"

``x`` (M, K) is f16, bf16 or f32 and so is the result (M, N); ``weight`` is the tensor's raw
block bytes, uint8 ``(N, K / QK * NB)``, in one of the formats ``Q8_0``, ``Q4_0``, ``Q4_K``,
``Q5_K``, ``Q6_K`` (their layouts: :mod:`kaio.ops_library.gguf_blocks`). W is decoded in the
kernel, never dequantised to a full matrix.

One tile kernel (:func:`gguf_tile_kernel`) walks K in steps of 32 elements (one Q8_0/Q4_0
block, one K-quant sub-block or two of Q6_K's), reads the (32, BN) weight tile's bytes and
decodes them as integers ``w = d * S * q - dmin * M`` (``gguf_blocks``), then, by the number of
rows of x:

* **decoding** (M <= 8): llama.cpp's mmvq. A small kernel first quantises x to int8 per block of
  32 with one f32 scale (``dx = max|x| / 127``); each program then takes one row of x and BN
  rows of W, and per step adds ``dx * (d * sum(S q qx) - dmin * sum(M qx))``: the products
  and sums over the block exact in integers, two multiplies by scales per step.
* **prefill** (larger M): the weight tile is dequantised to x's type in registers and fed to
  ``kt.dot`` (tensor cores) with the x tile, accumulating in f32: Marlin's design with GGUF's
  blocks.

The super-scales ``d`` and ``dmin`` are f16 fields at even byte offsets of blocks whose sizes
are all even, so the kernel reads them through a second view of the same weight bytes as f16
(``(N, K_bytes / 2)``, no copy) instead of assembling halves from bytes.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.gguf_blocks import (
    Q4_K,
    Q5_K,
    Q6_K,
    BlockFormat,
    block_format,
    high_byte,
    quant,
    quant_byte,
    scale_byte,
    scale_stride,
    sub_min,
    sub_scale,
)
from kaio.ops_library.operands import Operand, Operands

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.prelude import Array, MutArray, abs, f16, f32, floor, i8, i32, u8

OP = "gguf_matmul"
ACTIVATION_TYPES = (dtypes.f16, dtypes.bf16, dtypes.f32)
DECODE_ROWS = 8  # up to this many rows of x take the 8-bit (dp4a-style) path
STEP = 32  # elements of K per step: x's quantisation block, and a divisor of every QK
QUANTIZE_ROWS = 32  # blocks of 32 per program of the activation quantiser


@cache
def gguf_tile_kernel(T: dtypes.ScalarType) -> Any:
    """The kernel for activations of type ``T`` (see the module doc); ``DECODE`` picks the path,
    ``F``/``QK``/``NB``/``D_AT``/``DMIN_AT`` are the weight's :class:`BlockFormat`."""

    @kaio.tile_kernel(num_warps=4)
    def gguf_matmul(x: Array[T], xq: Array[i8], xd: Array[f32], w: Array[u8], wh: Array[f16], y: MutArray[T],
                    m: i32, n: i32, k: i32, row_bytes: i32,
                    F: kaio.constexpr = 8, QK: kaio.constexpr = 32, NB: kaio.constexpr = 34,
                    D_AT: kaio.constexpr = 0, DMIN_AT: kaio.constexpr = -1,
                    BM: kaio.constexpr = 1, BN: kaio.constexpr = 64, DECODE: kaio.constexpr = True):  # fmt: skip
        m0, n0 = i32(kt.program_id(1)) * BM, i32(kt.program_id(0)) * BN
        cols = kt.expand_dims(n0 + kt.arange(BN), 0)  # (1, BN): this tile's rows of W
        in_cols = cols < n
        ks = kt.expand_dims(kt.arange(32), 1)  # (32, 1): the step's elements of K
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, 32):
            # the step lies in one block of every row: block k0 // QK, elements j of it
            block = cols * row_bytes + k0 // QK * NB  # (1, BN): each row's block, in bytes
            j = k0 % QK + ks
            lo = i32(kt.load(w, block + quant_byte(j, F), in_cols))
            hi = lo  # what a format without high bits ignores
            if F >= Q5_K:
                hi = i32(kt.load(w, block + high_byte(j, F), in_cols))
            # the sub-block scale bytes, the same for a row's whole step ((1, BN) tiles)
            s0, s1, s2 = kt.zeros((1, BN), i32), kt.zeros((1, BN), i32), kt.zeros((1, BN), i32)
            if F >= Q4_K:
                at = block + scale_byte(k0 % QK, F)
                s0 = i32(kt.load(w, at, in_cols))
                s1 = i32(kt.load(w, at + scale_stride(F), in_cols))
                if F != Q6_K:
                    s2 = i32(kt.load(w, at + 2 * scale_stride(F), in_cols))
            sq = sub_scale(s0, s1, s2, j, F) * quant(lo, hi, j, F)  # (32, BN): w = d * sq - dmin * mins
            mins = sub_min(s0, s1, s2, k0 % QK, F)
            d = f32(kt.load(wh, block // 2 + D_AT, in_cols))  # (1, BN)
            dmin = kt.zeros((1, BN), f32)
            if DMIN_AT >= 0:
                dmin = f32(kt.load(wh, block // 2 + DMIN_AT, in_cols))
            if DECODE:  # one row of x, quantised: exact integer sums over the block
                qx = i32(kt.load(xq, m0 * k + k0 + ks))  # (32, 1)
                dx = xd[m0 * (k // 32) + k0 // 32]
                dots = kt.expand_dims(kt.sum(sq * qx, 0), 0)
                acc = acc + dx * (d * f32(dots))
                if DMIN_AT >= 0:
                    acc = acc - dx * (dmin * f32(kt.expand_dims(kt.sum(mins * qx, 0), 0)))
            else:  # the weight tile in x's type, onto tensor cores
                wt = T(d * f32(sq) - dmin * f32(mins))
                acc = kt.dot(kt.load(x, (m0, k0), (BM, 32), (m, k)), wt, acc)
        kt.store(y, (m0, n0), T(acc), (m, n))

    return gguf_matmul


@cache
def quantize_tile_kernel(T: dtypes.ScalarType) -> Any:
    """x (``blocks`` blocks of 32) to int8 and one f32 scale per block, ``q = round(x / dx)``
    with ``dx = max|x| / 127`` (halves away from zero, as llama.cpp's q8_1)."""

    @kaio.tile_kernel(num_warps=4)
    def quantize_q8(x: Array[T], xq: MutArray[i8], xd: MutArray[f32], blocks: i32, R: kaio.constexpr = 32):
        r0 = i32(kt.program_id(0)) * R
        v = f32(kt.load(x, (r0, 0), (R, 32), (blocks, 32)))
        amax = kt.max(abs(v), 1)
        inv = kt.expand_dims(kt.where(amax > 0.0, 127.0 / amax, 0.0), 1)
        t = abs(v) * inv
        q = i32(floor(t + 0.5))
        kt.store(xq, (r0, 0), i8(kt.where(v < 0.0, -q, q)), (blocks, 32))
        kt.store(xd, (r0,), amax / 127.0, (blocks,))

    return quantize_q8


@dataclass(frozen=True)
class Inputs:
    """A call's checked operands and sizes."""

    x: Operand
    weight: Operand
    fmt: BlockFormat
    m: int
    n: int
    k: int


def check(ops: Any, x: Any, weight: Any, qtype: Any) -> Inputs:
    """The operands and sizes the format requires, or an error naming the argument and the rule
    (``ops``: an ``Operands``, or ``torch_checks.TensorMetadata`` for a fake call)."""
    fmt = block_format(OP, qtype)
    ox = ops.take("x", x)
    if ox.dtype not in ACTIVATION_TYPES or len(ox.shape) != 2:
        raise KaioTypeError(f"{OP}: `x` must be a 2-D f16, bf16 or f32 array (M, K), got {ox.dtype.name} {ox.shape}")
    m, k = ox.shape
    ow = ops.take("weight", weight)
    if ow.dtype != dtypes.u8 or len(ow.shape) != 2:
        raise KaioTypeError(
            f"{OP}: `weight` must be the 2-D uint8 block bytes (N, K_bytes) of a GGUF tensor, got {ow.dtype.name} {ow.shape}"
        )
    n, row_bytes = ow.shape
    if row_bytes % fmt.nbytes:
        raise KaioValueError(
            f"{OP}: `weight` rows of {row_bytes} bytes are not whole {fmt.name} blocks "
            f"({fmt.nbytes} bytes per {fmt.elements} elements)"
        )
    if k != row_bytes // fmt.nbytes * fmt.elements:
        raise KaioValueError(
            f"{OP}: `x` has K = {k} columns but each `weight` row holds {row_bytes // fmt.nbytes} {fmt.name} "
            f"blocks of {fmt.elements} elements (K = {row_bytes // fmt.nbytes * fmt.elements})"
        )
    if any(size >= 2**31 for size in (m * k, n * row_bytes, m * n)):
        raise KaioValueError(f"{OP}: arrays must have fewer than 2**31 elements")
    return Inputs(ox, ow, fmt, m, n, k)


class HalfView:
    """The weight's bytes seen as f16 ``(N, K_bytes / 2)`` through ``__cuda_array_interface__``:
    the same memory, no copy (for kaio Buffers and other device arrays; torch tensors use
    ``Tensor.view``)."""

    def __init__(self, ptr: int, shape: tuple[int, int], simulator: bool) -> None:
        self.__cuda_array_interface__ = {
            "shape": (shape[0], shape[1] // 2), "typestr": "<f2", "data": (ptr, True), "strides": None,
            "version": 3, "stream": None if simulator else 1,
        }  # fmt: skip


def half_view(ops: Operands, weight: Operand) -> Any:
    if ops.torch:
        from kaio.runtime import tensors

        return weight.value.view(tensors.torch_dtype(dtypes.f16))
    return HalfView(weight.ptr, (weight.shape[0], weight.shape[1]), ops.device.is_simulator)


def run(x: Any, weight: Any, qtype: Any, device: Any = None) -> Any:
    """The op itself, without the torch custom-op routing of :func:`gguf_matmul`."""
    ops = Operands(OP, x, weight, device=device)
    a = check(ops, x, weight, qtype)
    oy = ops.output((a.m, a.n), a.x.dtype)
    if not (a.m and a.n):
        return ops.result(oy)
    f = a.fmt
    formats = {"F": f.code, "QK": f.elements, "NB": f.nbytes, "D_AT": f.d_at, "DMIN_AT": f.dmin_at}
    kernel, row_bytes = gguf_tile_kernel(a.x.dtype), a.weight.shape[1]
    args = (a.weight.value, half_view(ops, a.weight), oy.value, a.m, a.n, a.k, row_bytes)
    if a.m <= DECODE_ROWS:
        blocks = a.m * a.k // STEP
        xq, xd = ops.output((a.m, a.k), dtypes.i8), ops.output((a.m, a.k // STEP), dtypes.f32)
        if blocks:  # K = 0 still runs the matmul kernel: no K steps, y = 0
            quantize_tile_kernel(a.x.dtype).launch(ops.device, a.x.value, xq.value, xd.value, blocks,
                                                   grid=(math.ceil(blocks / QUANTIZE_ROWS),), R=QUANTIZE_ROWS)  # fmt: skip
        kernel.launch(ops.device, a.x.value, xq.value, xd.value, *args, grid=(math.ceil(a.n / 64), a.m),
                      BM=1, BN=64, DECODE=True, **formats)  # fmt: skip
    else:
        bm = 32 if a.m <= 32 else 64
        xq, xd = ops.output((1,), dtypes.i8), ops.output((1,), dtypes.f32)  # stand-ins the path does not read
        kernel.launch(ops.device, a.x.value, xq.value, xd.value, *args,
                      grid=(math.ceil(a.n / 64), math.ceil(a.m / bm)), BM=bm, BN=64, DECODE=False, **formats)  # fmt: skip
    return ops.result(oy)


def gguf_matmul(x: Any, weight: Any, qtype: Any, *, device: Any = None) -> Any:
    """``x @ W.T`` with W given as a GGUF tensor's raw blocks (see the module doc); the result
    has x's type and kind (numpy, kaio Buffer or torch tensor)."""
    name = block_format(OP, qtype).name  # the custom op takes the format's name
    if (ops := rowops.torch_op(x, weight, device=device)) is not None:
        return ops.gguf_matmul(x, weight, name)
    return run(x, weight, name, device)
