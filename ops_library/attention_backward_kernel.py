"""The attention backward kernels: FlashAttention-2's backward pass as tile kernels.

With ``P = softmax(S)``, ``S = scale * Q K^T`` and the forward's output ``O = P V``, the
gradients of a loss with ``dO = dL/dO`` (and ``dlse = dL/dlse`` when the logsumexp is used) are

    dV = P^T dO        dP = dO V^T        dS = P * (dP - D)        D = rowsum(dO * O) - dlse
    dQ = scale * dS K                      dK = scale * dS^T Q

``P`` is never stored: it is recomputed block by block from ``S`` and the forward's saved
logsumexp, ``P = exp2(S * scale * log2(e) - lse * log2(e))``, exactly normalised without a
running max. Three kernels (Triton's fused-attention tutorial's structure):

* :func:`delta_tile_kernel`: ``D`` per query row, in f32;
* :func:`dkdv_tile_kernel`: one program per key block and key/value head. It holds the block's
  K and V and its dK, dV accumulators in registers and walks every query block of every query
  head of its group (GQA/MQA: the group's gradients are summed in registers, no atomics). With
  ``ATOMIC_DQ`` it also adds each block's ``dS K`` into an f32 dQ buffer with atomics (their
  order, so dQ's last bits, may vary from run to run on a GPU);
* :func:`dq_tile_kernel`: the deterministic dQ: one program per query block and head walks
  the keys the block sees, as the forward does, and accumulates ``dS K`` in registers;
  :func:`scale_cast_tile_kernel` turns the atomic path's f32 buffer into dQ.

With dropout (``DROPOUT``: the forward's mask ``Z``, kept probabilities scaled by ``drop_scale``,
regenerated from the seed and the same offsets, :mod:`kaio.ops_library.attention_kernel`) the
forward's output is ``O = (P * Z) V``, so ``dV = (P * Z)^T dO`` and ``dS = P * (dP * Z - D)``
with ``D = rowsum(dO * O)`` as before (FlashAttention's backward with dropout).

Causality, ``kv_lens`` and the ``-inf`` logsumexp of a row that sees no key are one test,
:func:`probability`: an element is visible iff its key is below the batch's length and, with
``CAUSAL``, at or left of the bottom-right aligned diagonal; invisible elements get
``P = 0``, so such rows contribute nothing.
"""

# No `from __future__ import annotations`: the kernels' annotations name the factories' types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.ops_library.attention_mods import NO_MODS, AttentionMods
from kaio.prelude import Array, MutArray, bool_, exp2, f32, i32, i64, u32, u64

LOG2E = 1.4426950408889634
PAST_ROWS = float("inf")  # the logsumexp read past the rows: a zero weight exp(sink - inf)


@kaio.device
def probability(s: f32, lse2: f32, row: i32, col: i32, sq: i32, sk: i32, CAUSAL: i32) -> f32:  # noqa: N803
    """``P`` of query ``row`` and key ``col`` from the log2-scaled score ``s`` and logsumexp
    ``lse2``; 0 where the key is not visible (past ``sk``, past the query rows, or after the
    diagonal ``col <= row + sk - sq`` with ``CAUSAL``), so the ``-inf`` logsumexp of a row
    without keys is never used."""
    visible = col < sk and row < sq
    if CAUSAL == 1:
        visible = visible and col <= row + (sk - sq)
    return exp2(s - lse2) if visible else 0.0


@kaio.device
def in_window(row: i32, col: i32, sq: i32, sk: i32, left: i32, right: i32) -> bool_:
    """Whether query ``row`` sees key ``col`` through the forward's ``window=(left, right)``
    (bottom-right aligned, as causal)."""
    return col >= row + (sk - sq - left) and col <= row + (sk - sq + right)


@kaio.device
def listed_slot(rows: i32, row: i32, listed: i32, n_full: i32, nth: i32) -> i32:
    """Where a block mask's lists (``kaio.ops_library.block_mask``: ``rows`` rows of counts,
    then ``listed`` entries a row) hold the ``nth`` block of ``row``: its full blocks, then its
    partial ones. One select, no branch: the cp.async ring computes it for the trip ahead."""
    return 2 * rows + row * listed + nth if nth < n_full else 2 * rows + (rows + row) * listed + nth - n_full


