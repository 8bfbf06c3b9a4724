"""``kaio.ops_library.gguf_matmul``: ``x @ W.T`` with W a GGUF (llama.cpp) quantised tensor.

    from kaio.ops_library import gguf_matmul
    t = gguf.GGUFReader("model.gguf").tensors[i]        # t.data: uint8 (N, K_bytes)
    y = gguf_matmul(x, t.data, t.tensor_type)           # or qtype="Q4_K"

``x`` (M, K) is f16, bf16 or f32 and so is the result (M, N); ``weight`` is the tensor's raw
block bytes, uint8 ``(N, K / QK * NB)``, in one of the formats ``Q8_0``, ``Q4_0``, ``Q4_1``,
``Q5_0``, ``Q5_1``, ``Q2_K``, ``Q3_K``, ``Q4_K``, ``Q5_K``, ``Q6_K``, ``IQ4_NL``, ``IQ4_XS``,
``MXFP4`` (their layouts: :mod:`kaio.ops_library.gguf_blocks`), or an ``F32``/``F16``/``BF16``
tensor's bytes (N, K * size), or such a tensor as its own type (N, K). W is decoded in the
kernel, never dequantised to a full matrix; :func:`dequantize` gives W itself, decoded by the
prefill kernel's code (bit for bit ``gguf.quants.dequantize``), and
:class:`~kaio.ops_library.gguf_linear.GGUFLinear` takes a ``GGUFReader``'s tensor as it is.

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
  bytes are decoded as integers ``w = (d * S) * q - dmin * M`` (``gguf_blocks``), dequantised
  to x's type in registers and fed to ``kt.dot`` (tensor cores) with the x tile, accumulating
  in f32: Marlin's design with GGUF's blocks. The float formats take this kernel at every M
  (their weights need no integer sums), reading any K.

The super-scales ``d`` and ``dmin`` are f16 fields at even byte offsets of blocks whose sizes
are all even, so the kernel reads them through a second view of the same weight bytes as f16
(``(N, K_bytes / 2)``, no copy) instead of assembling halves from bytes; the decoding kernel
reads its quant words through the same view (every format's blocks are 2-byte aligned, Q8_0's,
Q4_0's and Q6_K's no more). MXFP4's 17-byte blocks have no f16 view: its kernels read bytes.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.gguf_blocks import (
    BF16,
    F16,
    F32,
    IQ4_NL,
    IQ4_XS,
    IQ4NL_W0,
    IQ4NL_W1,
    IQ4NL_W2,
    IQ4NL_W3,
    MXFP4,
    MXFP4_W0,
    MXFP4_W1,
    MXFP4_W2,
    MXFP4_W3,
    NIBBLES,
    ONES,
    Q2_K,
    Q3_K,
    Q4_0,
    Q4_1,
    Q4_K,
    Q5_0,
    Q5_1,
    Q5_K,
    Q6_K,
    Q8_0,
    FORMATS,
    BlockFormat,
    block_format,
    e8m0_half,
    high_byte,
    join,
    lookup4,
    q6_word,
    quant,
    quant_byte,
    scale_byte,
    spread4,
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
    f32,
    floor,
    i8,
    i32,
    prmt,
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


def default_format(H: dtypes.ScalarType) -> BlockFormat:
    """The format a kernel on a weight view of type ``H`` is checked with: Q8_0 on the f16 view,
    MXFP4 on the bytes (the only format read that way)."""
    return FORMATS["MXFP4" if H == dtypes.u8 else "Q8_0"]


@cache
def gguf_tile_kernel(T: dtypes.ScalarType, H: dtypes.ScalarType = dtypes.f16) -> Any:
    """The prefill kernel (M > 8, and the float formats at every M) for activations of type
    ``T`` (see the module doc); ``F``/``QK``/``NB``/``D_AT``/``DMIN_AT``/``NS`` are the weight's
    :class:`BlockFormat`, ``H`` the type of the weight's second view (f16; u8 for MXFP4, whose
    17-byte blocks have no f16 view). ``DEQUANT`` 1 makes it :func:`dequantize`'s kernel: each
    program stores its decoded (32, BN) tiles of W (f32, ``y`` (N, K)) instead of multiplying."""

    fmt = default_format(H)  # the defaults the decorator checks the kernel with

    @kaio.tile_kernel(num_warps=4)
    def gguf_matmul(x: Array[T], w: Array[u8], wh: Array[H], y: MutArray[T], m: i32, n: i32, k: i32, row_bytes: i32,
                    offsets: Array[i32], experts: i32,
                    F: kaio.constexpr = fmt.code, QK: kaio.constexpr = fmt.elements, NB: kaio.constexpr = fmt.nbytes,
                    D_AT: kaio.constexpr = 0, DMIN_AT: kaio.constexpr = -1, NS: kaio.constexpr = 0,
                    DEQUANT: kaio.constexpr = 0, BM: kaio.constexpr = 64, BN: kaio.constexpr = 64,
                    GROUPED: kaio.constexpr = False):  # fmt: skip
        m0, n0 = i32(kt.program_id(1)) * BM, i32(kt.program_id(0)) * BN
        cols = kt.expand_dims(n0 + kt.arange(BN), 0)  # (1, BN): this tile's rows of W
        in_cols = cols < n
        end = m  # the tile's rows stop here
        rows = cols  # the tile's rows of the weight array
        k_stop = k  # the K loop's end
        if GROUPED:
            # x's rows sorted by expert (offsets: E + 1), W (E * N, row_bytes): program row p takes
            # the p-th M tile of all groups, numbered group by group; past the last one, no rows
            pm, first, m0, end, e = i32(kt.program_id(1)), 0, m, m, 0
            for g in range(experts):
                pair = kt.load(offsets, (g,), (2,), (experts + 1,))
                lo, hi = kt.min(pair, 0), kt.max(pair, 0)
                count = (hi - lo + BM - 1) // BM
                if pm >= first and pm < first + count:
                    m0, end, e = lo + (pm - first) * BM, hi, g
                first += count
            rows = cols + e * n
            if m0 >= end:  # past the groups' tiles: no rows, so no weight block read either
                k_stop = 0
        ks = kt.expand_dims(kt.arange(32), 1)  # (32, 1): the step's elements of K
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k_stop, 32):
            if QK == 1:  # a float format: element (col, k0 + ks), 32 of them past K masked to 0
                at, ok = rows * k + (k0 + ks), in_cols & (k0 + ks < k)
                if F == F16:
                    wf = f32(kt.load(wh, at, ok))
                if F == BF16:  # a bf16's bits are an f32's upper half
                    wf = bitcast(i32(bitcast(kt.load(wh, at, ok), u16)) << 16, f32)
                if F == F32:
                    wf = bitcast(join(kt.load(wh, 2 * at, ok), kt.load(wh, 2 * at + 1, ok)), f32)
            else:
                # the step lies in one block of every row: block k0 // QK, elements j of it
                block = rows * row_bytes + k0 // QK * NB  # (1, BN): each row's block, in bytes
                j = k0 % QK + ks
                lo = i32(kt.load(w, block + quant_byte(j, F), in_cols))
                hi = lo  # what a format without high bits ignores
                if F == Q5_0 or F == Q5_1 or F == Q3_K or F == Q5_K or F == Q6_K:
                    hi = i32(kt.load(w, block + high_byte(j, F), in_cols))
                # the sub-block scale bytes, the same for a row's whole step ((1, BN) tiles)
                s0, s1, s2, s3 = kt.zeros((1, BN), i32), kt.zeros((1, BN), i32), kt.zeros((1, BN), i32), kt.zeros((1, BN), i32)
                if NS > 0:
                    s0 = i32(kt.load(w, block + scale_byte(k0 % QK, 0, F), in_cols))
                    s1 = i32(kt.load(w, block + scale_byte(k0 % QK, 1, F), in_cols))
                if NS > 2:
                    s2 = i32(kt.load(w, block + scale_byte(k0 % QK, 2, F), in_cols))
                if NS > 3:
                    s3 = i32(kt.load(w, block + scale_byte(k0 % QK, 3, F), in_cols))
                if F == MXFP4:
                    d = e8m0_half(i32(kt.load(w, block, in_cols)))  # (1, BN)
                else:
                    d = f32(kt.load(wh, block // 2 + D_AT, in_cols))
                # w = (d * S) * q - dmin * M, gguf's order: exact products, one rounding. A step's
                # scales and mins are per row ((1, BN)), or two of them (per 16: one per half of ks)
                j0 = k0 % QK
                if F == Q2_K or F == Q3_K or F == Q6_K:
                    ds16 = kt.where(ks & 16 == 0, d * f32(sub_scale(s0, s1, s2, s3, j0, F)),
                                    d * f32(sub_scale(s0, s1, s2, s3, j0 + 16, F)))  # fmt: skip
                    wf = ds16 * f32(quant(lo, hi, j, F))
                else:
                    ds = d  # the formats without sub-block scales
                    if F == Q4_K or F == Q5_K or F == IQ4_XS:
                        ds = d * f32(sub_scale(s0, s1, s2, s3, j0, F))
                    wf = ds * f32(quant(lo, hi, j, F))
                if DMIN_AT >= 0:
                    dmin = f32(kt.load(wh, block // 2 + DMIN_AT, in_cols))
                    if F == Q4_1 or F == Q5_1:  # w = d * q + m
                        wf = wf + dmin
                    if F == Q4_K or F == Q5_K:
                        wf = wf - dmin * f32(sub_min(s0, s1, s2, s3, j0, F))
                    if F == Q2_K:
                        wf = wf - kt.where(ks & 16 == 0, dmin * f32(sub_min(s0, s1, s2, s3, j0, F)),
                                           dmin * f32(sub_min(s0, s1, s2, s3, j0 + 16, F)))  # fmt: skip
            if DEQUANT == 1:
                kt.store(y, cols * k + (k0 + ks), wf, in_cols & (k0 + ks < k))
            else:  # the weight tile in x's type, onto tensor cores
                acc = kt.dot(kt.load(x, (m0, k0), (BM, 32), (end, k)), T(wf), acc)
        if DEQUANT == 0:
            kt.store(y, (m0, n0), T(acc), (end, n))

    return gguf_matmul


@cache
def gguf_decode_kernel(T: dtypes.ScalarType, H: dtypes.ScalarType = dtypes.f16) -> Any:
    """The decoding kernel (M <= 8) for results of type ``T``: llama.cpp's mmvq (see the module
    doc). ``F``/``QK``/``NB``/``D_AT``/``DMIN_AT`` are the weight's :class:`BlockFormat` and
    ``STEP`` its ``decode_step``; ``BM`` >= M rows of x. ``wh`` is the weight's f16 view
    (``row_units`` halves a row), or for MXFP4 (``H`` u8) its bytes."""

    fmt = default_format(H)

    @kaio.tile_kernel(num_warps=4)
    def gguf_decode(xq: Array[i32], xd: Array[f32], wh: Array[H], y: MutArray[T],
                    m: i32, n: i32, k: i32, row_units: i32,
                    F: kaio.constexpr = fmt.code, QK: kaio.constexpr = fmt.elements, NB: kaio.constexpr = fmt.nbytes,
                    D_AT: kaio.constexpr = 0, DMIN_AT: kaio.constexpr = -1, STEP: kaio.constexpr = 32,
                    BM: kaio.constexpr = 1, BN: kaio.constexpr = 128):  # fmt: skip
        n0 = i32(kt.program_id(0)) * BN
        # (1, BN): this tile's rows of W and (BM, 1) every row of x, clamped to the last: the
        # loads need no mask (nor a fill per load), and the rows past the end are not stored
        cols = kt.minimum(kt.expand_dims(n0 + kt.arange(BN), 0), n - 1)
        rows = kt.minimum(kt.expand_dims(kt.arange(BM), 1), m - 1)
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, STEP):
            xw = rows * (k // 4) + k0 // 4  # (BM, 1): the step's first word of each row of qx
            dx = rows * (k // 32) + k0 // 32  # and the index of its first scale
            if F == MXFP4:  # bytes: the exponent, then 16 bytes of nibbles as Q4_0's
                block = cols * row_units + k0 // QK * NB
                d = e8m0_half(i32(kt.load(wh, block)))
                dots = kt.zeros((BM, BN), i32)
                for u in static_range(4):
                    at = block + 1 + 4 * u
                    q = i32(kt.load(wh, at)) | i32(kt.load(wh, at + 1)) << 8
                    q = q | i32(kt.load(wh, at + 2)) << 16 | i32(kt.load(wh, at + 3)) << 24
                    t0 = lookup4(q, MXFP4_W0, MXFP4_W1, MXFP4_W2, MXFP4_W3)
                    t1 = lookup4(q >> 16, MXFP4_W0, MXFP4_W1, MXFP4_W2, MXFP4_W3)
                    x0, x1 = kt.load(xq, xw + u), kt.load(xq, xw + 4 + u)
                    dots = dp4a(prmt(t0, t1, 0x7531), x1, dp4a(prmt(t0, t1, 0x6420), x0, dots))
                acc = acc + kt.load(xd, dx) * (d * f32(dots))  # w = d * kvalues[q]
            else:
                block = cols * row_units + k0 // QK * (NB // 2)  # (1, BN): each row's block, in halves
                d = f32(kt.load(wh, block + D_AT))
            if F == Q8_0:  # 32 int8 quants after d: w = d * q
                dots = kt.zeros((BM, BN), i32)
                for u in static_range(8):
                    q = join(kt.load(wh, block + 1 + 2 * u), kt.load(wh, block + 2 + 2 * u))
                    dots = dp4a(q, kt.load(xq, xw + u), dots)
                acc = acc + kt.load(xd, dx) * (d * f32(dots))
            if F == Q4_0 or F == Q4_1 or F == Q5_0 or F == Q5_1:
                # 16 bytes of nibbles (after d, Q4_1's/Q5_1's m, Q5's qh): elements 0..15 low, 16..31 high
                nibbles = 1  # in halves
                if F == Q4_1:
                    nibbles = 2
                if F == Q5_0:
                    nibbles = 3
                if F == Q5_1:
                    nibbles = 4
                if F == Q5_0 or F == Q5_1:  # bit e of the word qh: bit 4 of element e
                    qh = join(kt.load(wh, block + nibbles - 2), kt.load(wh, block + nibbles - 1))
                dots, sx = kt.zeros((BM, BN), i32), kt.zeros((BM, 1), i32)
                for u in static_range(4):
                    q = join(kt.load(wh, block + nibbles + 2 * u), kt.load(wh, block + nibbles + 1 + 2 * u))
                    qlo, qhi = q & NIBBLES, q >> 4 & NIBBLES
                    if F == Q5_0 or F == Q5_1:
                        qlo, qhi = qlo | spread4(qh >> 4 * u), qhi | spread4(qh >> 16 + 4 * u)
                    x0, x1 = kt.load(xq, xw + u), kt.load(xq, xw + 4 + u)
                    dots = dp4a(qhi, x1, dp4a(qlo, x0, dots))
                    sx = dp4a(x1, ONES, dp4a(x0, ONES, sx))
                if F == Q4_0:
                    acc = acc + kt.load(xd, dx) * (d * f32(dots - 8 * sx))  # w = d * (q - 8)
                if F == Q5_0:
                    acc = acc + kt.load(xd, dx) * (d * f32(dots - 16 * sx))  # w = d * (q - 16)
                if F == Q4_1 or F == Q5_1:  # w = d * q + m
                    mq = f32(kt.load(wh, block + 1))
                    acc = acc + kt.load(xd, dx) * (d * f32(dots) + mq * f32(sx))
            if F == IQ4_NL or F == IQ4_XS:  # 16 bytes of nibbles (IQ4_XS: sub-block s's), table values
                s = k0 % QK // 32
                dots = kt.zeros((BM, BN), i32)
                for u in static_range(4):
                    at = block + 1 + 2 * u
                    if F == IQ4_XS:
                        at = block + 4 + 8 * s + 2 * u
                    q = join(kt.load(wh, at), kt.load(wh, at + 1))
                    t0 = lookup4(q, IQ4NL_W0, IQ4NL_W1, IQ4NL_W2, IQ4NL_W3)
                    t1 = lookup4(q >> 16, IQ4NL_W0, IQ4NL_W1, IQ4NL_W2, IQ4NL_W3)
                    x0, x1 = kt.load(xq, xw + u), kt.load(xq, xw + 4 + u)
                    dots = dp4a(prmt(t0, t1, 0x7531), x1, dp4a(prmt(t0, t1, 0x6420), x0, dots))
                if F == IQ4_XS:  # scales_l's byte s // 2 and scales_h's byte s // 4
                    sl = i32(bitcast(kt.load(wh, block + 2 + (s >> 2)), u16)) >> ((s >> 1 & 1) << 3) & 255
                    sh = i32(bitcast(kt.load(wh, block + 1), u16)) >> ((s >> 2) << 3) & 255
                    dots = sub_scale(sl, sh, sl, sl, k0 % QK, F) * dots
                acc = acc + kt.load(xd, dx) * (d * f32(dots))
            if F == Q2_K or F == Q3_K:  # group t of 32 elements of half h: 2-bit quants at bits 2t, a scale per 16 (g)
                j = k0 % QK
                h, t = j // 128, j % 128 // 32
                it, im = kt.zeros((BM, BN), i32), kt.zeros((BM, BN), i32)
                if F == Q2_K:  # the step's two scale bytes: scale low, min high
                    sc = i32(bitcast(kt.load(wh, block + (j >> 5)), u16))
                else:  # the two low-nibble scale bytes and the two high-bit ones
                    sl = i32(bitcast(kt.load(wh, block + 48 + (j >> 5 & 3)), u16))
                    sh = i32(bitcast(kt.load(wh, block + 52 + (j >> 5 & 1)), u16))
                for g in static_range(2):
                    dots, sx = kt.zeros((BM, BN), i32), kt.zeros((BM, 1), i32)
                    for u in static_range(4 * g, 4 * g + 4):
                        at = block + (8 if F == Q2_K else 16) + 16 * h + 2 * u
                        q = join(kt.load(wh, at), kt.load(wh, at + 1)) >> 2 * t & 0x03030303
                        if F == Q3_K:  # bit 4h + t of hmask's byte i: no offset of -4
                            hm = join(kt.load(wh, block + 2 * u), kt.load(wh, block + 1 + 2 * u))
                            q = q | (hm >> (j >> 5) & ONES) << 2
                        x0 = kt.load(xq, xw + u)
                        dots, sx = dp4a(q, x0, dots), dp4a(x0, ONES, sx)
                    if F == Q2_K:
                        it = it + (sc >> 8 * g & 15) * dots
                        im = im + (sc >> 8 * g + 4 & 15) * sx
                    else:
                        scale = sub_scale(sl & 255, sl >> 8, sh & 255, sh >> 8, j + 16 * g, F)
                        it = it + scale * (dots - 4 * sx)
                if F == Q2_K:  # w = d * sc * q - dmin * m
                    dmin = f32(kt.load(wh, block + DMIN_AT))
                    acc = acc + kt.load(xd, dx) * (d * f32(it) - dmin * f32(im))
                else:  # w = d * sc * q
                    acc = acc + kt.load(xd, dx) * (d * f32(it))
            if F == Q4_K or F == Q5_K:  # a 32-byte chunk: sub-block 2c in the low nibbles, 2c + 1 high
                c = k0 % QK // 64
                lo, hi = kt.zeros((BM, BN), i32), kt.zeros((BM, BN), i32)
                slo, shi = kt.zeros((BM, 1), i32), kt.zeros((BM, 1), i32)
                for u in static_range(8):
                    at = block + (8 if F == Q4_K else 24) + 16 * c + 2 * u  # the nibbles, past d, dmin, scales (and qh)
                    q = join(kt.load(wh, at), kt.load(wh, at + 1))
                    qlo, qhi = q & NIBBLES, q >> 4 & NIBBLES
                    if F == Q5_K:  # bit 2c (2c + 1) of qh's byte i is bit 4 of quant i of sub-block 2c (2c + 1)
                        h = join(kt.load(wh, block + 8 + 2 * u), kt.load(wh, block + 9 + 2 * u))
                        qlo, qhi = qlo | (h >> 2 * c & ONES) << 4, qhi | (h >> 2 * c + 1 & ONES) << 4
                    x0, x1 = kt.load(xq, xw + u), kt.load(xq, xw + 8 + u)
                    lo, hi = dp4a(qlo, x0, lo), dp4a(qhi, x1, hi)
                    slo, shi = dp4a(x0, ONES, slo), dp4a(x1, ONES, shi)
                # the two sub-blocks' scale bytes: one half of each of the 12 bytes' three words
                s0 = i32(bitcast(kt.load(wh, block + 2 + (c & 1)), u16))
                s1 = i32(bitcast(kt.load(wh, block + 4 + (c & 1)), u16))
                s2 = i32(bitcast(kt.load(wh, block + 6 + (c & 1)), u16))
                j = 64 * c  # a place of both sub-blocks in the block
                lo0, lo1, lo2 = s0 & 255, s1 & 255, s2 & 255
                sclo, mlo = sub_scale(lo0, lo1, lo2, lo2, j, F), sub_min(lo0, lo1, lo2, lo2, j, F)
                hi0, hi1, hi2 = s0 >> 8, s1 >> 8, s2 >> 8
                schi, mhi = sub_scale(hi0, hi1, hi2, hi2, j, F), sub_min(hi0, hi1, hi2, hi2, j, F)
                dmin = f32(kt.load(wh, block + DMIN_AT))
                acc = acc + kt.load(xd, dx) * (d * f32(sclo * lo) - dmin * f32(mlo * slo))
                acc = acc + kt.load(xd, dx + 1) * (d * f32(schi * hi) - dmin * f32(mhi * shi))
            if F == Q6_K:  # group t of 32 elements of half c of the block, one scale per 16 (g)
                c, t = k0 % QK // 128, k0 % 128 // 32
                it = kt.zeros((BM, BN), i32)
                sc = i32(bitcast(kt.load(wh, block + 96 + 4 * c + t), u16))  # the group's two int8 scales
                for g in static_range(2):
                    dots, sx = kt.zeros((BM, BN), i32), kt.zeros((BM, 1), i32)
                    for u in static_range(4 * g, 4 * g + 4):
                        at = block + 32 * c + 16 * (t & 1) + 2 * u  # ql: groups 0 and 2, 1 and 3 share bytes
                        ah = block + 64 + 16 * c + 2 * u  # qh: all four groups share its bytes
                        ql = join(kt.load(wh, at), kt.load(wh, at + 1))
                        q = q6_word(ql, join(kt.load(wh, ah), kt.load(wh, ah + 1)), t)
                        x0 = kt.load(xq, xw + u)
                        dots, sx = dp4a(q, x0, dots), dp4a(x0, ONES, sx)
                    it = it + i32(i8(sc >> 8 * g)) * (dots - 32 * sx)  # w = d * scale * (q - 32)
                acc = acc + kt.load(xd, dx) * (d * f32(it))
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


def check_weight(ops: Any, weight: Any, fmt: BlockFormat, op: str = OP) -> tuple[Operand, int, int, int]:
    """``weight`` as the format's rows of blocks: (its operand, N, bytes per row, K), or an error
    naming it and the rule."""
    ow = ops.take("weight", weight)
    if ow.dtype != dtypes.u8 or len(ow.shape) != 2:
        what = "the 2-D uint8 block bytes (N, K_bytes)" if not fmt.passthrough else f"2-D uint8 bytes (N, K_bytes) or {fmt.name} (N, K)"
        raise KaioTypeError(f"{op}: `weight` must be {what} of a GGUF tensor, got {ow.dtype.name} {ow.shape}")
    n, row_bytes = ow.shape
    if row_bytes % fmt.nbytes:
        raise KaioValueError(
            f"{op}: `weight` rows of {row_bytes} bytes are not whole {fmt.name} blocks "
            f"({fmt.nbytes} bytes per {fmt.elements} elements)"
        )
    return ow, n, row_bytes, row_bytes // fmt.nbytes * fmt.elements


def check(ops: Any, x: Any, weight: Any, qtype: Any) -> Inputs:
    """The operands and sizes the format requires, or an error naming the argument and the rule
    (``ops``: an ``Operands``, or ``torch_checks.TensorMetadata`` for a fake call)."""
    fmt = block_format(OP, qtype)
    ox = ops.take("x", x)
    if ox.dtype not in ACTIVATION_TYPES or len(ox.shape) != 2:
        raise KaioTypeError(f"{OP}: `x` must be a 2-D f16, bf16 or f32 array (M, K), got {ox.dtype.name} {ox.shape}")
    m, k = ox.shape
    ow, n, row_bytes, wk = check_weight(ops, weight, fmt)
    if k != wk:
        raise KaioValueError(
            f"{OP}: `x` has K = {k} columns but each `weight` row holds {row_bytes // fmt.nbytes} {fmt.name} "
            f"blocks of {fmt.elements} elements (K = {wk})"
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


def format_args(f: BlockFormat) -> dict[str, int]:
    """The kernels' constexprs of a format."""
    return {"F": f.code, "QK": f.elements, "NB": f.nbytes, "D_AT": f.d_at, "DMIN_AT": f.dmin_at}


