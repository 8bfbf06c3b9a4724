"""attention's mods against PyTorch's own FlexAttention (``torch.nn.attention.flex_attention``,
run eagerly on the CPU in float64 on the same rounded inputs): the same masks and score
functions, each written once for kaio (``kt`` builtins, ``mod_args``) and once for torch
(tensors, captured arrays), with GQA, odd lengths, f16 and bf16. Outputs poisoned with NaN;
2e-2 absolute error on the outputs, 1e-3 on the logsumexp (both natural-log)."""

import math

import ml_dtypes
import numpy as np
import pytest

import kaio.tile as kt
from kaio.ops_library import attention
from kaio.prelude import f32

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

# flex_attention eager on the CPU warns that it is not compiled (it is the reference here)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

SQ, SK, H, HKV, D = 37, 83, 4, 2, 32
PREFIX = 11


def causal(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx + (SK - SQ)


def window(b, h, q_idx, kv_idx):
    return (kv_idx >= q_idx + (SK - SQ) - 13) & (kv_idx <= q_idx + (SK - SQ) + 5)


def prefix_lm(b, h, q_idx, kv_idx):  # the prefix sees itself whole, the rest causally
    return (kv_idx < PREFIX) | (kv_idx <= q_idx + (SK - SQ))


def document(b, h, q_idx, kv_idx, q_docs, kv_docs):
    return q_docs[q_idx] == kv_docs[kv_idx]


def softcap(score, b, h, q_idx, kv_idx):
    return 3.0 * kt.tanh(score / 3.0)


def alibi(score, b, h, q_idx, kv_idx, slopes):
    return score + slopes[h] * f32(kv_idx - q_idx)


def head_bias(score, b, h, q_idx, kv_idx, bias):
    return score + bias[h * SK + kv_idx]


def gated_softcap(score, b, h, q_idx, kv_idx, bias):  # a branch and two captured loads
    s = score + bias[h * SK + kv_idx]
    if q_idx < PREFIX:
        s = 2.0 * kt.tanh(s / 2.0)
    return s


def torch_mods(rng):
    """Each case: (kaio's keyword arguments, the numpy mod_args, torch's score_mod, torch's mask_mod)."""
    q_docs = np.repeat(np.arange(3), [10, 20, SQ - 30]).astype(np.int32)
    kv_docs = np.repeat(np.arange(3), [30, 30, SK - 60]).astype(np.int32)
    slopes = (0.5 ** np.arange(1, H + 1)).astype(np.float32)
    bias = rng.standard_normal(H * SK).astype(np.float32)
    tq, tk = torch.tensor(q_docs), torch.tensor(kv_docs)
    ts, tb = torch.tensor(slopes, dtype=torch.float64), torch.tensor(bias, dtype=torch.float64)
    return {
        "causal": ({"mask_mod": causal}, (), None, causal),
        "causal builtin": ({"causal": True}, (), None, causal),
        "window": ({"mask_mod": window}, (), None, window),
        "window builtin": ({"window": (13, 5)}, (), None, window),
        "prefix-LM": ({"mask_mod": prefix_lm}, (), None, prefix_lm),
        "document": ({"mask_mod": document}, (q_docs, kv_docs), None, lambda b, h, i, j: tq[i] == tk[j]),
        "softcap": ({"score_mod": softcap}, (), lambda s, b, h, i, j: 3.0 * torch.tanh(s / 3.0), None),
        "softcap builtin": ({"softcap": 3.0}, (), lambda s, b, h, i, j: 3.0 * torch.tanh(s / 3.0), None),
        "alibi": ({"score_mod": alibi}, (slopes,), lambda s, b, h, i, j: s + ts[h] * (j - i), None),
        "alibi builtin": ({"alibi_slopes": slopes}, (), lambda s, b, h, i, j: s + ts[h] * (j - i), None),
        "captured bias": ({"score_mod": head_bias}, (bias,), lambda s, b, h, i, j: s + tb[h * SK + j], None),
        "bias, branch and causal": (
            {"score_mod": gated_softcap, "causal": True}, (bias,),
            lambda s, b, h, i, j: torch.where(i < PREFIX, 2.0 * torch.tanh((s + tb[h * SK + j]) / 2.0), s + tb[h * SK + j]),
            causal,
        ),  # fmt: skip
    }


CASES = sorted(torch_mods(np.random.default_rng(0)))


@pytest.mark.parametrize("t", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", CASES)
def test_attention_matches_flex_attention(dev, rng, case, t):
    kw, mod_args, score_mod, mask_mod = torch_mods(rng)[case]
    q = rng.standard_normal((2, H, SQ, D)).astype(t)
    k, v = (rng.standard_normal((2, HKV, SK, D)).astype(t) for _ in range(2))
    on_dev = {n: (dev.alloc_from(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    out = dev.alloc_from(np.full(q.shape, np.nan, q.dtype))
    got, lse = attention(*(dev.alloc_from(x) for x in (q, k, v)), out=out, return_lse=True,
                         mod_args=tuple(dev.alloc_from(a) for a in mod_args), **on_dev)  # fmt: skip

    tq, tk, tv = (torch.tensor(x.astype(np.float64)) for x in (q, k, v))
    block_mask = flex.create_block_mask(mask_mod, None, None, SQ, SK, device="cpu") if mask_mod is not None else None
    want, want_lse = flex.flex_attention(tq, tk, tv, score_mod=score_mod, block_mask=block_mask, scale=1 / math.sqrt(D),
                                         enable_gqa=True, return_lse=True)  # fmt: skip
    got = got.to_host().astype(np.float64)
    assert not np.isnan(got).any()
    assert float(np.abs(got - want.numpy()).max()) <= 2e-2
    assert float(np.abs(lse.to_host() - want_lse.numpy()).max()) <= 1e-3
