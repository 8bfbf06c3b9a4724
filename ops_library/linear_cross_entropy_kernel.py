"""The tile kernels of ``linear_cross_entropy``: a chunk's copies, its loss sweep, its gradient sweep.

The op works on one chunk of ``chunk`` tokens at a time and keeps the chunk's logits
transposed, ``(vocab, chunk)`` in f32 (``W @ x_chunk^T``: kaio's matmul takes row-major
operands, and the weight is ``(vocab, hidden)`` as in ``nn.Linear``, so the transposed
product needs only the small ``x_chunk^T``). A token is a column: the sweeps load
``(BV, BR)`` tiles whose rows are vocabulary entries and whose columns are tokens (the
columns are contiguous, so the loads coalesce) and reduce along axis 0.

Tokens past the end of the input (a last chunk shorter than ``chunk``) are zero rows of
``x_chunk``: their losses are never stored and their gradients are 0.
"""

# No `from __future__ import annotations`: the kernels' annotations name the factories' types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.ops_library.cross_entropy import fast_math_pipeline
from kaio.prelude import Array, MutArray, exp, f32, i32, log, u32

NEG_INF = float("-inf")


@cache
def copy_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType) -> Any:
    """``dst[dst_row0 + i, j] = OUT(src[src_row0 + i, j])`` for a ``(rows, cols)`` window,
    zeros where the source has no row; ``TRANSPOSE``: stored as ``dst[j, dst_row0 + i]`` of a
    matrix with ``dst_ld`` columns. Gathers a chunk of x (and its transpose), scatters a chunk of
    dx, casts the f32 weight and bias gradients."""

    @kaio.tile_kernel(num_warps=4)
    def copy_rows(src: Array[IN], dst: MutArray[OUT], src_row0: i32, src_rows: i32, dst_row0: i32,
                  dst_rows: i32, cols: i32, dst_ld: i32, BR: kaio.constexpr = 32, BC: kaio.constexpr = 64,
                  TRANSPOSE: kaio.constexpr = False):  # fmt: skip
        i0 = i32(kt.program_id(0)) * BR
        c0 = i32(kt.program_id(1)) * BC
        t = OUT(kt.load(src, (src_row0 + i0, c0), (BR, BC), (src_rows, cols)))
        if TRANSPOSE:
            kt.store(dst, (dst_row0 + i0, c0), t, (dst_rows, cols), strides=(1, dst_ld))
        else:
            kt.store(dst, (dst_row0 + i0, c0), t, (dst_rows, cols))

    return copy_rows


@cache
def loss_kernel(B: dtypes.ScalarType, TT: dtypes.ScalarType) -> Any:
    """One chunk's losses and log-sum-exps: a program owns ``BR`` tokens (columns of the
    transposed logits) and walks the vocabulary in ``BV`` rows with an online max and sum, as
    ``cross_entropy`` walks a long row. Tokens ``r0 .. end`` of the input are this chunk's."""

    @kaio.tile_kernel(num_warps=4)
    def linear_cross_entropy_loss(logits_t: Array[f32], bias: Array[B], targets: Array[TT], loss: MutArray[f32],
                                  lse: MutArray[f32], r0: i32, end: i32, chunk: i32, vocab: i32, ignore: i32,
                                  BV: kaio.constexpr = 64, BR: kaio.constexpr = 32,
                                  HAS_BIAS: kaio.constexpr = False, GATHER: kaio.constexpr = True):  # fmt: skip
        j0 = i32(kt.program_id(0)) * BR
        target = i32(kt.load(targets, (r0 + j0,), (BR,), (end,)))
        column = kt.expand_dims(target, 0)
        m = kt.full((BR,), NEG_INF, f32)
        s = kt.zeros((BR,), f32)
        if GATHER:  # each token's target logit read once (flat u32 index: vocab * chunk < 2**32)
            token = j0 + kt.arange(BR)
            valid = (token < chunk) & (r0 + token < end) & (target >= 0) & (target < vocab)
            picked = kt.load(logits_t, u32(target) * u32(chunk) + u32(token), mask=valid)
            if HAS_BIAS:
                picked = picked + f32(kt.load(bias, u32(target), mask=valid))
        else:
            picked = kt.zeros((BR,), f32)
        for v0 in range(0, vocab, BV):
            t = kt.load(logits_t, (v0, j0), (BV, BR), (vocab, chunk), other=NEG_INF)
            if HAS_BIAS:
                t = t + kt.expand_dims(f32(kt.load(bias, (v0,), (BV,), (vocab,))), 1)
            if not GATHER:  # found in the sweep: a compare, a select and a sum per logit
                entry = kt.expand_dims(kt.arange(BV) + v0, 1)
                picked = picked + kt.sum(kt.where(entry == column, t, 0.0), 0)
            m_new = kt.maximum(m, kt.max(t, 0))
            shift = kt.where(m_new == NEG_INF, 0.0, m_new)
            s = s * exp(m - shift) + kt.sum(exp(t - kt.expand_dims(shift, 0)), 0)
            m = m_new
        row_lse = m + log(s)
        keep = (target != ignore) & (target >= 0) & (target < vocab)
        kt.store(loss, (r0 + j0,), kt.where(keep, row_lse - picked, 0.0), (end,))
        kt.store(lse, (r0 + j0,), row_lse, (end,))

    return linear_cross_entropy_loss.with_pipeline(fast_math_pipeline)


