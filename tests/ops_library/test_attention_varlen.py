"""attention_varlen (FlashAttention's flash_attn_varlen_func layout) on the simulator, against
attention's float64 numpy reference run on each packed sequence alone. Fresh random inputs,
outputs poisoned with NaN, odd lengths, sequences with no query or no key; 2e-2 absolute error
on the outputs, 1e-3 on the logsumexp. Then every bad-input rule, refused before any launch
with the argument named and ``out`` untouched."""

import math
import re

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import attention_varlen
from kaio.ops_library.attention import AttentionConfig, choose_config, configured_kernel, kernel_meta, padded
from kaio.prelude import f32
from kaio.targets.ptx import toolchain

from .test_attention_mods import BOUND, reference

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


def cumulative(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def packed(rng, q_lens, k_lens, h=2, hkv=2, d=32, t=np.float16):
    """q (total_q, h, d), k and v (total_k, hkv, d) and the two cu_seqlens."""
    cu_q, cu_k = cumulative(q_lens), cumulative(k_lens)
    q = rng.standard_normal((int(cu_q[-1]), h, d)).astype(t)
    k, v = (rng.standard_normal((int(cu_k[-1]), hkv, d)).astype(t) for _ in range(2))
    return q, k, v, cu_q, cu_k


def sequence_mask(b, off, causal, window, mask):
    """Which keys query i of sequence b sees (``off``: its keys minus its queries), as
    ``reference``'s mask(b, h, i, j): causal and the window bottom-right aligned, then ``mask``."""

    def seen(_b, hh, i, j):
        ok = np.ones(np.broadcast(i, j).shape, bool)
        if causal:
            ok &= j <= i + off
        if window is not None:
            ok &= (j >= i + off - window[0]) & (j <= i + off + window[1])
        if mask is not None:
            ok &= mask(b, hh, i, j)
        return ok

    return seen


def varlen_reference(q, k, v, cu_q, cu_k, causal=False, window=None, score=None, mask=None, sinks=None, scale=None):
    """(out (total_q, H, D), lse (H, total_q)): each sequence b attended alone by attention's
    reference, the mods called with b and in-sequence positions, causal and the window aligned
    to the sequence's bottom-right."""
    h, d = q.shape[1:]
    out, lse = np.zeros(q.shape), np.full((h, q.shape[0]), -np.inf)
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        sq, sk = rows.stop - rows.start, keys.stop - keys.start
        if sq == 0:
            continue
        if sk == 0:  # no key: the sink alone (output 0), or nothing
            lse[:, rows] = np.asarray(sinks, np.float64)[:, None] if sinks is not None else -np.inf
            continue
        seen = sequence_mask(b, sk - sq, causal, window, mask)

        seq_score = (lambda s, _b, hh, i, j, b=b: score(s, b, hh, i, j)) if score is not None else None
        seq = [x.transpose(1, 0, 2)[None] for x in (q[rows], k[keys], v[keys])]
        o, l = reference(*seq, score=seq_score, mask=seen, sinks=sinks, scale=scale or 1 / math.sqrt(d))
        out[rows], lse[:, rows] = o[0].transpose(1, 0, 2), l[0]
    return out, lse


def check(dev, inputs, want, **kw):
    """The op's output (poisoned ``out`` given) and logsumexp against ``want``."""
    q, k, v, cu_q, cu_k = inputs
    out = dev.alloc_from(np.full(q.shape, np.nan, q.dtype))
    longest = (int(np.diff(cu_q).max(initial=0)), int(np.diff(cu_k).max(initial=0)))
    got, lse = attention_varlen(*(dev.alloc_from(x) for x in inputs), *longest, out=out, return_lse=True, **kw)
    assert got is out
    got, lse = got.to_host().astype(np.float64), lse.to_host()
    want_out, want_lse = want
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == np.float32  # FlashAttention's varlen layout
    assert not np.isnan(got).any()
    assert float(np.abs(got - want_out).max(initial=0)) <= BOUND
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = ~np.isneginf(want_lse)
    assert float(np.abs(lse[finite] - want_lse[finite]).max(initial=0)) <= 1e-3
    return got, lse


def test_odd_lengths_sequences_without_queries_or_keys_and_gqa(dev, rng):
    inputs = packed(rng, [5, 0, 40, 17, 3], [9, 3, 40, 0, 70], h=4, hkv=2)
    _, lse = check(dev, inputs, varlen_reference(*inputs))
    assert np.isneginf(lse[:, 45:62]).all()  # the sequence with no key: -inf (and output 0)


@pytest.mark.parametrize("t", [np.float16, ml_dtypes.bfloat16])
def test_causal_is_bottom_right_aligned_in_each_sequence(dev, rng, t):
    # 130 queries: three 64-row blocks of one sequence; more queries than keys: early rows see none
    inputs = packed(rng, [130, 20, 7], [100, 9, 33], t=t)
    check(dev, inputs, varlen_reference(*inputs, causal=True), causal=True)


def test_decoding_a_few_queries_per_sequence(dev, rng):
    inputs = packed(rng, [1, 3, 1, 0], [50, 7, 0, 4], h=4, hkv=1)  # MQA; 16-row query tiles
    check(dev, inputs, varlen_reference(*inputs, causal=True), causal=True)


def test_a_config_of_smaller_tiles(dev, rng):
    inputs = packed(rng, [70, 33], [45, 90])
    check(dev, inputs, varlen_reference(*inputs, scale=0.2), scale=0.2, config=AttentionConfig(32, 16, 2, 1, 2))


@pytest.mark.parametrize("causal", [False, True])
def test_a_sliding_window_in_each_sequence(dev, rng, causal):
    inputs = packed(rng, [30, 11, 64], [80, 11, 40])
    right = 0 if causal else 5
    check(dev, inputs, varlen_reference(*inputs, causal=causal, window=(12, right)), causal=causal, window=(12, 5))


def test_softcap_and_alibi_with_in_sequence_positions(dev, rng):
    inputs = packed(rng, [21, 34], [40, 34], h=4, hkv=2, t=ml_dtypes.bfloat16)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    want = varlen_reference(*inputs, score=lambda s, b, h, i, j: 2.0 * np.tanh(s / 2.0) + slopes[h] * (j - i))
    check(dev, inputs, want, softcap=2.0, alibi_slopes=dev.alloc_from(slopes))


def test_sinks_in_every_sequence_even_one_without_keys(dev, rng):
    inputs = packed(rng, [9, 6, 25], [17, 0, 25])
    sinks = np.array([1.5, -0.5], np.float32)
    want = varlen_reference(*inputs, causal=True, sinks=sinks)
    _, lse = check(dev, inputs, want, causal=True, sinks=dev.alloc_from(sinks))
    assert np.allclose(lse[:, 9:15], sinks[:, None])  # no key: the sink's logit alone


def keys_below(b, h, q_idx, kv_idx, limits):
    return kv_idx < limits[b]


def sequence_bias(score, b, h, q_idx, kv_idx, limits):  # mod_args go to both functions
    return score + 0.5 * f32(b) - 0.25 * f32(h) + 0.01 * f32(q_idx - kv_idx)


def test_mods_see_the_sequence_index_and_in_sequence_positions(dev, rng):
    inputs = packed(rng, [12, 30, 5], [20, 30, 44])
    limits = np.array([4, 30, 0], np.int32)  # the last sequence's mask hides every key
    want = varlen_reference(*inputs, mask=lambda b, h, i, j: j < limits[b],
                            score=lambda s, b, h, i, j: s + 0.5 * b - 0.25 * h + 0.01 * (i - j))  # fmt: skip
    got, _ = check(dev, inputs, want, mask_mod=keys_below, mod_args=(dev.alloc_from(limits),), score_mod=sequence_bias)
    assert (got[42:] == 0).all()


def test_numpy_in_numpy_out_and_the_default_lse_is_not_returned(rng):
    q, k, v, cu_q, cu_k = packed(rng, [3, 8], [5, 8])
    o = attention_varlen(q, k, v, cu_q, cu_k, 8, 8)
    assert isinstance(o, np.ndarray) and o.shape == q.shape and o.dtype == q.dtype
    want, _ = varlen_reference(q, k, v, cu_q, cu_k)
    assert float(np.abs(o.astype(np.float64) - want).max()) <= BOUND


def test_an_empty_batch_launches_nothing(dev):
    q = np.zeros((0, 2, 32), np.float16)
    o, lse = attention_varlen(q, q, q, np.zeros(1, np.int32), np.zeros(1, np.int32), 0, 0, return_lse=True)
    assert o.shape == (0, 2, 32) and lse.shape == (2, 0)


def test_out_with_grad_is_refused_not_dropped():
    """Torch autograd records calls through torch.ops.kaio.attention_varlen
    (test_attention_varlen_torch.py); one with out= runs the kernel directly, and records nothing."""
    torch = pytest.importorskip("torch")
    q = torch.randn(8, 2, 32, dtype=torch.float16, requires_grad=True)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(KaioTypeError, match="attention_varlen: `out=` records no gradient"):
        attention_varlen(q, q.detach(), q.detach(), cu, cu, 8, 8, out=torch.empty_like(q))


@pytest.mark.heavy_seeds
@pytest.mark.schedule_seeds
def test_the_hopper_kernel_on_packed_sequences(rng):
    """sm_90a: 128-row query tiles over two warpgroups, wgmma, and the packed views' row stride."""
    dev = kaio.Device("sim", arch="sm_90a")
    inputs = packed(rng, [130, 3, 0, 40], [100, 67, 5, 140], h=2, hkv=1, d=64)
    check(dev, inputs, varlen_reference(*inputs, causal=True), causal=True)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_the_varlen_kernel_assembles_without_spills(arch):
    """Below D=256 (there the per-sequence rows, columns and strides cost a few bytes of spills at
    ptxas's 128 registers, as some dense D=256 variants already do)."""
    for d, sq in ((64, 1024), (96, 1024), (128, 1024), (128, 1)):
        config = choose_config(sq, d, arch)
        meta = kernel_meta(config, padded(d), True, False) | {"VARLEN": True}
        compiled = kaio.compile(configured_kernel(dtypes.f16, config), arch, __divisible__=(("D", 16), ("DV", 16)), **meta)
        report = toolchain.assemble(compiled.ptx, arch)
        assert report.spill_stores["attention"] == 0 and report.spill_loads["attention"] == 0, (d, sq)


# ---------------------------------------------------------------------------- bad input


def _call(dev, **changes):
    """A valid call (3 sequences) with ``changes`` to its arguments; ``out`` must stay untouched."""
    names = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k")
    args = dict(zip(names, packed(np.random.default_rng(0), [3, 0, 5], [4, 6, 2])))
    args |= {"max_seqlen_q": 5, "max_seqlen_k": 6}
    args |= changes
    out = args.pop("out", dev.alloc_from(np.full(args["q"].shape, np.nan, args["q"].dtype)))
    try:
        positional = [args.pop(n) for n in list(args)[:7]]
        attention_varlen(*positional, out=out, **args)
    finally:
        if hasattr(out, "to_host"):
            assert np.isnan(out.to_host()).all()  # nothing written


I32 = np.int32
BAD = [
    ({"cu_seqlens_q": np.array([0, 3, 3, 8], np.int64)}, "`cu_seqlens_q` must be int32 of shape (B+1,)"),
    ({"cu_seqlens_k": np.array([[0, 4, 10, 12]], I32)}, "`cu_seqlens_k` must be int32 of shape (B+1,)"),
    ({"cu_seqlens_k": np.array([], I32)}, "`cu_seqlens_k` must be int32 of shape (B+1,)"),
    ({"cu_seqlens_k": np.array([0, 10, 12], I32)}, "`cu_seqlens_k` must have cu_seqlens_q's shape (4,)"),
    ({"cu_seqlens_q": np.array([1, 3, 3, 8], I32)}, "`cu_seqlens_q` must start at 0"),
    ({"cu_seqlens_k": np.array([0, 7, 6, 12], I32)}, "`cu_seqlens_k` must be non-decreasing"),
    ({"cu_seqlens_q": np.array([0, 3, 3, 7], I32)}, "`cu_seqlens_q`'s last entry must be q's packed length 8"),
    ({"cu_seqlens_k": np.array([0, 4, 10, 13], I32)}, "`cu_seqlens_k`'s last entry must be k's packed length 12"),
    ({"max_seqlen_q": 4}, "`max_seqlen_q` 4 is below sequence 2's length 5"),
    ({"max_seqlen_k": 5}, "`max_seqlen_k` 5 is below sequence 1's length 6"),
    ({"max_seqlen_q": 5.0}, "`max_seqlen_q` is a non-negative integer"),
    ({"max_seqlen_k": True}, "`max_seqlen_k` is a non-negative integer"),
    ({"max_seqlen_k": -1}, "`max_seqlen_k` must lie in 0..2**31-1"),
    ({"q": np.zeros((1, 8, 2, 32), np.float16)}, "`q` must be 3-D"),
    ({"k": np.zeros((12, 2, 64), np.float16)}, "`k` must have shape (total_k, Hkv, 32)"),
    ({"v": np.zeros((12, 1, 32), np.float16)}, "`v` must have k's shape (12, 2, 32)"),
    ({"q": np.zeros((8, 3, 32), np.float16)}, "q's 3 heads must be a multiple of k's and v's 2"),
    ({"q": np.zeros((8, 2, 44), np.float16), "k": np.zeros((12, 2, 44), np.float16),
      "v": np.zeros((12, 2, 44), np.float16)}, "head dim must be a multiple of 8"),  # fmt: skip
    ({"v": np.zeros((12, 2, 32), ml_dtypes.bfloat16)}, "q, k and v must all be f16 or all bf16"),
    ({"out": np.zeros((8, 2, 32), np.float32)}, "`out` must be f16 of shape (8, 2, 32)"),
    ({"sinks": np.zeros(3, np.float32)}, "`sinks` must be f32 of shape (2,)"),
    ({"causal": 1}, "`causal` is True or False"),
]


@pytest.mark.parametrize("change, words", BAD)
def test_bad_input_is_refused_before_any_launch_naming_the_argument(dev, change, words):
    with pytest.raises(KaioTypeError, match="^attention_varlen: .*" + re.escape(words)):
        _call(dev, **change)


def test_cu_seqlens_on_the_device_are_checked_too(dev):
    with pytest.raises(KaioTypeError, match="`cu_seqlens_q` must be non-decreasing"):
        _call(dev, cu_seqlens_q=dev.alloc_from(np.array([0, 3, 2, 8], I32)))


def test_dropout_needs_a_seed_with_arrays_that_are_not_tensors(dev):
    with pytest.raises(KaioValueError, match="needs a `seed`"):
        _call(dev, dropout_p=0.1)


def test_help_shows_how_to_call_it():
    import pydoc

    text = pydoc.render_doc(attention_varlen, renderer=pydoc.plaintext)
    assert "attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)" in text


# --------------------------------------------------------------------------- backward


def varlen_reference_grads(q, k, v, do, cu_q, cu_k, causal=False, window=None, score=None, mask=None, sinks=None):
    """(dq, dk, dv[, dsinks]) in float64 by torch autograd, each sequence alone (as the forward's
    reference), the mods called with b and in-sequence positions."""
    torch = pytest.importorskip("torch")
    from .test_attention_mods import torch_reference_grads

    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    dsinks = np.zeros(q.shape[1]) if sinks is not None else None
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        sq, sk = rows.stop - rows.start, keys.stop - keys.start
        if sq == 0 or sk == 0:
            continue  # nothing flows back (a sink alone gets dlse's gradient only, none here)
        visible = sequence_mask(b, sk - sq, causal, window, mask)
        seen = lambda i, j, visible=visible: visible(b, 0, i, j)  # noqa: E731

        seq_score = (lambda s, hs, i, j, b=b: score(s, b, hs, i, j, torch)) if score is not None else None
        seq = [x.transpose(1, 0, 2)[None] for x in (q[rows], k[keys], v[keys], do[rows])]
        got = torch_reference_grads(*seq, score=seq_score, mask=seen, sinks=sinks)
        dq[rows], dk[keys], dv[keys] = (g[0].transpose(1, 0, 2) for g in got[:3])
        if sinks is not None:
            dsinks += got[3]
    return (dq, dk, dv, dsinks) if sinks is not None else (dq, dk, dv)


def softcapped(score, b, h, q_idx, kv_idx):
    return 2.0 * kt.tanh(score / 2.0) + 0.05 * f32(b)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("case", ["causal", "window", "score_mod and sinks", "bf16"])
def test_the_backward_matches_autograd_on_each_sequence(dev, rng, case, deterministic):
    pytest.importorskip("torch")
    from kaio.ops_library import attention_varlen_backward

    from .test_attention_mods import assert_grads_close

    t = ml_dtypes.bfloat16 if case == "bf16" else np.float16
    q_lens, k_lens = [5, 0, 40, 17, 33], [9, 3, 40, 0, 70]
    inputs = packed(rng, q_lens, k_lens, h=4, hkv=2, t=t)
    q, k, v, cu_q, cu_k = inputs
    do = rng.standard_normal(q.shape).astype(t)
    sinks = rng.standard_normal(4).astype(np.float32) if case == "score_mod and sinks" else None
    kw = {"causal": {"causal": True}, "window": {"window": (7, 3)}, "bf16": {"causal": True},
          "score_mod and sinks": {"score_mod": softcapped}}[case]  # fmt: skip
    ref_kw = {"causal": case in ("causal", "bf16"), "window": kw.get("window")}
    if case == "score_mod and sinks":
        ref_kw["score"] = lambda s, b, hs, i, j, torch: 2.0 * torch.tanh(s / 2.0) + 0.05 * b
        ref_kw["sinks"] = sinks
        kw["sinks"] = dev.alloc_from(sinks)
    longest = (int(np.diff(cu_q).max()), int(np.diff(cu_k).max()))
    on_dev = [dev.alloc_from(x) for x in inputs]
    o, lse = attention_varlen(*on_dev, *longest, return_lse=True, **kw)
    got = attention_varlen_backward(*on_dev[:3], o, lse, dev.alloc_from(do), *on_dev[3:], *longest,
                                    deterministic=deterministic, **kw)  # fmt: skip
    assert_grads_close(got, varlen_reference_grads(q, k, v, do, cu_q, cu_k, **ref_kw))


def test_the_backward_refuses_a_wrong_logsumexp_layout(dev, rng):
    from kaio.ops_library import attention_varlen_backward

    q, k, v, cu_q, cu_k = packed(rng, [4, 6], [4, 6])
    lse = np.zeros((q.shape[0], q.shape[1]), np.float32)  # (total_q, H): the dense layout's order
    with pytest.raises(KaioTypeError, match=r"`lse` must be f32 of shape \(2, 10\)"):
        attention_varlen_backward(q, k, v, q, lse, q, cu_q, cu_k, 6, 6, device=dev)