@cache
def delta_tile_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """``delta = rowsum(f32(dO) * f32(O)) - dlse`` over the (rows, D) arrays."""

    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def attention_delta(o: Array[T], do: Array[T], dlse: Array[f32], delta: MutArray[f32], rows: i32, D: i32, H: i32,
                        BM: kaio.constexpr = 32, BD: kaio.constexpr = 64, HAS_DLSE: kaio.constexpr = False,
                        VARLEN: kaio.constexpr = False):  # fmt: skip
        m0 = i32(kt.program_id(0)) * BM
        col, end, ld, stat = 0, D, D, m0  # the rows' columns [col, end), ld apart; their statistics' first
        if VARLEN:  # o, dO (tokens, H*D); delta, dlse (H, tokens) as the forward's logsumexp: program (block, h)
            h = i32(kt.program_id(1))
            col, end, ld, stat = h * D, h * D + D, H * D, h * rows + m0
        ot = f32(kt.load(o, (m0, col), (BM, BD), (rows, end), (ld, 1)))
        dout = f32(kt.load(do, (m0, col), (BM, BD), (rows, end), (ld, 1)))
        d = kt.sum(ot * dout, 1)
        if HAS_DLSE:
            d = d - kt.load(dlse, (stat,), (BM,), (stat - m0 + rows,))
        kt.store(delta, (stat,), d, (stat - m0 + rows,))

    return attention_delta