@cache
def grad_kernel(B: dtypes.ScalarType, TT: dtypes.ScalarType, OUT: dtypes.ScalarType) -> Any:
    """One chunk's logit gradients ``grad_loss[r] * (softmax(logits[r]) - onehot(target[r]))``
    (0 for ignored tokens and tokens past ``end``), plus ``grad_lse[r] * softmax(logits[r])``
    with ``HAS_GRAD_LSE``, from the saved log-sum-exps: elementwise,
    so a program owns ``BV`` vocabulary entries and walks the chunk's tokens. It stores them
    both ways, ``(vocab, chunk)`` for the weight gradient's product and ``(chunk, vocab)`` for
    x's, and adds each entry's sum over the chunk's tokens to the f32 bias gradient (one
    program per entry: no atomics, the same sums every run)."""

    @kaio.tile_kernel(num_warps=4)
    def linear_cross_entropy_grad(logits_t: Array[f32], bias: Array[B], targets: Array[TT], lse: Array[f32],
                                  grad_loss: Array[f32], grad_lse: Array[f32], dlogits: MutArray[OUT],
                                  dlogits_t: MutArray[OUT],
                                  dbias: MutArray[f32], r0: i32, end: i32, chunk: i32, vocab: i32, ignore: i32,
                                  BV: kaio.constexpr = 64, BR: kaio.constexpr = 32,
                                  HAS_BIAS: kaio.constexpr = False, HAS_GRAD_LSE: kaio.constexpr = False):  # fmt: skip
        v0 = i32(kt.program_id(0)) * BV
        entry = kt.expand_dims(kt.arange(BV) + v0, 1)
        b = kt.zeros((BV, 1), f32)
        if HAS_BIAS:
            b = kt.expand_dims(f32(kt.load(bias, (v0,), (BV,), (vocab,))), 1)
        bias_sum = kt.zeros((BV,), f32)
        for j0 in range(0, chunk, BR):
            # the targets as a row (1, BR) before any use: a (BR,) tile feeding both the mask and
            # the one-hot compare came out in a layout that lost some columns' mask
            target = kt.expand_dims(i32(kt.load(targets, (r0 + j0,), (BR,), (end,))), 0)
            inside = kt.expand_dims(kt.arange(BR) + (r0 + j0) < end, 0)
            keep = inside & (target != ignore) & (target >= 0) & (target < vocab)
            row_lse = kt.expand_dims(kt.load(lse, (r0 + j0,), (BR,), (end,)), 0)
            g = kt.expand_dims(kt.load(grad_loss, (r0 + j0,), (BR,), (end,)), 0)
            t = kt.load(logits_t, (v0, j0), (BV, BR), (vocab, chunk))
            if HAS_BIAS:
                t = t + b
            onehot = kt.where(entry == target, 1.0, 0.0)
            p = exp(t - row_lse)
            d = kt.where(keep, g * (p - onehot), 0.0)
            if HAS_GRAD_LSE:  # every token's log-sum-exp is an output, ignored or not
                d = d + kt.where(inside, kt.expand_dims(kt.load(grad_lse, (r0 + j0,), (BR,), (end,)), 0) * p, 0.0)
            kt.store(dlogits_t, (v0, j0), OUT(d), (vocab, chunk))
            kt.store(dlogits, (v0, j0), OUT(d), (vocab, chunk), strides=(1, vocab))
            bias_sum = bias_sum + kt.sum(d, 1)
        if HAS_BIAS:
            kt.store(dbias, (v0,), kt.load(dbias, (v0,), (BV,), (vocab,)) + bias_sum, (vocab,))

    return linear_cross_entropy_grad.with_pipeline(fast_math_pipeline)
