"""attention's score and mask functions (``score_mod``, ``mask_mod``, ``mod_args``) and built-in
mods (``window``, ``softcap``, ``alibi_slopes``, ``sinks``) on the simulator, against a float64
numpy reference that applies the same functions to the whole score matrix. Fresh random inputs,
outputs poisoned with NaN; 2e-2 absolute error on the outputs, 1e-3 on the logsumexp."""

import math

import ml_dtypes
import numpy as np
import pytest

import kaio.tile as kt
from kaio.errors import KaioCompileError, KaioTypeError, KaioValueError
from kaio.ops_library import attention, attention_backward
from kaio.prelude import f32

BOUND = 2e-2


def reference(q, k, v, score=None, mask=None, sinks=None, lens=None, scale=None):
    """Each (batch, head)'s softmax of ``score(s, b, h, i, j)`` over the keys ``mask(b, h, i, j)``
    lets through (and the head's sink logit in the denominator)."""
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    out, lse = np.zeros((b, h, sq, d)), np.full((b, h, sq), -np.inf)
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    for bi in range(b):
        n = sk if lens is None else int(lens[bi])
        for hi in range(h):
            kh = hi // (h // hkv)
            s = q[bi, hi].astype(np.float64) @ k[bi, kh].astype(np.float64).T * (scale or 1 / math.sqrt(d))
            if score is not None:
                s = score(s, bi, hi, i, j)
            seen = (j < n) & (mask(bi, hi, i, j) if mask is not None else True)
            s = np.where(seen, s, -np.inf)
            m = s.max(1, keepdims=True)
            if sinks is not None:
                m = np.maximum(m, sinks[hi])
            m = np.where(np.isneginf(m), 0.0, m)
            p = np.exp(s - m)
            denom = p.sum(1, keepdims=True) + (np.exp(sinks[hi] - m) if sinks is not None else 0.0)
            safe = np.where(denom > 0, denom, 1.0)
            out[bi, hi] = p @ v[bi, kh].astype(np.float64) / safe
            lse[bi, hi] = np.where(denom[:, 0] > 0, m[:, 0] + np.log(safe[:, 0]), -np.inf)
    return out, lse


def inputs(rng, b=1, h=2, hkv=2, sq=40, sk=72, d=32, t=np.float16):
    return tuple(rng.standard_normal(shape).astype(t) for shape in ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)))


def check(dev, qkv, want, **kw):
    q, k, v = qkv
    out = dev.alloc_from(np.full(q.shape, np.nan, q.dtype))
    got, lse = attention(*(dev.alloc_from(x) for x in qkv), out=out, return_lse=True, **kw)
    got, lse = got.to_host().astype(np.float64), lse.to_host()
    want_out, want_lse = want
    assert not np.isnan(got).any()
    assert float(np.abs(got - want_out).max()) <= BOUND
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = ~np.isneginf(want_lse)
    assert float(np.abs(lse[finite] - want_lse[finite]).max(initial=0)) <= 1e-3
    return got


def document_mask(b, h, q_idx, kv_idx, docs):
    return docs[q_idx] == docs[kv_idx]


def head_bias(score, b, h, q_idx, kv_idx, bias, keys):
    return score + bias[h * keys[0] + kv_idx]


def softcap_recipe(score, b, h, q_idx, kv_idx):
    return 2.5 * kt.tanh(score / 2.5)


def test_softcap_is_c_tanh_of_the_score_over_c(dev, rng):
    qkv = inputs(rng)
    want = reference(*qkv, score=lambda s, *_: 2.5 * np.tanh(s / 2.5))
    builtin = check(dev, qkv, want, softcap=2.5)
    recipe = check(dev, qkv, want, score_mod=softcap_recipe)
    assert np.abs(builtin - recipe).max() <= 1e-3


def test_softcap_with_a_negative_scale(dev, rng):
    qkv = inputs(rng)
    check(dev, qkv, reference(*qkv, score=lambda s, *_: 2.0 * np.tanh(s / 2.0), scale=-0.3), softcap=2.0, scale=-0.3)


