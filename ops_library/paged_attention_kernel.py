"""The paged decoding kernel: one new query token per sequence over a vLLM-layout KV cache.

The caches are ``(num_blocks, block_size, HKV, D)``, viewed as a matrix of
``num_blocks * block_size`` rows of ``HKV * D``: the key ``j`` of sequence ``b`` is row
``block_table[b, j // block_size] * block_size + j % block_size``, its head ``hk`` the columns
``hk * D ..< hk * D + D``. One program serves one (key chunk, batch, kv head): the ``G = H / HKV``
query heads that share the kv head are the M rows of the tile (rows past G are masked), so each
K and V page is read once for all of them. It walks its keys in BN-row blocks (BN divides the
block size, so a block never straddles two pages): one scalar load of the block table gives the
page, then the K tile, the scores on tensor cores, an online softmax as in
:mod:`kaio.ops_library.attention_kernel` (exp2, the running max ``m`` in log2 units and the sum
``l``; a row that sees no key gets 0 and a logsumexp of ``-inf``), and ``acc += p @ v``.

The scores are scaled before the max (``scale_log2 = scale * k_scale * log2(e)``), so any sign of
scale and the -inf of a masked score never meet in a product. fp8 caches (``KV`` e4m3) are
converted to q's type in registers before each dot; ``k_scale`` is folded into the score scale
and ``v_scale`` into the final ``1 / l``. ``WINDOW``: the query sits at position ``sk - 1`` and
sees keys ``sk - 1 - left`` on, so the key blocks before it are never loaded. ``SOFTCAP``:
``c * tanh(score / c)``, ``c * log2(e)`` in the exp2 scale. ``SINKS``: the head's logit joins the
first chunk's denominator only. Flash-decoding: with ``splits`` > 1 each program writes its
chunk's normalized f32 output and logsumexp at row ``(bk * splits + split) * G + r``, the layout
:func:`kaio.ops_library.attention_kernel.combine_tile_kernel` reads with ``SQ = G``.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.prelude import Array, MutArray, exp2, f32, i32, log2

NEG_INF = float("-inf")
LN2 = 0.6931471805599453
LOG2E = 1.4426950408889634


@cache
def paged_attention_tile_kernel(T: dtypes.ScalarType, KV: dtypes.ScalarType, OUT: dtypes.ScalarType) -> Any:  # noqa: N803
    """The kernel for queries of type ``T`` (f16 or bf16), caches of type ``KV`` (T or e4m3) and
    output type ``OUT`` (T, or f32 for flash-decoding's partial results)."""
    FP8 = KV != T  # noqa: N806 (read by the kernel at compile time)

    @kaio.tile_kernel(num_warps=1, num_stages=2)
    def paged_attention(q: Array[T], k_cache: Array[KV], v_cache: Array[KV], block_table: Array[i32],
                        seq_lens: Array[i32], o: MutArray[OUT], lse: MutArray[f32], sinks: Array[f32],
                        H: i32, HKV: i32, D: i32, MAX_BLOCKS: i32, scale_log2: f32, tanh_scale: f32, left: i32,
                        v_scale: f32, splits: i32, chunk: i32,
                        BM: kaio.constexpr = 16, BN: kaio.constexpr = 16, BD: kaio.constexpr = 64,
                        BLOCK_SIZE: kaio.constexpr = 16, WINDOW: kaio.constexpr = False,
                        SOFTCAP: kaio.constexpr = False, SINKS: kaio.constexpr = False):  # fmt: skip
        split = i32(kt.program_id(0))
        bk = i32(kt.program_id(1))
        b, hk = bk // HKV, bk % HKV
        G = H // HKV  # noqa: N806 (the query heads of one kv head: the tile's rows)
        q_row = b * H + hk * G  # q, o: (B*H, D); the caches: (num_blocks*BLOCK_SIZE, HKV*D)
        col = hk * D
        width = HKV * D
        sk = seq_lens[b]
        lo = split * chunk
        hi = min(sk, lo + chunk)
        if WINDOW:  # keys before sk - 1 - left are never seen: their blocks are skipped
            lo = max(lo, max(sk - 1 - left, 0) // BN * BN)

        heads = kt.arange(BM)
        m_i = kt.full((BM,), NEG_INF, f32)  # the row max of the scaled scores, in log2 units
        l_i = kt.zeros((BM,), f32)
        if SINKS:  # the sink logit of each row's head: a first term exp(sink - m), in chunk 0 only
            first = (heads < G) & (split == 0)
            sink = kt.load(sinks, hk * G + heads, heads < G)
            m_i = kt.where(first, sink * LOG2E, NEG_INF)
            l_i = kt.where(first, 1.0, 0.0)
        acc = kt.zeros((BM, BD), f32)
        qt = kt.load(q, (q_row, 0), (BM, BD), (q_row + G, D))
        for j in range(lo, hi, BN):
            page = block_table[b * MAX_BLOCKS + j // BLOCK_SIZE]  # the cp.async ring reads it for a trip only if it runs
            row = page * BLOCK_SIZE + j % BLOCK_SIZE
            kb = kt.load(k_cache, (row, col), (BN, BD), (row + hi - j, col + D), strides=(width, 1))
            if FP8:  # in registers; every e4m3 value is exact in f16 and bf16
                kq = T(kb)
            else:
                kq = kb
            s = kt.dot(qt, kt.trans(kq), kt.zeros((BM, BN), f32))
            if SOFTCAP:  # c * tanh(s * scale / c): tanh_scale = scale / c, c * log2(e) in scale_log2
                s = kt.tanh(s * tanh_scale)
            s = s * scale_log2
            keys = kt.expand_dims(j + kt.arange(BN), 0)
            visible = keys < hi
            if WINDOW:
                visible = visible & (keys >= sk - 1 - left)
            s = kt.where(kt.broadcast_to(visible, (BM, BN)), s, NEG_INF)
            m_new = kt.maximum(m_i, kt.max(s, 1))
            m_sub = kt.where(m_new == NEG_INF, 0.0, m_new)  # no key seen yet: exp2(-inf - 0) = 0
            p = exp2(s - kt.expand_dims(m_sub, 1))
            alpha = exp2(m_i - m_sub)
            l_i = l_i * alpha + kt.sum(p, 1)
            vb = kt.load(v_cache, (row, col), (BN, BD), (row + hi - j, col + D), strides=(width, 1))
            if FP8:
                vq = T(vb)
            else:
                vq = vb
            acc = kt.dot(T(p), vq, acc * kt.expand_dims(alpha, 1))
            m_i = m_new

        o_row = (bk * splits + split) * G  # q_row when there is one chunk
        seen = l_i > 0.0
        out = acc * kt.expand_dims(v_scale / kt.where(seen, l_i, 1.0), 1)
        kt.store(o, (o_row, 0), OUT(out), (o_row + G, D))
        kt.store(lse, (o_row,), kt.where(seen, (m_i + log2(kt.where(seen, l_i, 1.0))) * LN2, NEG_INF), (o_row + G,))

    return paged_attention
