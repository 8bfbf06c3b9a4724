"""``kaio.ops_library.gguf_matmul``: ``x @ W.T`` with W a GGUF (llama.cpp) quantised tensor.

    from kaio.ops_library import gguf_matmul
    t = gguf.GGUFReader("model.gguf").tensors[i]        # t.data: uint8 (N, K_bytes)
    y = gguf_matmul(x, t.data, t.tensor_type)           # or qtype="Q4_K"

``x`` (M, K) is f16, bf16 or f32 and so is the result (M, N); ``weight`` is the tensor's raw
block bytes, uint8 ``(N, K / QK * NB)``, in one of the formats ``Q8_0``, ``Q4_0``, ``Q4_K``,
``Q5_K``, ``Q6_K`` (their layouts: :mod:`kaio.ops_library.gguf_blocks`). W is decoded in the
kernel, never dequantised to a full matrix.

By the number of rows of x:

* **decoding** (M <= 8, :func:`gguf_decode_kernel`): llama.cpp's mmvq. A small kernel first
  quantises x to int8 per block of 32 with one f32 scale (``dx = max|x| / 127``), stored as
  32-bit words; one program then takes every row of x and 128 rows of W (W is read once), and
  per step reads each W row's quants as 32-bit words, splits nibbles with a shift and a mask per
  word and sums products with ``dp4a``, exact in integers. Zero points and the K-quants' mins
  need ``sum(qx)`` (``dp4a`` with ones); block and sub-block scales are applied once per 32
  elements (per 16 for Q6_K). Steps are 32 elements, 64 for Q4_K/Q5_K (a byte's two nibbles
  belong to sub-blocks 2c and 2c + 1).
* **prefill** (larger M, :func:`gguf_tile_kernel`): K in steps of 32; the (32, BN) weight tile's
  bytes are decoded as integers ``w = d * S * q - dmin * M`` (``gguf_blocks``), dequantised to
  x's type in registers and fed to ``kt.dot`` (tensor cores) with the x tile, accumulating in
  f32: Marlin's design with GGUF's blocks.

The super-scales ``d`` and ``dmin`` are f16 fields at even byte offsets of blocks whose sizes
are all even, so the kernel reads them through a second view of the same weight bytes as f16
(``(N, K_bytes / 2)``, no copy) instead of assembling halves from bytes; the decoding kernel
reads its quant words through the same view (every format's blocks are 2-byte aligned, Q8_0's,
Q4_0's and Q6_K's no more).
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.gguf_blocks import (
    NIBBLES,
    ONES,
    Q4_0,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_0,
    BlockFormat,
    block_format,
    high_byte,
    join,
    q6_word,
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
from kaio.prelude import (
    Array,
    MutArray,
    abs,
    bitcast,
    dp4a,
    f16,
    f32,
    floor,
    i8,
    i32,
    static_range,
    u8,
    u16,
)

OP = "gguf_matmul"
ACTIVATION_TYPES = (dtypes.f16, dtypes.bf16, dtypes.f32)
DECODE_ROWS = 8  # up to this many rows of x take the 8-bit dp4a path, all in one program
DECODE_COLS = 128  # rows of W per program of the decoding kernel: one per thread
STEP = 32  # elements of K per step: x's quantisation block, and a divisor of every QK
QUANTIZE_ROWS = 32  # blocks of 32 per program of the activation quantiser


@cache
def gguf_tile_kernel(T: dtypes.ScalarType) -> Any:
    """The prefill kernel (M > 8) for activations of type ``T`` (see the module doc);
    ``F``/``QK``/``NB``/``D_AT``/``DMIN_AT`` are the weight's :class:`BlockFormat`."""

    @kaio.tile_kernel(num_warps=4)
    def gguf_matmul(x: Array[T], w: Array[u8], wh: Array[f16], y: MutArray[T], m: i32, n: i32, k: i32, row_bytes: i32,
                    F: kaio.constexpr = 8, QK: kaio.constexpr = 32, NB: kaio.constexpr = 34,
                    D_AT: kaio.constexpr = 0, DMIN_AT: kaio.constexpr = -1,
                    BM: kaio.constexpr = 64, BN: kaio.constexpr = 64):  # fmt: skip
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
            wt = T(d * f32(sq) - dmin * f32(mins))  # the weight tile in x's type, onto tensor cores
            acc = kt.dot(kt.load(x, (m0, k0), (BM, 32), (m, k)), wt, acc)
        kt.store(y, (m0, n0), T(acc), (m, n))

    return gguf_matmul


