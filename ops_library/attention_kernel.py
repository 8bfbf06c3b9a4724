"""The attention kernel: FlashAttention-2's forward pass as a tile kernel.

One program computes a BM-row block of queries of one (batch, head). It walks the keys in
BN-row blocks: scores ``s = q @ k^T`` on tensor cores; an online softmax keeps each row's
running max ``m`` (in log2 units: ``max(s) * scale * log2(e)``) and sum ``l``, rescaling the
output accumulator when the max grows; ``p = exp2(s * scale_log2 - m)`` is one FFMA and one
``exp2`` per score (the kernel runs with the ``fast-math`` pass: ``ex2.approx.ftz``); then
``acc += p @ v``. The row's output is ``acc * (1 / l)`` (one reciprocal per row) and its
logsumexp ``(m + log2(l)) * ln(2)``. A row that sees no key gets 0 and ``-inf``, never NaN.

As in FlashAttention, the keys are walked in two loops: first the key blocks every row of the
program sees whole, with no mask at all, then the blocks that need one (with ``CAUSAL``, aligned
to the bottom-right: query i sees key j iff j <= i + Sk - Sq, those on the diagonal; and the
last, ragged block). Each loop stages its own Q tile and K/V rings in shared memory; the second
loop's take the first loop's bytes (``reuse-dead-shared``), so two loops cost the shared memory
of one. Blocks past the diagonal
are skipped. ``NEG_SCALE`` (a negative scale) takes the row minimum of the scores instead of the
maximum. Query head h reads key/value head ``h // (H / HKV)`` (GQA, MQA). ``kv_lens[b]``
(``HAS_LENS``) shortens batch b's keys. Head dims that are not a power of two (96) run in the
next power of two, masked by the bound D. q and k have head dim D (tile BD), v and o their own
DV (tile BDV): DeepSeek's 192 / 128. Without ``SPLIT_DV`` the kernel reads D for both (the
bounds of K's and V's copies are one value, as are their compares).

Dropout (``DROPOUT``): the probability of query ``q`` and key ``k`` of (batch, head) ``(b, h)`` is
kept iff ``rand(seed, offset) > drop_p`` (Triton's numbers, ``kaio.random``) with the 64-bit
``offset = ((b * H + h) * SQ + q) * SK + k``, and then scaled by ``drop_scale = 1 / (1 - p)``;
the row sums (so the logsumexp) see every probability, the output only the kept ones, as in
FlashAttention. The backward regenerates the same mask from the same offsets.

Variable-length batches (``VARLEN``, FlashAttention's ``flash_attn_varlen_func`` layout): the
sequences are packed, q and o (SQ = total queries, H*D), k and v (SK = total keys, HKV*D), and
the program of (sequence b, head h) finds its rows from the cumulative lengths, ``cu_q[b] ..
cu_q[b+1]`` and ``cu_k[b] .. cu_k[b+1]``, and its head's D columns at ``h * D``: every load and
store is a view with a row stride of H*D (HKV*D). Causal and window masks align to each
sequence's own bottom-right; the mods see b, h and positions within the sequence; lse is (H,
total queries). The grid covers the longest sequence's queries: a block past its sequence's
last query walks no key and stores nothing. No key splits. Dropout's offsets there are
``((h * total_q + row) * total_k + k)``, ``row`` the query's packed row and ``k`` the key's
index in its sequence (each (head, query, key) its own counter).

Block masks (``BLOCK_MASK``, :mod:`kaio.ops_library.block_mask`): ``bmask`` lists, for each
(batch, head, BQ_MASK-row query block) of the mask (``MB`` x ``MH`` x ``NQB`` rows; a mask
made for every batch entry or head has 1 of them), the counts of full and of partial key
blocks of BKV_MASK keys and their indices; the first loop walks the full blocks' keys
unmasked, the second the partial ones' through the mask function, and no other key is loaded
(BM divides BQ_MASK and BN divides BKV_MASK).

Flash-decoding (few queries, many keys): with ``splits`` > 1 the programs along axis 0 also
split the keys into chunks of ``chunk`` (a multiple of BN); each writes its chunk's normalized
output (f32) and logsumexp, and :func:`combine_tile_kernel` merges the chunks.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.ops_library.attention_mods import NO_MODS, AttentionMods
from kaio.prelude import Array, MutArray, exp2, f32, fma, i32, i64, log2, static_range, u32, u64

NEG_INF = float("-inf")
PAST_MAX = float("inf")  # a masked score with a negative scale: past the row minimum
LN2 = 0.6931471805599453
LOG2E = 1.4426950408889634


@cache
def attention_tile_kernel(T: dtypes.ScalarType, OUT: dtypes.ScalarType, mods: AttentionMods = NO_MODS) -> Any:  # noqa: N803
    """The forward kernel for one input type (f16 or bf16) and output type (T, or f32 for the
    partial results of flash-decoding), specialized for a score and a mask function
    (:mod:`kaio.ops_library.attention_mods`)."""
    SCORE, MASK = mods.score, mods.mask  # noqa: N806 (read by the kernel at compile time)
    HAS_SCORE, HAS_MASK = SCORE is not None, MASK is not None  # noqa: N806
    A0, A1, A2, A3 = mods.arg_types  # noqa: N806

    @kaio.tile_kernel(num_warps=4, num_stages=2)
    def attention(q: Array[T], k: Array[T], v: Array[T], o: MutArray[OUT], lse: MutArray[f32],
                  kv_lens: Array[i32], cu_q: Array[i32], cu_k: Array[i32],
                  H: i32, HKV: i32, SQ: i32, SK: i32, D: i32, DV: i32, scale_log2: f32,
                  splits: i32, chunk: i32, drop_p: f32, drop_scale: f32, seed: u64,
                  scale: f32, softcap: f32, left: i32, right: i32, slopes: Array[f32], sinks: Array[f32],
                  x0: Array[A0], x1: Array[A1], x2: Array[A2], x3: Array[A3],
                  bmask: Array[i32], MB: i32, MH: i32, NQB: i32, NKB: i32,
                  BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BD: kaio.constexpr = 64,
                  BDV: kaio.constexpr = 64, SPLIT_DV: kaio.constexpr = False, CAUSAL: kaio.constexpr = False, HAS_LENS: kaio.constexpr = False,
                  NEG_SCALE: kaio.constexpr = False, DROPOUT: kaio.constexpr = False,
                  WINDOW: kaio.constexpr = False, SOFTCAP: kaio.constexpr = False,
                  ALIBI: kaio.constexpr = False, SINKS: kaio.constexpr = False,
                  VARLEN: kaio.constexpr = False, BLOCK_MASK: kaio.constexpr = False,
                  BQ_MASK: kaio.constexpr = 128, BKV_MASK: kaio.constexpr = 128):  # fmt: skip
        MODDED = ALIBI or HAS_SCORE  # noqa: N806 (scores scaled and changed, then scale_log2 = log2(e))
        if not SPLIT_DV:  # one head dim: K's and V's bounds are one value, their compares shared
            DV = D  # noqa: N806
        pid = i32(kt.program_id(0))
        m0, split = pid // splits * BM, pid % splits
        bh = i32(kt.program_id(1))
        b, h = bh // H, bh % H
        # the rows of (b, h) in q: (B*H*SQ, D), o: (B*H*SQ, DV); k: (B*HKV*SK, D), v: (B*HKV*SK, DV);
        # split outputs: (B*H*splits*SQ, DV)
        sq, seq_k = SQ, SK  # this sequence's queries and keys
        q_col, q_end, q_ld = 0, D, D  # the head's columns [q_col, q_end) of rows q_ld apart
        kv_col, kv_end, kv_ld = 0, D, D
        v_col, v_end, v_ld = 0, DV, DV  # v's and o's, of the value head dim
        o_col, o_end, o_ld = 0, DV, DV
        if VARLEN:  # packed sequences: q (SQ = total queries, H*D), o (H*DV); k (SK = total keys, HKV*D), v (HKV*DV)
            q_row, kv_row = cu_q[b], cu_k[b]
            sq, seq_k = cu_q[b + 1] - q_row, cu_k[b + 1] - kv_row
            hk = h // (H // HKV)
            q_col, q_ld, o_col, o_ld = h * D, H * D, h * DV, H * DV
            kv_col, kv_ld, v_col, v_ld = hk * D, HKV * D, hk * DV, HKV * DV
            q_end, kv_end, v_end, o_end = q_col + D, kv_col + D, v_col + DV, o_col + DV
        else:
            q_row = bh * SQ
            kv_row = (b * HKV + h // (H // HKV)) * SK
        sk = seq_k
        if HAS_LENS:
            sk = min(kv_lens[b], seq_k)
        if VARLEN:  # the grid covers the longest sequence: a block past this one's queries walks no key
            sk = sk if m0 < sq else 0
        lo = split * chunk
        hi = min(sk, lo + chunk)
        band = hi  # keys below it that every row of the block sees
        if CAUSAL:  # bottom-right aligned: row r sees key j <= r + sk - sq
            hi = max(min(hi, m0 + BM + sk - sq), 0)  # past the block's last row's last key: skipped
            band = min(hi, m0 + 1 + sk - sq)
        if HAS_MASK:  # the function decides, element by element: every block masked
            band = lo
        full = lo + max(band - lo, 0) // BN * BN  # [lo, full): whole key blocks, no mask
        if WINDOW:  # row r sees keys r + sk - sq - left ..= r + sk - sq + right
            reach = right
            if CAUSAL:
                reach = min(right, 0)
            hi = max(min(hi, m0 + BM + sk - sq + reach), 0)  # past the last row's last key: skipped
            lo = max(lo, max(m0 + sk - sq - left, 0) // BN * BN)  # before the first row's first: skipped
            # [w_lo, w_hi): the blocks every row sees whole, the unmasked loop's; the masked loop
            # walks [lo, w_lo) then [w_hi, hi), its index j jumping the gap at w_lo
            w_lo = min(max(lo, (max(m0 + BM - 1 + sk - sq - left, 0) + BN - 1) // BN * BN), hi)
            w_hi = w_lo + max(min(band, m0 + 1 + sk - sq + reach) - w_lo, 0) // BN * BN
            if HAS_MASK:
                w_hi = w_lo
        if BLOCK_MASK:  # the block mask's lists of this query block's key blocks: full ones, partial ones
            mrows = MB * MH * NQB
            mrow = ((b % MB) * MH + h % MH) * NQB + m0 // BQ_MASK
            n_full, n_part = bmask[mrow], bmask[mrows + mrow]

        m_i = kt.full((BM,), NEG_INF, f32)  # the row max of the scores, in log2 units
        l_i = kt.zeros((BM,), f32)
        if SINKS:  # the head's sink logit joins every row's softmax: a first term exp(sink - m)
            first = split == 0  # of flash-decoding's chunks, one counts it
            m_i = kt.full((BM,), kt.where(first, sinks[h] * LOG2E, NEG_INF), f32)
            l_i = kt.full((BM,), kt.where(first, 1.0, 0.0), f32)
        acc = kt.zeros((BM, BDV), f32)
        for phase in static_range(2):  # FlashAttention's two key loops: whole blocks, then masked ones
            masked = phase == 1
            qt = kt.load(q, (q_row + m0, q_col), (BM, BD), (q_row + sq, q_end), (q_ld, 1))  # one copy per loop
            start, stop = lo, full
            if masked:
                start, stop = full, hi
            if WINDOW:
                start, stop = w_lo, w_hi
                if masked:
                    start, stop = lo, w_lo + (hi - w_hi)
            step = BN
            if BLOCK_MASK:  # j counts the listed blocks' BN-key steps: full ones unmasked, then partial ones masked
                per_block = BKV_MASK // BN
                step, start, stop = 1, 0, n_full * per_block
                listed = 2 * mrows + mrow * NKB
                if masked:
                    stop = n_part * per_block
                    listed = listed + mrows * NKB
            for j in range(start, stop, step):
                n0 = j
                if WINDOW and masked:
                    n0 = j if j < w_lo else j + (w_hi - w_lo)
                if BLOCK_MASK:  # j >= 0: as unsigned, its quotient and remainder by the steps are a shift and a mask
                    n0 = bmask[listed + i32(u32(j) // per_block)] * BKV_MASK + i32(u32(j) % per_block) * BN
                kb = kt.load(k, (kv_row + n0, kv_col), (BN, BD), (kv_row + sk, kv_end), (kv_ld, 1))
                s = kt.dot(qt, kt.trans(kb), kt.zeros((BM, BN), f32))  # raw scores; scaled in exp2
                if masked or MODDED or HAS_MASK:  # the scores' query and key indices
                    rows = kt.expand_dims(m0 + kt.arange(BM), 1)
                    cols = kt.expand_dims(n0 + kt.arange(BN), 0)
                if HAS_SCORE or HAS_MASK:  # the functions see in-range indices only (past them: masked)
                    q_idx, kv_idx = kt.minimum(rows, sq - 1), kt.minimum(cols, seq_k - 1)
                if MODDED:  # the scaled score, modified; exp2 then scales by log2(e)
                    s = s * scale
                    if HAS_SCORE:
                        s = SCORE(s, b, h, q_idx, kv_idx, x0, x1, x2, x3)
                    if SOFTCAP:
                        s = softcap * kt.tanh(s * (1.0 / softcap))
                    if ALIBI:
                        s = s + slopes[h] * f32(cols - rows)
                elif SOFTCAP:  # c * tanh(s * scale / c): one FMUL and one tanh, c in exp2's scale_log2
                    s = kt.tanh(s * (scale / softcap))
                if masked:  # a diagonal or ragged block
                    if CAUSAL:
                        visible = (cols < sk) & (cols <= rows + (sk - sq))
                    else:
                        visible = kt.broadcast_to(cols < sk, (BM, BN))
                    if WINDOW:
                        visible = visible & (cols >= rows + (sk - sq - left)) & (cols <= rows + (sk - sq + right))
                    if HAS_MASK:
                        visible = visible & MASK(b, h, q_idx, kv_idx, x0, x1, x2, x3)
                    if NEG_SCALE:
                        s = kt.where(visible, s, PAST_MAX)
                    else:
                        s = kt.where(visible, s, NEG_INF)
                if NEG_SCALE:  # the largest scaled score is the smallest score
                    m_new = kt.maximum(m_i, kt.min(s, 1) * scale_log2)
                else:
                    m_new = kt.maximum(m_i, kt.max(s, 1) * scale_log2)
                m_sub = m_new  # a whole block gives every row a finite max
                if masked or MODDED:  # a row with no key seen yet: exp2(-inf - 0) = 0, not NaN
                    m_sub = kt.where(m_new == NEG_INF, 0.0, m_new)
                p = exp2(fma(s, scale_log2, -kt.expand_dims(m_sub, 1)))  # one FFMA before each exp2
                alpha = exp2(m_i - m_sub)
                l_i = l_i * alpha + kt.sum(p, 1)
                if DROPOUT:  # after the row sums: they see every probability, the output the kept ones
                    drop_row = q_row  # varlen: a head's rows follow the previous head's (the lse's layout)
                    if VARLEN:
                        drop_row = h * SQ + q_row
                    offs = kt.expand_dims(i64(drop_row + m0 + kt.arange(BM)), 1) * i64(SK) + kt.expand_dims(i64(n0 + kt.arange(BN)), 0)
                    p = kt.where(kt.rand(seed, offs) > drop_p, p * drop_scale, 0.0)
                vb = kt.load(v, (kv_row + n0, v_col), (BN, BDV), (kv_row + sk, v_end), (v_ld, 1))
                acc = kt.dot(T(p), vb, acc * kt.expand_dims(alpha, 1))
                m_i = m_new

        if VARLEN:  # o as q; lse (H, total queries), FlashAttention's varlen softmax_lse
            o_row, lse_row = q_row, h * SQ + q_row
        else:
            o_row = (bh * splits + split) * SQ  # computed here: one value fewer held across the key loops
            lse_row = o_row
        seen = l_i > 0.0
        out = acc * kt.expand_dims(1.0 / kt.where(seen, l_i, 1.0), 1)  # one reciprocal per row
        kt.store(o, (o_row + m0, o_col), OUT(out), (o_row + sq, o_end), (o_ld, 1))
        kt.store(lse, (lse_row + m0,), kt.where(seen, (m_i + log2(kt.where(seen, l_i, 1.0))) * LN2, NEG_INF), (lse_row + sq,))

    return attention


@cache
def combine_tile_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """Flash-decoding's second step: each query row's output is the chunks' outputs weighted by
    ``exp(lse_chunk - lse)``, with ``lse`` the logsumexp of the chunks' (kept as a running max
    and sum, like the main loop)."""

    @kaio.tile_kernel(num_warps=1, num_stages=0)
    def combine(parts: Array[f32], part_lse: Array[f32], o: MutArray[T], lse: MutArray[f32],
                SQ: i32, D: i32, splits: i32, BM: kaio.constexpr = 16, BD: kaio.constexpr = 64):  # fmt: skip
        m0 = i32(kt.program_id(0)) * BM
        bh = i32(kt.program_id(1))
        m_i = kt.full((BM,), NEG_INF, f32)
        l_i = kt.zeros((BM,), f32)
        acc = kt.zeros((BM, BD), f32)
        for s in range(splits):
            row = (bh * splits + s) * SQ
            lse_s = kt.load(part_lse, (row + m0,), (BM,), (row + SQ,), other=NEG_INF)
            m_new = kt.maximum(m_i, lse_s)
            m_safe = kt.where(m_new == NEG_INF, 0.0, m_new)
            w = kt.exp(lse_s - m_safe)
            alpha = kt.exp(m_i - m_safe)
            part = kt.load(parts, (row + m0, 0), (BM, BD), (row + SQ, D))
            acc = acc * kt.expand_dims(alpha, 1) + part * kt.expand_dims(w, 1)
            l_i = l_i * alpha + w
            m_i = m_new
        seen = l_i > 0.0
        out = acc / kt.expand_dims(kt.where(seen, l_i, 1.0), 1)
        kt.store(o, (bh * SQ + m0, 0), T(out), (bh * SQ + SQ, D))
        kt.store(lse, (bh * SQ + m0,), kt.where(seen, m_i + kt.log(kt.where(seen, l_i, 1.0)), NEG_INF), (bh * SQ + SQ,))

    return combine