def weight_views(ops: Operands, weight: Operand, f: BlockFormat) -> tuple[Any, dtypes.ScalarType]:
    """The weight's second view and its type: f16 halves, or for MXFP4 (17-byte blocks, no f16
    view) the bytes themselves."""
    if f.code == MXFP4:
        return weight.value, dtypes.u8
    return view(ops, weight, dtypes.f16), dtypes.f16


def run(x: Any, weight: Any, qtype: Any, device: Any = None) -> Any:
    """The op itself, without the torch custom-op routing of :func:`gguf_matmul`."""
    ops = Operands(OP, x, weight, device=device)
    a = check(ops, x, weight, qtype)
    oy = ops.output((a.m, a.n), a.x.dtype)
    if not (a.m and a.n):
        return ops.result(oy)
    f = a.fmt
    row_bytes, (wh, H) = a.weight.shape[1], weight_views(ops, a.weight, f)
    if a.m <= DECODE_ROWS and not f.passthrough:
        blocks = a.m * a.k // STEP
        xq, xd = ops.output((a.m, a.k // 4), dtypes.i32), ops.output((a.m, a.k // STEP), dtypes.f32)
        if blocks:  # K = 0 still runs the matmul kernel: no K steps, y = 0
            quantize_tile_kernel(a.x.dtype).launch(ops.device, a.x.value, view(ops, xq, dtypes.i8, readonly=False), xd.value, blocks,
                                                   grid=(math.ceil(blocks / QUANTIZE_ROWS),), R=QUANTIZE_ROWS)  # fmt: skip
        row_units = row_bytes if H == dtypes.u8 else row_bytes // 2
        gguf_decode_kernel(a.x.dtype, H).launch(ops.device, xq.value, xd.value, wh, oy.value, a.m, a.n, a.k, row_units,
                                                grid=(math.ceil(a.n / DECODE_COLS),), BM=decode_rows(a.m), BN=DECODE_COLS,
                                                STEP=f.decode_step, **format_args(f))  # fmt: skip
    else:  # the float formats take this path at every M: their weights need no integer sums
        bm = 32 if a.m <= 32 else 64
        with ops.workspace((1,), dtypes.i32) as no_offsets:  # one matrix: the offsets are not read
            gguf_tile_kernel(a.x.dtype, H).launch(ops.device, a.x.value, a.weight.value, wh, oy.value, a.m, a.n, a.k,
                                                  row_bytes, no_offsets.value, 0,
                                                  grid=(math.ceil(a.n / 64), math.ceil(a.m / bm)), BM=bm, BN=64,
                                                  NS=f.scale_bytes, **format_args(f))  # fmt: skip
    return ops.result(oy)


def dequantize(weight: Any, qtype: Any, *, device: Any = None) -> Any:
    """W itself, f32 (N, K), decoded by the prefill kernel's own code (its ``DEQUANT`` variant):
    bit for bit ``gguf.quants.dequantize(weight, qtype)``. For checking the decoders, and for
    rows a model reads whole (a quantised embedding table)."""
    op = "gguf_matmul.dequantize"
    fmt = block_format(op, qtype)
    weight = as_bytes(weight, fmt)
    ops = Operands(op, weight, device=device)
    ow, n, row_bytes, k = check_weight(ops, weight, fmt, op)
    oy = ops.output((n, k), dtypes.f32)
    if n and k:
        unused_x = ops.output((1, 1), dtypes.f32)
        wh, H = weight_views(ops, ow, fmt)
        no_offsets = ops.output((1,), dtypes.i32)
        gguf_tile_kernel(dtypes.f32, H).launch(ops.device, unused_x.value, ow.value, wh, oy.value, 0, n, k, row_bytes,
                                               no_offsets.value, 0, grid=(math.ceil(n / 64), 1), BM=32, BN=64, NS=fmt.scale_bytes, DEQUANT=1,
                                               **format_args(fmt))  # fmt: skip
    return ops.result(oy)


FLOAT_NAMES = {"F32": ("float32",), "F16": ("float16",), "BF16": ("bfloat16",)}


def as_bytes(weight: Any, fmt: BlockFormat) -> Any:
    """A float format's weights given as their own type (``GGUFReader``'s ``tensor.data`` of an
    F16 or F32 tensor: (N, K)) seen as their bytes (N, K * size), as every format is taken;
    anything else as it is (numpy arrays and torch tensors; no copy where contiguous)."""
    if not fmt.passthrough or len(getattr(weight, "shape", ())) != 2:
        return weight
    dtype = getattr(weight, "dtype", None)
    name = str(dtype).removeprefix("torch.")
    if name not in FLOAT_NAMES[fmt.name]:
        return weight
    if type(weight).__module__.startswith("torch"):
        import torch

        return weight.contiguous().view(torch.uint8)
    import numpy as np

    if isinstance(weight, np.ndarray):
        return np.ascontiguousarray(weight).view(np.uint8)
    return weight


def gguf_matmul(x: Any, weight: Any, qtype: Any, *, device: Any = None) -> Any:
    """``x @ W.T`` with W given as a GGUF tensor's raw blocks (see the module doc); the result
    has x's type and kind (numpy, kaio Buffer or torch tensor)."""
    fmt = block_format(OP, qtype)
    name, weight = fmt.name, as_bytes(weight, fmt)  # the custom op takes the format's name
    if (ops := rowops.torch_op(x, weight, device=device)) is not None:
        return ops.gguf_matmul(x, weight, name)
    return run(x, weight, name, device)