@cache
def gguf_decode_kernel(T: dtypes.ScalarType) -> Any:
    """The decoding kernel (M <= 8) for results of type ``T``: llama.cpp's mmvq (see the module
    doc). ``F``/``QK``/``NB``/``D_AT``/``DMIN_AT`` are the weight's :class:`BlockFormat` and
    ``STEP`` its ``decode_step``; ``BM`` >= M rows of x."""

    @kaio.tile_kernel(num_warps=4)
    def gguf_decode(xq: Array[i32], xd: Array[f32], wh: Array[f16], y: MutArray[T],
                    m: i32, n: i32, k: i32, row_halves: i32,
                    F: kaio.constexpr = 8, QK: kaio.constexpr = 32, NB: kaio.constexpr = 34,
                    D_AT: kaio.constexpr = 0, DMIN_AT: kaio.constexpr = -1, STEP: kaio.constexpr = 32,
                    BM: kaio.constexpr = 1, BN: kaio.constexpr = 128):  # fmt: skip
        n0 = i32(kt.program_id(0)) * BN
        cols = kt.expand_dims(n0 + kt.arange(BN), 0)  # (1, BN): this tile's rows of W
        in_cols = cols < n
        rows = kt.expand_dims(kt.arange(BM), 1)  # (BM, 1): every row of x
        in_rows = rows < m
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, STEP):
            block = cols * row_halves + k0 // QK * (NB // 2)  # (1, BN): each row's block, in halves
            xw = rows * (k // 4) + k0 // 4  # (BM, 1): the step's first word of each row of qx
            dx = rows * (k // 32) + k0 // 32  # and the index of its first scale
            d = f32(kt.load(wh, block + D_AT, in_cols))
            if F == Q8_0:  # 32 int8 quants after d: w = d * q
                dots = kt.zeros((BM, BN), i32)
                for u in static_range(8):
                    q = join(kt.load(wh, block + 1 + 2 * u, in_cols), kt.load(wh, block + 2 + 2 * u, in_cols))
                    dots = dp4a(q, kt.load(xq, xw + u, in_rows), dots)
                acc = acc + kt.load(xd, dx, in_rows) * (d * f32(dots))
            if F == Q4_0:  # 16 bytes after d: elements 0..15 in the low nibbles, 16..31 in the high
                dots, sx = kt.zeros((BM, BN), i32), kt.zeros((BM, 1), i32)
                for u in static_range(4):
                    q = join(kt.load(wh, block + 1 + 2 * u, in_cols), kt.load(wh, block + 2 + 2 * u, in_cols))
                    x0, x1 = kt.load(xq, xw + u, in_rows), kt.load(xq, xw + 4 + u, in_rows)
                    dots = dp4a(q >> 4 & NIBBLES, x1, dp4a(q & NIBBLES, x0, dots))
                    sx = dp4a(x1, ONES, dp4a(x0, ONES, sx))
                acc = acc + kt.load(xd, dx, in_rows) * (d * f32(dots - 8 * sx))  # w = d * (q - 8)
            if F == Q4_K or F == Q5_K:  # a 32-byte chunk: sub-block 2c in the low nibbles, 2c + 1 high
                c = k0 % QK // 64
                lo, hi = kt.zeros((BM, BN), i32), kt.zeros((BM, BN), i32)
                slo, shi = kt.zeros((BM, 1), i32), kt.zeros((BM, 1), i32)
                for u in static_range(8):
                    at = block + (8 if F == Q4_K else 24) + 16 * c + 2 * u  # the nibbles, past d, dmin, scales (and qh)
                    q = join(kt.load(wh, at, in_cols), kt.load(wh, at + 1, in_cols))
                    qlo, qhi = q & NIBBLES, q >> 4 & NIBBLES
                    if F == Q5_K:  # bit 2c (2c + 1) of qh's byte i is bit 4 of quant i of sub-block 2c (2c + 1)
                        h = join(kt.load(wh, block + 8 + 2 * u, in_cols), kt.load(wh, block + 9 + 2 * u, in_cols))
                        qlo, qhi = qlo | (h >> 2 * c & ONES) << 4, qhi | (h >> 2 * c + 1 & ONES) << 4
                    x0, x1 = kt.load(xq, xw + u, in_rows), kt.load(xq, xw + 8 + u, in_rows)
                    lo, hi = dp4a(qlo, x0, lo), dp4a(qhi, x1, hi)
                    slo, shi = dp4a(x0, ONES, slo), dp4a(x1, ONES, shi)
                # the two sub-blocks' scale bytes: one half of each of the 12 bytes' three words
                s0 = i32(bitcast(kt.load(wh, block + 2 + (c & 1), in_cols), u16))
                s1 = i32(bitcast(kt.load(wh, block + 4 + (c & 1), in_cols), u16))
                s2 = i32(bitcast(kt.load(wh, block + 6 + (c & 1), in_cols), u16))
                j = 64 * c  # a place of both sub-blocks in the block
                sclo, mlo = sub_scale(s0 & 255, s1 & 255, s2 & 255, j, F), sub_min(s0 & 255, s1 & 255, s2 & 255, j, F)
                schi, mhi = sub_scale(s0 >> 8, s1 >> 8, s2 >> 8, j, F), sub_min(s0 >> 8, s1 >> 8, s2 >> 8, j, F)
                dmin = f32(kt.load(wh, block + DMIN_AT, in_cols))
                acc = acc + kt.load(xd, dx, in_rows) * (d * f32(sclo * lo) - dmin * f32(mlo * slo))
                acc = acc + kt.load(xd, dx + 1, in_rows) * (d * f32(schi * hi) - dmin * f32(mhi * shi))
            if F == Q6_K:  # group t of 32 elements of half c of the block, one scale per 16 (g)
                c, t = k0 % QK // 128, k0 % 128 // 32
                it = kt.zeros((BM, BN), i32)
                sc = i32(bitcast(kt.load(wh, block + 96 + 4 * c + t, in_cols), u16))  # the group's two int8 scales
                for g in static_range(2):
                    dots, sx = kt.zeros((BM, BN), i32), kt.zeros((BM, 1), i32)
                    for u in static_range(4 * g, 4 * g + 4):
                        at = block + 32 * c + 16 * (t & 1) + 2 * u  # ql: groups 0 and 2, 1 and 3 share bytes
                        ah = block + 64 + 16 * c + 2 * u  # qh: all four groups share its bytes
                        ql = join(kt.load(wh, at, in_cols), kt.load(wh, at + 1, in_cols))
                        q = q6_word(ql, join(kt.load(wh, ah, in_cols), kt.load(wh, ah + 1, in_cols)), t)
                        x0 = kt.load(xq, xw + u, in_rows)
                        dots, sx = dp4a(q, x0, dots), dp4a(x0, ONES, sx)
                    it = it + i32(i8(sc >> 8 * g)) * (dots - 32 * sx)  # w = d * scale * (q - 32)
                acc = acc + kt.load(xd, dx, in_rows) * (d * f32(it))
        kt.store(y, (0, n0), T(acc), (m, n))

    return gguf_decode


def decode_rows(m: int) -> int:
    """The decoding kernel's ``BM`` for M rows of x: a power of two (a tile's dims are)."""
    return 1 << (m - 1).bit_length()


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


class View:
    """An operand's memory seen as another element type through ``__cuda_array_interface__``
    (``shape`` in those elements): no copy (for kaio Buffers and other device arrays; torch
    tensors use ``Tensor.view``)."""

    def __init__(self, ptr: int, shape: tuple[int, int], typestr: str, simulator: bool, readonly: bool) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, readonly), "strides": None, "version": 3,
            "stream": None if simulator else 1,
        }  # fmt: skip


