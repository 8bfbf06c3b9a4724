"""``kaio.ops_library.w4a16_matmul``: ``x @ W + bias`` with W in GPTQ's 4-bit format.

    from kaio.ops_library import w4a16_matmul
    y = w4a16_matmul(x, qweight, scales)                      # symmetric (zero point 8)
    y = w4a16_matmul(x, qweight, scales, qzeros, group_size=64, bias=b)

The tensors are a GPTQ checkpoint's, as AutoGPTQ and GPTQModel save them (``checkpoint_format
"gptq"``, no act-order):

* ``qweight`` int32 ``(K/8, N)``: eight 4-bit weights per word along K, the low nibble first:
  ``q[k, n] = (qweight[k // 8, n] >> 4 * (k % 8)) & 0xF``;
* ``scales`` f16 ``(K/group_size, N)``: one scale per group of ``group_size`` rows of K;
* ``qzeros`` int32 ``(K/group_size, N/8)``: the zero points packed along N, low nibble first,
  stored minus one (GPTQ's ``zeros -= 1`` before packing):
  ``z[g, n] = ((qzeros[g, n // 8] >> 4 * (n % 8)) & 0xF) + 1``; ``None``: symmetric, ``z = 8``
  (what a symmetric checkpoint's qzeros, all 7s, say too);
* ``W[k, n] = (q[k, n] - z[k // group_size, n]) * scales[k // group_size, n]``.

``x`` (M, K) is f16 or bf16 and so is the result (M, N); ``bias`` (N,) f32 or x's type, optional.
``group_size`` is -1 (one group: per-column scales) or a power of two from 16 to 4096 dividing K.

The kernel (:func:`w4a16_tile_kernel`) is a matmul whose B operand is computed rather than
loaded, Marlin's design: each K step of 128 rows reads the packed words of the (128, BN) weight
tile once, as a (16, BN) rectangle, and for each of the 8 nibbles of a word (K is summed in any
order: nibble j of every word is the rows ``k0 + 8 i + j``) unpacks it, subtracts the zero point
and multiplies by the group's scale in registers, and feeds that f16/bf16 (16, BN) tile to
``kt.dot`` on tensor cores beside the same 16 columns of x (gathered), accumulating in f32. Only
the 4-bit weights cross DRAM: a quarter of an f16 matmul's weight bytes.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, Operands

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.prelude import Array, MutArray, f32, i32, static_range

OP = "w4a16_matmul"
ACTIVATION_TYPES = (dtypes.f16, dtypes.bf16)
GROUP_SIZES = tuple(2**p for p in range(4, 13))  # 16 .. 4096; -1: one group (per-column scales)
SYMMETRIC_ZERO = 8
STEP = 128  # rows of K per step: 16 per nibble of a word, the K of one f16 dot


@cache
def w4a16_tile_kernel(T: dtypes.ScalarType, S: dtypes.ScalarType, BIAS: dtypes.ScalarType) -> Any:
    """The tile kernel for one activation type ``T``, scale type ``S`` and bias type
    (``SCALES_IN_T``: S is T, and the dequantisation runs in T: half the instructions of f32;
    ``ROW_GROUPS``: groups shorter than a K step, so each word row has its own scale row)."""

    @kaio.tile_kernel(num_warps=4, num_stages=3)
    def w4a16_matmul(x: Array[T], qweight: Array[i32], scales: Array[S], qzeros: Array[i32], bias: Array[BIAS],
                     y: MutArray[T], m: i32, n: i32, k: i32, group: i32, offsets: Array[i32], experts: i32,
                     BM: kaio.constexpr = 16, BN: kaio.constexpr = 64, BK: kaio.constexpr = 128,
                     HAS_ZEROS: kaio.constexpr = False, HAS_BIAS: kaio.constexpr = False,
                     SCALES_IN_T: kaio.constexpr = False, ROW_GROUPS: kaio.constexpr = False,
                     GROUPED: kaio.constexpr = False):  # fmt: skip
        m0, n0 = i32(kt.program_id(1)) * BM, i32(kt.program_id(0)) * BN
        cols = kt.expand_dims(n0 + kt.arange(BN), 0)  # (1, BN): this tile's columns of W
        in_cols = cols < n
        end = m  # the tile's rows stop here
        k_stop = k  # the K loop's end
        if GROUPED:
            # x's rows sorted by expert (offsets: E + 1), each expert's tensors stacked: program row
            # p takes the p-th M tile of all groups, numbered group by group; past the last, no rows
            pm, first, m0, end, e = i32(kt.program_id(1)), 0, m, m, 0
            for g in range(experts):
                pair = kt.load(offsets, (g,), (2,), (experts + 1,))
                lo, hi = kt.min(pair, 0), kt.max(pair, 0)
                count = (hi - lo + BM - 1) // BM
                if pm >= first and pm < first + count:
                    m0, end, e = lo + (pm - first) * BM, hi, g
                first += count
            word0, group0 = e * (k // 8), e * (k // group)  # the expert's first word row and scale row
            if m0 >= end:  # past the groups' tiles: no rows, so no weight word read either
                k_stop = 0
        x_rows = kt.expand_dims(m0 + kt.arange(BM), 1)  # (BM, 1)
        word = kt.arange(BK // 8)  # the word rows of a K step: word i holds rows 8 i .. 8 i + 7
        word_rows, word_cols = kt.expand_dims(word, 1), kt.expand_dims(word, 0)
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k_stop, BK):
            if GROUPED:
                words = kt.load(qweight, (word0 + k0 // 8, n0), (BK // 8, BN), (word0 + k // 8, n))
            else:
                words = kt.load(qweight, (k0 // 8, n0), (BK // 8, BN), (k // 8, n))  # 8 nibbles each
            if ROW_GROUPS:  # groups shorter than the step: each word row's own group
                g = (k0 + 8 * word_rows) // group
                live = (k0 + 8 * word_rows < k) & in_cols
            else:  # the step's group: one scale row
                g = kt.full((1, 1), k0 // group, i32)
                live = in_cols
            if GROUPED:
                g = g + group0
            scale = kt.load(scales, g * n + cols, live)
            if HAS_ZEROS:
                packed = kt.load(qzeros, g * (n // 8) + cols // 8, live)
                zero = ((packed >> cols % 8 * 4) & 15) + 1
            else:
                zero = kt.full((1, BN), SYMMETRIC_ZERO, i32)
            # K is summed in any order: nibble j of every word is the rows k0 + 8 i + j of W,
            # a (BK / 8, BN) tile, multiplied by the same columns of x; the words are read once.
            # Column k0 + 8 i + j of x is in K when k0 + 8 i is (K is a multiple of 8): one mask
            # and one address for every j, which is the address's immediate offset
            kk = k0 + 8 * word_cols
            x_at, x_live = x_rows * k + kk, (x_rows < end) & (kk < k)
            for j in static_range(8):
                q = ((words >> 4 * j) & 15) - zero
                # q (a 5-bit integer) is exact in T, and its product with the scale is exact in
                # f32: either way W is the exact product rounded once to T, like the reference
                if SCALES_IN_T:
                    w = T(q) * scale
                else:
                    w = T(f32(q) * f32(scale))
                acc = kt.dot(kt.load(x, x_at + j, x_live), w, acc)
        if HAS_BIAS:
            acc = acc + kt.expand_dims(f32(kt.load(bias, (n0,), (BN,), (n,))), 0)
        kt.store(y, (m0, n0), T(acc), (end, n))

    return w4a16_matmul


@dataclass(frozen=True)
class W4A16Config:
    """A launch's tiles: BM rows of x, BN columns of W, BK rows of K per step (16 words);
    ``row_groups``: groups shorter than a step."""

    block_m: int
    block_n: int
    block_k: int
    row_groups: bool


@dataclass(frozen=True)
class Inputs:
    """A call's checked operands (qzeros, bias: None when absent) and sizes."""

    x: Operand
    qweight: Operand
    scales: Operand
    qzeros: Operand | None
    bias: Operand | None
    m: int
    n: int
    k: int
    group: int