@cache
def dkdv_tile_kernel(T: dtypes.ScalarType, warps: int = 4, stages: int = 0, mods: AttentionMods = NO_MODS) -> Any:  # noqa: N803
    """dK and dV (and, with ``ATOMIC_DQ``, dQ's f32 partial sums) for one input type and the
    forward's score and mask functions (``mods``, with the score function's derivative).
    ``maxnreg=255`` tells ptxas every register is available: without it, its occupancy
    heuristic may squeeze this kernel (about 120 registers at D=32, 4 warps) into 96 for more
    blocks per SM and spill (sm_90a)."""

    SCORE, DSCORE, MASK = mods.score, mods.score_grad, mods.mask  # noqa: N806 (read by the kernel at compile time)
    HAS_SCORE, HAS_MASK = SCORE is not None, MASK is not None  # noqa: N806
    A0, A1, A2, A3 = mods.arg_types  # noqa: N806

    @kaio.tile_kernel(num_warps=warps, num_stages=stages, maxnreg=255)
    def attention_dkdv(q: Array[T], k: Array[T], v: Array[T], do: Array[T], lse: Array[f32], delta: Array[f32],
                       dk: MutArray[T], dv: MutArray[T], dq_acc: MutArray[f32], kv_lens: Array[i32],
                       cu_q: Array[i32], cu_k: Array[i32],
                       H: i32, HKV: i32, SQ: i32, SK: i32, D: i32, DV: i32, scale: f32, drop_p: f32, drop_scale: f32,
                       seed: u64, softcap: f32, left: i32, right: i32, slopes: Array[f32],
                       x0: Array[A0], x1: Array[A1], x2: Array[A2], x3: Array[A3],
                       bmask: Array[i32], MB: i32, MH: i32, NROW: i32, NLIST: i32,
                       BM: kaio.constexpr = 32, BN: kaio.constexpr = 32, BD: kaio.constexpr = 64,
                       BDV: kaio.constexpr = 64, SPLIT_DV: kaio.constexpr = False, CAUSAL: kaio.constexpr = 0, HAS_LENS: kaio.constexpr = False,
                       ATOMIC_DQ: kaio.constexpr = False, DROPOUT: kaio.constexpr = False,
                       WINDOW: kaio.constexpr = False, SOFTCAP: kaio.constexpr = False,
                       ALIBI: kaio.constexpr = False, BLOCK_MASK: kaio.constexpr = False,
                       BROW_MASK: kaio.constexpr = 32, BLIST_MASK: kaio.constexpr = 32,
                       VARLEN: kaio.constexpr = False):  # fmt: skip
        if not SPLIT_DV:  # one head dim (as the forward's)
            DV = D  # noqa: N806
        n0 = i32(kt.program_id(0)) * BN
        bh = i32(kt.program_id(1))  # b * HKV + key/value head
        b, hk = bh // HKV, bh % HKV
        group = H // HKV
        kv_row = bh * SK  # q: (B*H*SQ, D), o, dO: (B*H*SQ, DV); k: (B*HKV*SK, D), v: (B*HKV*SK, DV)
        sq, seq_k = SQ, SK  # this sequence's queries and keys
        kv_col, kv_end, kv_ld = 0, D, D  # the head's columns [kv_col, kv_end) of rows kv_ld apart
        v_col, v_end, v_ld = 0, DV, DV  # v's, of the value head dim
        q_ld, o_ld = D, DV
        if VARLEN:  # packed sequences, as the forward's: q (SQ = total queries, H*D), dO (H*DV); k (SK keys, HKV*D), v (HKV*DV)
            kv_row, first_q = cu_k[b], cu_q[b]
            sq, seq_k = cu_q[b + 1] - first_q, cu_k[b + 1] - kv_row
            kv_col, kv_ld, q_ld = hk * D, HKV * D, H * D
            v_col, v_ld, o_ld = hk * DV, HKV * DV, H * DV
            kv_end, v_end = kv_col + D, v_col + DV
        sk = seq_k
        if HAS_LENS:
            sk = min(kv_lens[b], seq_k)
        m_lo = 0
        if CAUSAL == 1:  # the first query block with a row that sees key n0
            m_lo = max(n0 - (sk - sq), 0) // BM * BM
        m_hi = sq
        if WINDOW:  # rows r see keys r + sk - sq - left ..= r + sk - sq + right: the rows that see this block
            m_lo = max(m_lo, max(n0 - (sk - sq) - right, 0) // BM * BM)
            m_hi = min(m_hi, max(n0 + BN - (sk - sq) + left, 0))
        if n0 >= sk:  # no visible key in this block: its gradients are zeros
            m_hi = 0
        scale_log2 = scale * LOG2E

        kb = kt.load(k, (kv_row + n0, kv_col), (BN, BD), (kv_row + sk, kv_end), (kv_ld, 1))
        vb = kt.load(v, (kv_row + n0, v_col), (BN, BDV), (kv_row + sk, v_end), (v_ld, 1))
        cols = kt.expand_dims(n0 + kt.arange(BN), 1)  # key index, down the (BN, BM) transposed scores
        dims = kt.expand_dims(kt.arange(BD), 1)
        dk_acc = kt.zeros((BN, BD), f32)
        dv_acc = kt.zeros((BN, BDV), f32)
        for g in range(group):
            q_row = (b * H + hk * group + g) * SQ
            q_col, q_end, stat = 0, D, q_row  # stat: the first row's logsumexp and delta
            o_col, o_end = 0, DV  # dO's
            if VARLEN:  # lse and delta (H, total queries)
                q_row, q_col, o_col = first_q, (hk * group + g) * D, (hk * group + g) * DV
                q_end, o_end, stat = q_col + D, o_col + DV, (hk * group + g) * SQ + first_q
            start, stop = m_lo, m_hi
            if BLOCK_MASK:  # the query blocks the block mask lists for this key block, full then partial
                mrows = MB * MH * NROW
                mrow = ((b % MB) * MH + (hk * group + g) % MH) * NROW + n0 // BROW_MASK
                n_full = bmask[mrow]
                start, stop = 0, (n_full + bmask[mrows + mrow]) * BLIST_MASK
            for j in range(start, stop, BM):
                m0 = j
                if BLOCK_MASK:  # j >= 0: as unsigned, its quotient and remainder by the block are a shift and a mask
                    nth = i32(u32(j) // BLIST_MASK)
                    m0 = bmask[listed_slot(mrows, mrow, NLIST, n_full, nth)] * BLIST_MASK + i32(u32(j) % BLIST_MASK)
                qb = kt.load(q, (q_row + m0, q_col), (BM, BD), (q_row + sq, q_end), (q_ld, 1))
                dob = kt.load(do, (q_row + m0, o_col), (BM, BDV), (q_row + sq, o_end), (o_ld, 1))
                lse2 = kt.load(lse, (stat + m0,), (BM,), (stat + sq,)) * LOG2E
                di = kt.load(delta, (stat + m0,), (BM,), (stat + sq,))
                rows = kt.expand_dims(m0 + kt.arange(BM), 0)
                st = kt.dot(kb, kt.trans(qb), kt.zeros((BN, BM), f32))
                if HAS_SCORE or HAS_MASK:  # the functions see in-range indices only
                    q_idx, kv_idx = kt.minimum(rows, sq - 1), kt.minimum(cols, seq_k - 1)
                if HAS_SCORE or SOFTCAP or ALIBI:  # the forward's modified score, in log2 units
                    st = st * scale
                    if HAS_SCORE:  # d score_mod / d score at the scaled score, then the score
                        gt = DSCORE(st, b, hk * group + g, q_idx, kv_idx, x0, x1, x2, x3)
                        st = SCORE(st, b, hk * group + g, q_idx, kv_idx, x0, x1, x2, x3)
                    if SOFTCAP:
                        tt = kt.tanh(st * (1.0 / softcap))
                        st = softcap * tt
                    if ALIBI:
                        st = st + slopes[hk * group + g] * f32(cols - rows)
                    st = st * LOG2E
                else:
                    st = st * scale_log2
                pt = probability(st, kt.expand_dims(lse2, 0), rows, cols, sq, sk, CAUSAL)
                if WINDOW:
                    pt = kt.where(in_window(rows, cols, sq, sk, left, right), pt, 0.0)
                if HAS_MASK:
                    pt = kt.where(MASK(b, hk * group + g, q_idx, kv_idx, x0, x1, x2, x3), pt, 0.0)
                dpt = kt.dot(vb, kt.trans(dob), kt.zeros((BN, BM), f32))
                if DROPOUT:  # the forward's mask, transposed: (BN keys, BM queries)
                    # the forward's offsets: its rows are stat's (varlen: h * total_q + the packed row)
                    zt = kt.where(kt.rand(seed, (i64(stat) + i64(rows)) * i64(SK) + i64(cols)) > drop_p, drop_scale, 0.0)
                    dv_acc = kt.dot(T(pt * zt), dob, dv_acc)
                    dpt = dpt * zt
                else:
                    dv_acc = kt.dot(T(pt), dob, dv_acc)
                dsc = pt * (dpt - kt.expand_dims(di, 0))  # the gradient of the (modified) score
                if SOFTCAP:  # through c * tanh(x / c): 1 - tanh^2
                    dsc = dsc * (1.0 - tt * tt)
                if HAS_SCORE:  # through score_mod (where P is 0 its derivative may be anything)
                    dsc = kt.where(pt > 0.0, dsc * gt, 0.0)
                dst = T(dsc)
                dk_acc = kt.dot(dst, qb, dk_acc)
                if ATOMIC_DQ:  # dQ^T = K^T dS^T, added into the f32 buffer (q's layout) element by element
                    dqt = kt.dot(kt.trans(kb), dst, kt.zeros((BD, BM), f32))
                    inside = (rows < sq) & (dims < D)
                    kt.atomic_add(dq_acc, (q_row + rows) * q_ld + q_col + dims, dqt, mask=inside)
        kt.store(dk, (kv_row + n0, kv_col), T(dk_acc * scale), (kv_row + seq_k, kv_end), (kv_ld, 1))
        kt.store(dv, (kv_row + n0, v_col), T(dv_acc), (kv_row + seq_k, v_end), (v_ld, 1))

    return attention_dkdv


@cache
def dq_tile_kernel(T: dtypes.ScalarType, warps: int = 4, stages: int = 0, mods: AttentionMods = NO_MODS) -> Any:  # noqa: N803
    """The deterministic dQ: each program owns a query block and sums over the keys it sees."""
    SCORE, DSCORE, MASK = mods.score, mods.score_grad, mods.mask  # noqa: N806 (read by the kernel at compile time)
    HAS_SCORE, HAS_MASK = SCORE is not None, MASK is not None  # noqa: N806
    A0, A1, A2, A3 = mods.arg_types  # noqa: N806

    @kaio.tile_kernel(num_warps=warps, num_stages=stages)
    def attention_dq(q: Array[T], k: Array[T], v: Array[T], do: Array[T], lse: Array[f32], delta: Array[f32],
                     dq: MutArray[T], kv_lens: Array[i32], cu_q: Array[i32], cu_k: Array[i32],
                     H: i32, HKV: i32, SQ: i32, SK: i32, D: i32, DV: i32, scale: f32,
                     drop_p: f32, drop_scale: f32, seed: u64, softcap: f32, left: i32, right: i32, slopes: Array[f32],
                     x0: Array[A0], x1: Array[A1], x2: Array[A2], x3: Array[A3],
                     bmask: Array[i32], MB: i32, MH: i32, NROW: i32, NLIST: i32,
                     BM: kaio.constexpr = 32, BN: kaio.constexpr = 32,
                     BD: kaio.constexpr = 64, BDV: kaio.constexpr = 64, SPLIT_DV: kaio.constexpr = False, CAUSAL: kaio.constexpr = 0,
                     HAS_LENS: kaio.constexpr = False, DROPOUT: kaio.constexpr = False, WINDOW: kaio.constexpr = False,
                     SOFTCAP: kaio.constexpr = False, ALIBI: kaio.constexpr = False,
                     BLOCK_MASK: kaio.constexpr = False, BROW_MASK: kaio.constexpr = 32,
                     BLIST_MASK: kaio.constexpr = 32, VARLEN: kaio.constexpr = False):  # fmt: skip
        if not SPLIT_DV:  # one head dim (as the forward's)
            DV = D  # noqa: N806
        m0 = i32(kt.program_id(0)) * BM
        bh = i32(kt.program_id(1))  # b * H + query head
        b, h = bh // H, bh % H
        q_row = bh * SQ
        kv_row = (b * HKV + h // (H // HKV)) * SK
        sq, seq_k = SQ, SK  # this sequence's queries and keys
        q_col, q_end, q_ld, stat = 0, D, D, q_row  # stat: the first row's logsumexp and delta
        kv_col, kv_end, kv_ld = 0, D, D
        o_col, o_end, o_ld = 0, DV, DV  # dO's and v's, of the value head dim
        v_col, v_end, v_ld = 0, DV, DV
        if VARLEN:  # packed sequences, as the forward's; lse and delta (H, total queries)
            q_row, kv_row = cu_q[b], cu_k[b]
            sq, seq_k = cu_q[b + 1] - q_row, cu_k[b + 1] - kv_row
            hk = h // (H // HKV)
            q_col, q_ld, o_col, o_ld, stat = h * D, H * D, h * DV, H * DV, h * SQ + q_row
            kv_col, kv_ld, v_col, v_ld = hk * D, HKV * D, hk * DV, HKV * DV
            q_end, kv_end, o_end, v_end = q_col + D, kv_col + D, o_col + DV, v_col + DV
        sk = seq_k
        if HAS_LENS:
            sk = min(kv_lens[b], seq_k)
        if VARLEN:  # the grid covers the longest sequence: a block past this one's queries walks no key
            sk = sk if m0 < sq else 0
        lo, hi = 0, sk
        if CAUSAL == 1:  # the last key the block's last row sees, as in the forward
            hi = max(min(sk, m0 + BM + sk - sq), 0)
        if WINDOW:  # from the first row's first key to the last row's last
            lo = max(m0 + (sk - sq) - left, 0) // BN * BN
            hi = max(min(hi, m0 + BM + (sk - sq) + right), 0)
        scale_log2 = scale * LOG2E

        qb = kt.load(q, (q_row + m0, q_col), (BM, BD), (q_row + sq, q_end), (q_ld, 1))
        dob = kt.load(do, (q_row + m0, o_col), (BM, BDV), (q_row + sq, o_end), (o_ld, 1))
        lse2 = kt.expand_dims(kt.load(lse, (stat + m0,), (BM,), (stat + sq,)) * LOG2E, 1)
        di = kt.expand_dims(kt.load(delta, (stat + m0,), (BM,), (stat + sq,)), 1)
        rows = kt.expand_dims(m0 + kt.arange(BM), 1)
        acc = kt.zeros((BM, BD), f32)
        if BLOCK_MASK:  # the key blocks the block mask lists for this query block, full then partial
            mrows = MB * MH * NROW
            mrow = ((b % MB) * MH + h % MH) * NROW + m0 // BROW_MASK
            n_full = bmask[mrow]
            lo, hi = 0, (n_full + bmask[mrows + mrow]) * BLIST_MASK
        for j in range(lo, hi, BN):
            n0 = j
            if BLOCK_MASK:  # j >= 0: as unsigned, its quotient and remainder by the block are a shift and a mask
                nth = i32(u32(j) // BLIST_MASK)
                n0 = bmask[listed_slot(mrows, mrow, NLIST, n_full, nth)] * BLIST_MASK + i32(u32(j) % BLIST_MASK)
            kb = kt.load(k, (kv_row + n0, kv_col), (BN, BD), (kv_row + sk, kv_end), (kv_ld, 1))
            vb = kt.load(v, (kv_row + n0, v_col), (BN, BDV), (kv_row + sk, v_end), (v_ld, 1))
            s = kt.dot(qb, kt.trans(kb), kt.zeros((BM, BN), f32))
            cols = kt.expand_dims(n0 + kt.arange(BN), 0)
            if HAS_SCORE or HAS_MASK:  # the functions see in-range indices only
                q_idx, kv_idx = kt.minimum(rows, sq - 1), kt.minimum(cols, seq_k - 1)
            if HAS_SCORE or SOFTCAP or ALIBI:  # the forward's modified score, in log2 units
                s = s * scale
                if HAS_SCORE:  # d score_mod / d score at the scaled score, then the score
                    grad = DSCORE(s, b, h, q_idx, kv_idx, x0, x1, x2, x3)
                    s = SCORE(s, b, h, q_idx, kv_idx, x0, x1, x2, x3)
                if SOFTCAP:
                    t = kt.tanh(s * (1.0 / softcap))
                    s = softcap * t
                if ALIBI:
                    s = s + slopes[h] * f32(cols - rows)
                s = s * LOG2E
            else:
                s = s * scale_log2
            p = probability(s, lse2, rows, cols, sq, sk, CAUSAL)
            if WINDOW:
                p = kt.where(in_window(rows, cols, sq, sk, left, right), p, 0.0)
            if HAS_MASK:
                p = kt.where(MASK(b, h, q_idx, kv_idx, x0, x1, x2, x3), p, 0.0)
            dp = kt.dot(dob, kt.trans(vb), kt.zeros((BM, BN), f32))
            if DROPOUT:  # the forward's mask of these (query, key) pairs
                dp = dp * kt.where(kt.rand(seed, (i64(stat) + i64(rows)) * i64(SK) + i64(cols)) > drop_p, drop_scale, 0.0)
            ds = p * (dp - di)  # the gradient of the (modified) score
            if SOFTCAP:  # through c * tanh(x / c): 1 - tanh^2
                ds = ds * (1.0 - t * t)
            if HAS_SCORE:  # through score_mod (where P is 0 its derivative may be anything)
                ds = kt.where(p > 0.0, ds * grad, 0.0)
            acc = kt.dot(T(ds), kb, acc)
        kt.store(dq, (q_row + m0, q_col), T(acc * scale), (q_row + sq, q_end), (q_ld, 1))

    return attention_dq


@cache
def sink_grad_tile_kernel() -> Any:
    """The gradient of each head's sink logit: its probability in row i is ``exp(sink - lse_i)``
    and the logsumexp's gradient there ``-D_i``, so ``dsink = -sum_i exp(sink - lse_i) * D_i``
    over the batch's rows of the head. One program per head."""

    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def attention_sink_grad(lse: Array[f32], delta: Array[f32], sinks: Array[f32], dsinks: MutArray[f32],
                            B: i32, H: i32, SQ: i32, BM: kaio.constexpr = 512):  # fmt: skip
        h = i32(kt.program_id(0))
        sink = sinks[h]
        acc = kt.zeros((BM,), f32)
        for b in range(B):
            row = (b * H + h) * SQ
            for m0 in range(0, SQ, BM):  # past the rows: lse +inf, so a zero weight
                lse_b = kt.load(lse, (row + m0,), (BM,), (row + SQ,), other=PAST_ROWS)
                acc = acc + kt.exp(sink - lse_b) * kt.load(delta, (row + m0,), (BM,), (row + SQ,))
        kt.store(dsinks, (h,), kt.full((1,), -kt.sum(acc, 0), f32), (H,))

    return attention_sink_grad


@cache
def scale_cast_tile_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """``out = T(acc * scale)`` over n elements: the atomic path's f32 dQ to the input type."""

    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def attention_dq_cast(acc: Array[f32], out: MutArray[T], n: i32, scale: f32, BLOCK: kaio.constexpr = 1024):
        start = i32(kt.program_id(0)) * BLOCK
        kt.store(out, (start,), T(kt.load(acc, (start,), (BLOCK,), (n,)) * scale), (n,))

    return attention_dq_cast