def view(ops: Operands, a: Operand, ktype: dtypes.ScalarType, *, readonly: bool = True) -> Any:
    """``a`` (2-D) seen as ``ktype`` elements: its rows' bytes regrouped, the same memory."""
    if ops.torch:
        from kaio.runtime import tensors

        return a.value.view(tensors.torch_dtype(ktype))
    cols = a.shape[1] * a.dtype.bits // ktype.bits
    return View(a.ptr, (a.shape[0], cols), VIEW_TYPESTR[ktype.name], ops.device.is_simulator, readonly)


VIEW_TYPESTR = {"f16": "<f2", "i8": "|i1"}


def run(x: Any, weight: Any, qtype: Any, device: Any = None) -> Any:
    """The op itself, without the torch custom-op routing of :func:`gguf_matmul`."""
    ops = Operands(OP, x, weight, device=device)
    a = check(ops, x, weight, qtype)
    oy = ops.output((a.m, a.n), a.x.dtype)
    if not (a.m and a.n):
        return ops.result(oy)
    f = a.fmt
    formats = {"F": f.code, "QK": f.elements, "NB": f.nbytes, "D_AT": f.d_at, "DMIN_AT": f.dmin_at}
    row_bytes, wh = a.weight.shape[1], view(ops, a.weight, dtypes.f16)
    if a.m <= DECODE_ROWS:
        blocks = a.m * a.k // STEP
        xq, xd = ops.output((a.m, a.k // 4), dtypes.i32), ops.output((a.m, a.k // STEP), dtypes.f32)
        if blocks:  # K = 0 still runs the matmul kernel: no K steps, y = 0
            quantize_tile_kernel(a.x.dtype).launch(ops.device, a.x.value, view(ops, xq, dtypes.i8, readonly=False), xd.value, blocks,
                                                   grid=(math.ceil(blocks / QUANTIZE_ROWS),), R=QUANTIZE_ROWS)  # fmt: skip
        gguf_decode_kernel(a.x.dtype).launch(ops.device, xq.value, xd.value, wh, oy.value, a.m, a.n, a.k, row_bytes // 2,
                                             grid=(math.ceil(a.n / DECODE_COLS),), BM=decode_rows(a.m), BN=DECODE_COLS,
                                             STEP=f.decode_step, **formats)  # fmt: skip
    else:
        bm = 32 if a.m <= 32 else 64
        gguf_tile_kernel(a.x.dtype).launch(ops.device, a.x.value, a.weight.value, wh, oy.value, a.m, a.n, a.k, row_bytes,
                                           grid=(math.ceil(a.n / 64), math.ceil(a.m / bm)), BM=bm, BN=64, **formats)  # fmt: skip
    return ops.result(oy)


def gguf_matmul(x: Any, weight: Any, qtype: Any, *, device: Any = None) -> Any:
    """``x @ W.T`` with W given as a GGUF tensor's raw blocks (see the module doc); the result
    has x's type and kind (numpy, kaio Buffer or torch tensor)."""
    name = block_format(OP, qtype).name  # the custom op takes the format's name
    if (ops := rowops.torch_op(x, weight, device=device)) is not None:
        return ops.gguf_matmul(x, weight, name)
    return run(x, weight, name, device)