def test_score_mod_then_softcap_then_alibi(dev, rng):
    qkv = inputs(rng, sq=30, sk=30)
    slopes = np.array([0.3, 0.1], np.float32)

    def doubled(score, b, h, q_idx, kv_idx):
        return score * 2.0

    want = reference(*qkv, score=lambda s, b, h, i, j: 1.5 * np.tanh(2 * s / 1.5) + slopes[h] * (j - i),
                     mask=lambda b, h, i, j: j <= i)
    check(dev, qkv, want, score_mod=doubled, softcap=1.5, alibi_slopes=dev.alloc_from(slopes), causal=True)


@pytest.mark.parametrize("causal", [False, True])
def test_a_sliding_window_sees_left_and_right_keys_of_the_diagonal(dev, rng, causal):
    qkv = inputs(rng, sq=40, sk=150)
    off = 150 - 40  # bottom-right aligned, as causal
    right = 0 if causal else 7
    want = reference(*qkv, mask=lambda b, h, i, j: (j >= i + off - 20) & (j <= i + off + right))
    check(dev, qkv, want, window=(20, 7), causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_a_wide_window_walks_whole_blocks_unmasked_and_both_edges_masked(dev, rng, causal):
    # 64-row query blocks, 32-key blocks: a block of rows 64..127 sees keys 32..95 whole and
    # those on either side through the mask
    qkv = inputs(rng, h=1, hkv=1, sq=256, sk=256)
    right = 0 if causal else 50
    want = reference(*qkv, mask=lambda b, h, i, j: (j >= i - 100) & (j <= i + right))
    check(dev, qkv, want, window=(100, 50), causal=causal)


def test_a_window_with_kv_lens_and_rows_that_see_no_key(dev, rng):
    qkv = inputs(rng, b=2, sq=33, sk=64)
    lens = np.array([64, 9], np.int32)
    off = lens - 33  # aligned to each sequence's own keys, as causal is
    want = reference(*qkv, mask=lambda b, h, i, j: (j >= i + off[b] - 3) & (j <= i + off[b] + 2), lens=lens)
    check(dev, qkv, want, window=(3, 2), kv_lens=dev.alloc_from(lens))


def test_alibi_adds_slope_times_key_minus_query(dev, rng):
    qkv = inputs(rng, h=4, hkv=2)  # GQA too
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    want = reference(*qkv, score=lambda s, b, h, i, j: s + slopes[h] * (j - i))
    check(dev, qkv, want, alibi_slopes=dev.alloc_from(slopes), causal=False)


def test_sinks_join_the_softmax_denominator(dev, rng):
    qkv = inputs(rng, t=ml_dtypes.bfloat16)
    sinks = np.array([1.5, -0.5], np.float32)
    check(dev, qkv, reference(*qkv, sinks=sinks), sinks=dev.alloc_from(sinks))


def test_a_document_mask_of_packed_sequences_from_mod_args(dev, rng):
    qkv = inputs(rng, sq=72, sk=72)
    docs = np.repeat(np.arange(4), [10, 30, 1, 31]).astype(np.int32)
    want = reference(*qkv, mask=lambda b, h, i, j: docs[i] == docs[j])
    check(dev, qkv, want, mask_mod=document_mask, mod_args=(dev.alloc_from(docs),))


def test_a_score_mod_reading_two_captured_arrays(dev, rng):
    qkv = inputs(rng, sq=24, sk=50)
    bias = rng.standard_normal((2, 50)).astype(np.float32)
    want = reference(*qkv, score=lambda s, b, h, i, j: s + bias[h][j])
    check(dev, qkv, want, score_mod=head_bias, mod_args=(dev.alloc_from(bias.ravel()), dev.alloc_from(np.array([50], np.int32))))


def shaped_bias(score, b, h, q_idx, kv_idx, bias):
    return score + bias[h, kv_idx]


def batch_head_bias(score, b, h, q_idx, kv_idx, table):
    return score + 0.5 * table[b, h, kv_idx]


def test_mod_args_are_indexed_by_their_shape(dev, rng):
    """FlexAttention's ``bias[h, kv_idx]``: a multi-dimensional array takes one index per dim."""
    qkv = inputs(rng, b=2, sq=24, sk=50)
    bias = rng.standard_normal((2, 50)).astype(np.float32)
    table = rng.standard_normal((2, 2, 50)).astype(np.float32)
    put = dev.alloc_from  # a Buffer keeps its array's shape
    want = reference(*qkv, score=lambda s, b, h, i, j: s + bias[h][j])
    check(dev, qkv, want, score_mod=shaped_bias, mod_args=(put(bias),))
    want = reference(*qkv, score=lambda s, b, h, i, j: s + 0.5 * table[b, h][j])
    check(dev, qkv, want, score_mod=batch_head_bias, mod_args=(put(table),))


def test_a_subscript_of_the_wrong_rank_is_a_compile_error(dev, rng):
    def three(score, b, h, q_idx, kv_idx, bias):
        return score + bias[h, kv_idx, 0]

    q, k, v = inputs(rng, sq=8, sk=8)
    with pytest.raises(KaioCompileError, match=r"`bias` has 2 dims \(2, 8\), indexed with 3"):
        attention(q, k, v, score_mod=three, mod_args=(np.zeros((2, 8), np.float32),), device=dev)


def test_mods_in_the_split_key_decode_kernel(dev, rng):
    qkv = inputs(rng, sq=1, sk=300)  # few queries over many keys: flash-decoding's chunks
    sinks = np.array([0.5, 2.0], np.float32)
    want = reference(*qkv, score=lambda s, *_: 3.0 * np.tanh(s / 3.0), mask=lambda b, h, i, j: j >= 299 - 100, sinks=sinks)
    check(dev, qkv, want, softcap=3.0, window=(100, 0), sinks=dev.alloc_from(sinks))


def test_a_mask_that_hides_every_key_of_some_rows(dev, rng):
    qkv = inputs(rng, sq=20, sk=40)

    def late_rows_only(b, h, q_idx, kv_idx):
        return q_idx >= 10

    want = reference(*qkv, mask=lambda b, h, i, j: np.broadcast_to(i >= 10, (20, 40)))
    got = check(dev, qkv, want, mask_mod=late_rows_only)
    assert (got[:, :, :10] == 0).all()


# ---------------------------------------------------------------------------- bad input


def _call(dev, **kw):
    q, k, v = (dev.alloc_from(x) for x in inputs(np.random.default_rng(0), sq=16, sk=16))
    return attention(q, k, v, **kw)


@pytest.mark.parametrize(
    "kw, error, words",
    [
        ({"window": (-1, 3)}, KaioValueError, "`window` sizes must be >= 0"),
        ({"window": 3}, KaioTypeError, "`window` is a pair of integers"),
        ({"softcap": 0.0}, KaioValueError, "`softcap` must be positive"),
        ({"softcap": True}, KaioTypeError, "`softcap` is a positive number"),
        ({"mod_args": (np.zeros(2, np.int32),)}, KaioTypeError, "neither is given"),
        ({"mask_mod": document_mask}, KaioTypeError, "`mask_mod` must take 4 positional arguments"),
        ({"score_mod": lambda s, b, h, i, j: s}, KaioCompileError, "plain `def`"),
        ({"score_mod": abs}, KaioTypeError, "`score_mod` must be a Python function"),
    ],
)
def test_bad_mods_are_refused_before_any_launch(dev, kw, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        _call(dev, **kw)


def test_a_mask_mod_that_returns_no_bool_is_a_compile_error(dev):
    def scores_not_bools(b, h, q_idx, kv_idx):
        return f32(q_idx)

    with pytest.raises(KaioCompileError, match="bool") as caught:
        _call(dev, mask_mod=scores_not_bools)
    print(caught.value)


def test_per_head_arrays_must_have_one_f32_per_query_head(dev):
    with pytest.raises(KaioTypeError, match=r"`sinks` must be f32 of shape \(2,\)"):
        _call(dev, sinks=np.zeros(3, np.float32))
    with pytest.raises(KaioTypeError, match=r"`alibi_slopes` must be f32"):
        _call(dev, alibi_slopes=np.zeros(2, np.float16))


def test_mod_args_that_require_grad_are_refused_by_name():
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 2, 16, 32, dtype=torch.float16)
    bias = torch.zeros(2 * 16, requires_grad=True)
    keys = torch.tensor([16], dtype=torch.int32)
    with pytest.raises(KaioTypeError, match="`mod_args` get no gradient"):
        attention(q, q, q, score_mod=head_bias, mod_args=(bias, keys))


# ---------------------------------------------------------------------------- backward


def torch_reference_grads(q, k, v, do, score=None, mask=None, sinks=None):
    """(dq, dk, dv), and dsinks with ``sinks``, in float64 by torch autograd of the same modified
    softmax (GQA repeats the key/value heads; a head's sink is one more logit in each row's
    softmax, with no value)."""
    torch = pytest.importorskip("torch")
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    qt, kt_, vt = (torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v))
    kr, vr = kt_.repeat_interleave(h // hkv, 1), vt.repeat_interleave(h // hkv, 1)
    s = qt @ kr.transpose(-1, -2) / math.sqrt(d)
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    hs = torch.arange(h)[:, None, None]
    if score is not None:
        s = score(s, hs, i, j)
    if mask is not None:
        s = s.masked_fill(~torch.tensor(np.broadcast_to(mask(i.numpy(), j.numpy()), tuple(s.shape)).copy()), -torch.inf)
    if sinks is not None:
        st = torch.tensor(np.asarray(sinks, np.float64), requires_grad=True)
        s = torch.cat([s, st[None, :, None, None].expand(b, h, sq, 1)], -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    o = p[..., :sk] @ vr
    (o * torch.tensor(np.asarray(do, np.float64))).sum().backward()
    grads = (qt.grad.numpy(), kt_.grad.numpy(), vt.grad.numpy())
    return (*grads, st.grad.numpy()) if sinks is not None else grads


def assert_grads_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        g = g.to_host().astype(np.float64)
        assert not np.isnan(g).any()
        assert float(np.abs(g - w).max()) <= 3e-2 * max(1.0, float(np.abs(w).max()))


def prefix_lm(b, h, q_idx, kv_idx):
    """The first 12 keys seen by every query, the rest causally."""
    return (kv_idx < 12) | (kv_idx <= q_idx)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("mod", ["window", "softcap", "alibi", "document", "head bias", "prefix_lm", "bf16 document"])
def test_the_gradients_through_the_mods(dev, rng, mod, deterministic):
    torch = pytest.importorskip("torch")
    sq = sk = 48
    t = ml_dtypes.bfloat16 if mod.startswith("bf16") else np.float16
    q, k, v = inputs(rng, h=4, hkv=2, sq=sq, sk=sk, t=t)
    do = rng.standard_normal(q.shape).astype(t)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    docs = np.repeat(np.arange(3), [10, 30, 8]).astype(np.int32)
    bias = rng.standard_normal((4, sk)).astype(np.float32)
    kw, score, mask = {
        "window": ({"window": (9, 4)}, None, lambda i, j: (j >= i - 9) & (j <= i + 4)),
        "softcap": ({"softcap": 1.5}, lambda s, h, i, j: 1.5 * torch.tanh(s / 1.5), None),
        "alibi": ({"alibi_slopes": slopes}, lambda s, h, i, j: s + torch.tensor(slopes, dtype=torch.float64)[h] * (j - i), None),
        "document": ({"mask_mod": document_mask, "mod_args": (docs,)}, None, lambda i, j: docs[i] == docs[j]),
        "head bias": ({"score_mod": shaped_bias, "mod_args": (bias,)},
                      lambda s, h, i, j: s + torch.tensor(bias, dtype=torch.float64)[h, j], None),
        "prefix_lm": ({"mask_mod": prefix_lm}, None, lambda i, j: (j < 12) | (j <= i)),
        "bf16 document": ({"mask_mod": document_mask, "mod_args": (docs,)}, None, lambda i, j: docs[i] == docs[j]),
    }[mod]
    buffers = {name: dev.alloc_from(x) for name, x in (("q", q), ("k", k), ("v", v), ("do", do))}
    on_dev = {n: (dev.alloc_from(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    if "mod_args" in kw:
        on_dev["mod_args"] = tuple(dev.alloc_from(a) for a in kw["mod_args"])
    o, lse = attention(buffers["q"], buffers["k"], buffers["v"], return_lse=True, **on_dev)
    got = attention_backward(buffers["q"], buffers["k"], buffers["v"], o, lse, buffers["do"],
                             deterministic=deterministic, **on_dev)  # fmt: skip
    assert_grads_close(got, torch_reference_grads(q, k, v, do, score, mask))


def gated(score, b, h, q_idx, kv_idx, bias):
    """A score_mod with a branch, a captured load, exp and a maximum: its derivative by the
    score is kaio's own."""
    x = score * bias[h]
    if q_idx >= kv_idx:
        x = kt.maximum(x, 0.25 * score) + 0.1 * kt.exp(-score * score)
    return x


def looped(score, b, h, q_idx, kv_idx):
    for _ in range(2):
        score = score * 0.5
    return score


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("mod", ["softcap_recipe", "head_bias", "gated", "with_softcap_and_causal"])
def test_the_gradients_through_a_score_mod(dev, rng, mod, deterministic):
    torch = pytest.importorskip("torch")
    h, sq, sk = 4, 40, 56
    q, k, v = inputs(rng, h=h, hkv=2, sq=sq, sk=sk)
    do = rng.standard_normal(q.shape).astype(np.float16)
    bias = rng.standard_normal(h * sk).astype(np.float32)
    keys = np.array([sk], np.int32)
    gains = (0.5 + rng.random(h)).astype(np.float32)
    tb, tg = torch.tensor(bias, dtype=torch.float64), torch.tensor(gains, dtype=torch.float64)

    def gated_reference(s, hs, i, j):
        x = s * tg[hs]
        return torch.where(i >= j, torch.maximum(x, 0.25 * s) + 0.1 * torch.exp(-s * s), x)

    kw, score, mask = {
        "softcap_recipe": ({"score_mod": softcap_recipe}, lambda s, hs, i, j: 2.5 * torch.tanh(s / 2.5), None),
        "head_bias": ({"score_mod": head_bias, "mod_args": (bias, keys)}, lambda s, hs, i, j: s + tb[hs * sk + j], None),
        "gated": ({"score_mod": gated, "mod_args": (gains,)}, gated_reference, None),
        "with_softcap_and_causal": ({"score_mod": gated, "mod_args": (gains,), "softcap": 2.0, "causal": True},
                                    lambda s, hs, i, j: 2.0 * torch.tanh(gated_reference(s, hs, i, j) / 2.0),
                                    lambda i, j: j <= i + sk - sq),
    }[mod]  # fmt: skip
    on_dev = {n: (tuple(dev.alloc_from(a) for a in x) if n == "mod_args" else x) for n, x in kw.items()}
    bq, bk, bv, bdo = (dev.alloc_from(x) for x in (q, k, v, do))
    o, lse = attention(bq, bk, bv, return_lse=True, **on_dev)
    got = attention_backward(bq, bk, bv, o, lse, bdo, deterministic=deterministic, **on_dev)
    assert_grads_close(got, torch_reference_grads(q, k, v, do, score, mask))


@pytest.mark.parametrize("deterministic", [False, True])
def test_the_gradients_with_sinks_include_the_sinks_own(dev, rng, deterministic):
    pytest.importorskip("torch")
    h = 4
    q, k, v = inputs(rng, b=2, h=h, hkv=1, sq=33, sk=47)
    do = rng.standard_normal(q.shape).astype(np.float16)
    sinks = rng.standard_normal(h).astype(np.float32)
    bq, bk, bv, bdo, bs = (dev.alloc_from(x) for x in (q, k, v, do, sinks))
    o, lse = attention(bq, bk, bv, return_lse=True, sinks=bs, window=(20, 0))
    got = attention_backward(bq, bk, bv, o, lse, bdo, deterministic=deterministic, sinks=bs, window=(20, 0))
    window = lambda i, j: (j <= i + 47 - 33) & (j >= i + 47 - 33 - 20)  # noqa: E731
    assert_grads_close(got, torch_reference_grads(q, k, v, do, mask=window, sinks=sinks))


def test_the_sinks_gradient_with_no_key_is_the_logsumexps_gradient(dev, rng):
    """Without keys each row's softmax is its sink alone: O = 0, lse = sink, so dsink = sum(dlse)."""
    q = rng.standard_normal((1, 2, 5, 32)).astype(np.float16)
    k = np.zeros((1, 2, 0, 32), np.float16)
    sinks = np.array([0.5, -1.0], np.float32)
    dlse = rng.standard_normal((1, 2, 5)).astype(np.float32)
    bq, bk, bs = dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(sinks)
    o, lse = attention(bq, bk, bk, return_lse=True, sinks=bs)
    assert np.allclose(lse.to_host(), np.broadcast_to(sinks[None, :, None], (1, 2, 5)))
    dq, dk, dv, dsinks = attention_backward(bq, bk, bk, o, lse, dev.alloc_from(q), grad_lse=dev.alloc_from(dlse), sinks=bs)
    assert np.array_equal(dq.to_host(), np.zeros(q.shape, np.float16)) and dk.to_host().size == 0
    assert np.allclose(dsinks.to_host(), dlse.sum((0, 2)), atol=1e-5)


def test_a_score_mod_kaio_cannot_differentiate_is_refused_by_the_backward_alone(dev, rng):
    q, k, v = (dev.alloc_from(x) for x in inputs(rng, sq=16, sk=16))
    o, lse = attention(q, k, v, return_lse=True, score_mod=looped)  # the forward needs no derivative
    with pytest.raises(KaioCompileError, match="cannot differentiate a loop") as err:
        attention_backward(q, k, v, o, lse, o, score_mod=looped)
    assert "test_attention_mods.py" in str(err.value)


@pytest.mark.parametrize("mod", ["window", "softcap", "alibi", "score_mod", "mask_mod", "sinks"])
def test_torch_autograd_records_the_mods(mod):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    q, k, v = inputs(rng, h=4, hkv=2, sq=40, sk=40)
    do = rng.standard_normal(q.shape).astype(np.float16)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    docs = np.repeat(np.arange(3), [7, 20, 13]).astype(np.int32)
    gains = (0.5 + rng.random(4)).astype(np.float32)
    sinks = rng.standard_normal(4).astype(np.float32)
    tg = torch.tensor(gains, dtype=torch.float64)
    kw, score, mask = {
        "window": ({"window": (6, 2)}, None, lambda i, j: (j >= i - 6) & (j <= i + 2)),
        "softcap": ({"softcap": 1.5}, lambda s, h, i, j: 1.5 * torch.tanh(s / 1.5), None),
        "alibi": ({"alibi_slopes": torch.tensor(slopes)}, lambda s, h, i, j: s + torch.tensor(slopes, dtype=torch.float64)[h] * (j - i), None),
        "score_mod": ({"score_mod": gated, "mod_args": (torch.tensor(gains),)},
                      lambda s, h, i, j: torch.where(i >= j, torch.maximum(s * tg[h], 0.25 * s) + 0.1 * torch.exp(-s * s), s * tg[h]),
                      None),
        "mask_mod": ({"mask_mod": document_mask, "mod_args": (torch.tensor(docs),)}, None, lambda i, j: docs[i] == docs[j]),
        "sinks": ({"sinks": torch.tensor(sinks, requires_grad=True)}, None, None),
    }[mod]  # fmt: skip
    qt, kt_, vt = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    o = attention(qt, kt_, vt, **kw)
    assert isinstance(o, torch.Tensor) and o.grad_fn is not None
    o.backward(torch.tensor(do))
    got = [qt.grad, kt_.grad, vt.grad] + ([kw["sinks"].grad] if mod == "sinks" else [])
    want = torch_reference_grads(q, k, v, do, score, mask, sinks if mod == "sinks" else None)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert float(np.abs(g.double().numpy() - w).max()) <= 3e-2 * max(1.0, float(np.abs(w).max()))


def test_torch_compile_traces_a_score_mod_and_sinks():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    q, k, v = (torch.tensor(x) for x in inputs(rng, h=2, hkv=1, sq=24, sk=40))
    gains, sinks = torch.tensor([0.75, 1.25]), torch.tensor([0.5, -0.5])

    def step(q, k, v):
        return attention(q, k, v, score_mod=gated, mod_args=(gains,), sinks=sinks, causal=True)

    eager = step(q, k, v)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)(q, k, v)
    assert torch.equal(eager, compiled)


def test_torch_opcheck_of_the_builtin_mods():
    torch = pytest.importorskip("torch")
    import kaio.torch  # noqa: F401  (registers torch.ops.kaio)

    rng = np.random.default_rng(3)
    q, k, v = (torch.tensor(x) for x in inputs(rng, h=2, hkv=1, sq=24, sk=24))
    slopes = torch.tensor([0.5, 0.25])
    args = (q, k, v, True, None, None, None, 0.0, 0, 5, 0, 2.0, slopes)
    torch.library.opcheck(torch.ops.kaio.attention.default, args, test_utils=("test_schema", "test_faketensor"))
    out, lse = torch.ops.kaio.attention(*args)
    grads = (q, k, v, out, lse, torch.randn(out.shape, dtype=out.dtype), None, True, None, None, False, 0.0, 0, 5, 0, 2.0, slopes)
    torch.library.opcheck(torch.ops.kaio.attention_backward.default, grads, test_utils=("test_schema", "test_faketensor"))
    with pytest.raises(KaioValueError, match="`window` sizes must be >= 0"):
        torch.ops.kaio.attention(q, k, v, True, None, None, None, 0.0, 0, -1, 3, 0.0, None)


def test_torch_opcheck_of_functions_mod_args_and_sinks():
    torch = pytest.importorskip("torch")
    import kaio.torch  # noqa: F401  (registers torch.ops.kaio)
    from kaio.ops_library.attention_mods import mods_key

    rng = np.random.default_rng(5)
    q, k, v = (torch.tensor(x) for x in inputs(rng, h=2, hkv=1, sq=24, sk=24))
    mod_args = (torch.tensor([0.75, 1.25]), torch.tensor(np.repeat([0, 1], [10, 14]).astype(np.int32)), None, None)
    sinks = torch.tensor([0.5, -1.0])

    def gated_docs(score, b, h, q_idx, kv_idx, gains, docs):
        return score * gains[h]

    def docs_only(b, h, q_idx, kv_idx, gains, docs):
        return docs[q_idx] == docs[kv_idx]

    key = mods_key(gated_docs, docs_only)
    args = (q, k, v, False, None, None, None, 0.0, 0, -1, -1, 0.0, None, key, *mod_args, sinks)
    torch.library.opcheck(torch.ops.kaio.attention.default, args, test_utils=("test_schema", "test_faketensor"))
    out, lse = torch.ops.kaio.attention(*args)
    grads = (q, k, v, out, lse, torch.randn(out.shape, dtype=out.dtype), None, False, None, None, True, 0.0, 0, -1, -1, 0.0,
             None, key, *mod_args, sinks)  # fmt: skip
    torch.library.opcheck(torch.ops.kaio.attention_backward.default, grads, test_utils=("test_schema", "test_faketensor"))
    with pytest.raises(KaioValueError, match="names no score or mask function"):
        torch.ops.kaio.attention(q, k, v, False, None, None, None, 0.0, 0, -1, -1, 0.0, None, "nothing|-")
    with pytest.raises(KaioTypeError, match="must take 7 positional arguments"):  # the fake checks the arity too
        torch.ops.kaio.attention(q, k, v, False, None, None, None, 0.0, 0, -1, -1, 0.0, None, mods_key(gated, None), *mod_args)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_the_backward_walks_only_the_blocks_a_narrow_window_reaches(dev, rng, causal, deterministic):
    """dK/dV's programs walk only the query blocks whose rows see their key block, dQ's only the
    key blocks its rows see: most blocks lie outside a window of 27 keys over 200."""
    pytest.importorskip("torch")
    sq, sk = 130, 200
    q, k, v = inputs(rng, h=2, hkv=1, sq=sq, sk=sk)
    do = rng.standard_normal(q.shape).astype(np.float16)
    bq, bk, bv, bdo = (dev.alloc_from(x) for x in (q, k, v, do))
    o, lse = attention(bq, bk, bv, return_lse=True, window=(17, 9), causal=causal)
    got = attention_backward(bq, bk, bv, o, lse, bdo, window=(17, 9), causal=causal, deterministic=deterministic)
    right = 0 if causal else 9
    window = lambda i, j: (j >= i + sk - sq - 17) & (j <= i + sk - sq + right)  # noqa: E731
    assert_grads_close(got, torch_reference_grads(q, k, v, do, mask=window))