def choose_config(m: int, k: int, group: int, scales_in_t: bool = True) -> W4A16Config:
    """Few rows (decoding) take a 16-row tile: the smallest a tensor-core dot has. A K step is
    128 rows: 16 per nibble, the K of one dot. Groups shorter than a step give each word row
    its own scale and zero (tiles as large as the words'): at most 32 rows of x then, and 32
    columns when the dequantisation goes through f32, or sm_80 runs out of registers."""
    row_groups = group < STEP and group < k
    bm = 16 if m <= 16 else 32 if m <= 32 or row_groups else 64
    return W4A16Config(bm, 32 if row_groups and not scales_in_t else 64, STEP, row_groups)


def check(ops: Any, x: Any, qweight: Any, scales: Any, qzeros: Any, bias: Any, group_size: Any) -> Inputs:
    """The operands and sizes GPTQ's format requires, or an error naming the argument and the
    rule (``ops``: an ``Operands``, or ``torch_checks.TensorMetadata`` for a fake call)."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or (group_size != -1 and group_size not in GROUP_SIZES):
        raise KaioValueError(f"{OP}: `group_size` must be -1 or a power of two from 16 to 4096, got {group_size!r}")
    ox = ops.take("x", x)
    if ox.dtype not in ACTIVATION_TYPES or len(ox.shape) != 2:
        raise KaioTypeError(f"{OP}: `x` must be a 2-D f16 or bf16 array (M, K), got {ox.dtype.name} {ox.shape}")
    m, k = ox.shape
    oq = ops.take("qweight", qweight)
    if oq.dtype != dtypes.i32 or len(oq.shape) != 2:
        raise KaioTypeError(f"{OP}: `qweight` must be a 2-D int32 array (K/8, N), got {oq.dtype.name} {oq.shape}")
    if k % 8 or oq.shape[0] != k // 8:
        raise KaioValueError(
            f"{OP}: `qweight` packs 8 rows of K per int32, so K must be a multiple of 8 and qweight must "
            f"have K/8 rows; x has K = {k}, qweight has shape {oq.shape}"
        )
    n = oq.shape[1]
    group = k if group_size == -1 else group_size
    if group and k % group:
        raise KaioValueError(f"{OP}: K = {k} (x's columns) is not a multiple of `group_size` = {group_size}")
    groups = k // group if group else 0
    os_ = ops.take("scales", scales)
    if os_.dtype not in (dtypes.f16, ox.dtype) or os_.shape != (groups, n):
        raise KaioTypeError(
            f"{OP}: `scales` must be f16 (or x's type) of shape (K/group_size, N) = {(groups, n)}, "
            f"got {os_.dtype.name} {os_.shape}"
        )
    oz = None
    if qzeros is not None:
        if n % 8:
            raise KaioValueError(f"{OP}: `qzeros` packs 8 columns of N per int32, so N = {n} must be a multiple of 8")
        oz = ops.take("qzeros", qzeros)
        if oz.dtype != dtypes.i32 or oz.shape != (groups, n // 8):
            raise KaioTypeError(
                f"{OP}: `qzeros` must be int32 of shape (K/group_size, N/8) = {(groups, n // 8)}, "
                f"got {oz.dtype.name} {oz.shape}"
            )
    ob = None
    if bias is not None:
        ob = ops.take("bias", bias)
        if ob.shape != (n,) or ob.dtype not in (dtypes.f32, ox.dtype):
            raise KaioTypeError(f"{OP}: `bias` must be f32 or {ox.dtype.name} of shape ({n},), got {ob.dtype.name} {ob.shape}")
    if any(size >= 2**31 for size in (m * k, k // 8 * n, m * n)):
        raise KaioValueError(f"{OP}: arrays must have fewer than 2**31 elements")
    return Inputs(ox, oq, os_, oz, ob, m, n, k, max(group, 1))


def run(x: Any, qweight: Any, scales: Any, qzeros: Any = None, bias: Any = None, group_size: int = 128,
        device: Any = None) -> Any:  # fmt: skip
    """The op itself, without the torch custom-op routing of :func:`w4a16_matmul`."""
    ops = Operands(OP, x, qweight, scales, qzeros, bias, device=device)
    a = check(ops, x, qweight, scales, qzeros, bias, group_size)
    oy = ops.output((a.m, a.n), a.x.dtype)
    if a.m and a.n:  # K = 0 runs too: no K steps, y = bias (or 0)
        config = choose_config(a.m, a.k, a.group, a.scales.dtype == a.x.dtype)
        # stand-ins the kernel does not read: the zeros, the bias, one matrix's expert offsets
        zeros, bias_ = a.qzeros or a.qweight, a.bias or a.x
        kernel = w4a16_tile_kernel(a.x.dtype, a.scales.dtype, bias_.dtype)
        grid = (math.ceil(a.n / config.block_n), math.ceil(a.m / config.block_m))
        kernel.launch(ops.device, a.x.value, a.qweight.value, a.scales.value, zeros.value, bias_.value, oy.value,
                      a.m, a.n, a.k, a.group, a.qweight.value, 0, grid=grid, BM=config.block_m, BN=config.block_n,
                      BK=config.block_k,
                      HAS_ZEROS=a.qzeros is not None, HAS_BIAS=a.bias is not None,
                      SCALES_IN_T=a.scales.dtype == a.x.dtype, ROW_GROUPS=config.row_groups)  # fmt: skip
    return ops.result(oy)


def w4a16_matmul(x: Any, qweight: Any, scales: Any, qzeros: Any = None, *, group_size: int = 128,
                 bias: Any = None, g_idx: Any = None, device: Any = None) -> Any:  # fmt: skip
    """``x @ W (+ bias)`` with W given as GPTQ int4 tensors (see the module doc); the result has
    x's type and kind (numpy, kaio Buffer or torch tensor)."""
    if g_idx is not None:
        raise KaioValueError(
            f"{OP}: act-order checkpoints (`g_idx`, desc_act=True) are not supported; "
            "re-export the weights without act-order, or sort K by g_idx first (permute the columns of x and repack the rows of qweight)"
        )
    if (ops := rowops.torch_op(x, qweight, scales, qzeros, bias, device=device)) is not None:
        return ops.w4a16_matmul(x, qweight, scales, qzeros, bias, group_size)
    return run(x, qweight, scales, qzeros, bias, group_size, device)
