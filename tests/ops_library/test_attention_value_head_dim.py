"""attention with a value head dim of its own (DeepSeek's q/k 192, v 128): v (B, Hkv, Sk, Dv),
the output (B, H, Sq, Dv). Forward and backward, dense and packed (varlen), flash-decoding's
split keys, GQA, the wgmma path of sm_90a, torch autograd and opcheck, against torch's own
scaled_dot_product_attention (which takes Dv != D) in float64. Fresh random inputs, outputs
poisoned before launch; then the shape rules, refused before any launch."""

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.errors import KaioTypeError
from kaio.ops_library import attention, attention_backward, attention_varlen, attention_varlen_backward

torch = pytest.importorskip("torch")

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
BOUND = {"f16": 1e-2, "bf16": 3e-2}  # max error relative to the largest element (at least 1)


def sdpa(q, k, v, do, causal):
    """(o, dq, dk, dv) in float64 by torch autograd of its scaled_dot_product_attention: GQA by
    repetition, causal aligned to the bottom-right (FlashAttention's, kaio's)."""
    qt, kt, vt = (torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v))
    sq, sk, group = q.shape[-2], k.shape[-2], q.shape[-3] // k.shape[-3]
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    mask = (j <= i + sk - sq) if causal else torch.ones(sq, sk, dtype=torch.bool)
    o = torch.nn.functional.scaled_dot_product_attention(
        qt, kt.repeat_interleave(group, -3), vt.repeat_interleave(group, -3), attn_mask=mask
    )
    seen = mask.any(-1)[:, None]  # a query with no key: 0 (kaio's), not sdpa's NaN
    o = torch.where(seen, o, 0.0)
    o.backward(torch.tensor(np.asarray(do, np.float64)))
    return o.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def close(name, got, want, dtype):
    got = np.asarray(got).astype(np.float64)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1.0)
    assert err <= BOUND[dtype], (name, err)


CASES = [  # d, dv, dtype, causal, h, hkv, sq, sk, deterministic
    pytest.param(192, 128, "bf16", True, 2, 1, 33, 33, False, id="deepseek-192-128-causal-gqa"),
    pytest.param(32, 64, "f16", False, 2, 2, 24, 70, True, id="dv-wider-deterministic"),
    pytest.param(64, 24, "f16", True, 4, 2, 70, 24, False, id="dv-narrower-not-a-power-of-two"),
]


@pytest.mark.usefixtures("poison")
@pytest.mark.parametrize("d, dv, dtype, causal, h, hkv, sq, sk, deterministic", CASES)
def test_forward_and_backward(dev, rng, d, dv, dtype, causal, h, hkv, sq, sk, deterministic):
    t = TYPES[dtype]
    q = rng.standard_normal((1, h, sq, d)).astype(t)
    k = rng.standard_normal((1, hkv, sk, d)).astype(t)
    v = rng.standard_normal((1, hkv, sk, dv)).astype(t)
    do = rng.standard_normal((1, h, sq, dv)).astype(t)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, device=dev)
    want_o, *want_grads = sdpa(q, k, v, do, causal)
    assert o.dtype == q.dtype
    close("o", o, want_o, dtype)
    grads = attention_backward(q, k, v, o, lse, do, causal=causal, deterministic=deterministic, device=dev)
    for name, g, w, x in zip(("dq", "dk", "dv"), grads, want_grads, (q, k, v)):
        assert g.dtype == x.dtype
        close(name, g, w, dtype)


@pytest.mark.usefixtures("poison")
def test_flash_decoding_splits_and_combines_the_value_head_dim(dev, rng):
    """One query over 600 keys: the key chunks' partial outputs (Dv wide) and their combine."""
    q = rng.standard_normal((2, 2, 1, 64)).astype(np.float16)
    k = rng.standard_normal((2, 2, 600, 64)).astype(np.float16)
    v = rng.standard_normal((2, 2, 600, 32)).astype(np.float16)
    close("o", attention(q, k, v, device=dev), sdpa(q, k, v, np.zeros((2, 2, 1, 32)), False)[0], "f16")


@pytest.mark.usefixtures("poison")
def test_packed_sequences_forward_and_backward(dev, rng):
    """attention_varlen: each sequence (one with no query, one with no key) against sdpa alone."""
    d, dv, h, hkv = 48, 16, 2, 1
    q_lens, k_lens = [5, 0, 19, 3], [7, 4, 19, 0]
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (q_lens, k_lens))
    q = rng.standard_normal((int(cu_q[-1]), h, d)).astype(np.float16)
    k = rng.standard_normal((int(cu_k[-1]), hkv, d)).astype(np.float16)
    v = rng.standard_normal((int(cu_k[-1]), hkv, dv)).astype(np.float16)
    do = rng.standard_normal((int(cu_q[-1]), h, dv)).astype(np.float16)
    longest = (max(q_lens), max(k_lens))
    o, lse = attention_varlen(q, k, v, cu_q, cu_k, *longest, causal=True, return_lse=True, device=dev)
    dq, dk, dv_ = attention_varlen_backward(q, k, v, o, lse, do, cu_q, cu_k, *longest, causal=True, device=dev)
    want = [np.zeros(x.shape) for x in (o, q, k, v)]
    for b in range(len(q_lens)):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if q_lens[b] and k_lens[b]:
            seq = [x.transpose(1, 0, 2) for x in (q[rows], k[keys], v[keys], do[rows])]
            wo, wdq, wdk, wdv = (x.transpose(1, 0, 2) for x in sdpa(*seq, True))
            want[0][rows], want[1][rows], want[2][keys], want[3][keys] = wo, wdq, wdk, wdv
    for name, got, w in zip(("o", "dq", "dk", "dv"), (o, dq, dk, dv_), want):
        close(name, got, w, "f16")


@pytest.mark.usefixtures("poison")
def test_the_wgmma_kernel_on_sm90a(rng):
    """sm_90a's tiles (128 x 128, wgmma): p @ v a (128 x 128) x (128 x Dv) product of its own width."""
    dev = kaio.Device("sim", arch="sm_90a")
    q = rng.standard_normal((1, 1, 130, 64)).astype(np.float16)
    k = rng.standard_normal((1, 1, 130, 64)).astype(np.float16)
    v = rng.standard_normal((1, 1, 130, 32)).astype(np.float16)
    close("o", attention(q, k, v, causal=True, device=dev), sdpa(q, k, v, np.zeros((1, 1, 130, 32)), True)[0], "f16")


def test_torch_autograd_and_opcheck():
    torch.manual_seed(3)
    q = torch.randn(1, 2, 20, 32, dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, 1, 24, 32, dtype=torch.float16, requires_grad=True)
    v = torch.randn(1, 1, 24, 16, dtype=torch.float16, requires_grad=True)
    out = attention(q, k, v, causal=True)
    assert out.shape == (1, 2, 20, 16) and out.requires_grad
    grad = torch.randn_like(out)
    out.backward(grad)
    want_o, *want = sdpa(q.detach(), k.detach(), v.detach(), grad, True)
    close("o", out.detach(), want_o, "f16")
    for name, x, w in zip(("dq", "dk", "dv"), (q, k, v), want):
        close(name, x.grad, w, "f16")
    args = (q.detach(), k.detach(), v.detach(), True, None, None, None)
    torch.library.opcheck(torch.ops.kaio.attention.default, args)
    fake_out, fake_lse = torch.ops.kaio.attention.default(*(x.to("meta") for x in args[:3]), *args[3:])
    assert fake_out.shape == (1, 2, 20, 16) and fake_lse.shape == (1, 2, 20)


SHAPES = {"q": (1, 2, 8, 32), "k": (1, 2, 8, 32), "v": (1, 2, 8, 16)}
BAD = [
    ({"v": (1, 2, 9, 16)}, r"`v` must have k's shape \(1, 2, 8, 32\) but for its head dim"),
    ({"v": (1, 2, 8, 44)}, "v's head dim must be a multiple of 8"),
    ({"v": (1, 2, 8, 264)}, "v's head dim must be a multiple of 8 from 8 to 256"),
    ({"out": (1, 2, 8, 32)}, r"`out` must be f16 of shape \(1, 2, 8, 16\)"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_shapes_are_named_before_launch(dev, change, message):
    shapes = SHAPES | {n: s for n, s in change.items() if n in SHAPES}
    arrays = {n: dev.alloc_from(np.zeros(s, np.float16)) for n, s in shapes.items()}
    kw = {}
    if "out" in change:
        kw["out"] = dev.alloc_from(np.full(change["out"], 7.0, np.float16))
    with pytest.raises(KaioTypeError, match=message):
        attention(arrays["q"], arrays["k"], arrays["v"], **kw)
    if "out" in kw:
        assert (kw["out"].to_host() == 7.0).all(), "nothing written"


def test_the_backward_refuses_an_output_of_q_head_dim(dev):
    q, k = np.zeros((1, 2, 8, 32), np.float16), np.zeros((1, 2, 8, 32), np.float16)
    v = np.zeros((1, 2, 8, 16), np.float16)
    lse = np.zeros((1, 2, 8), np.float32)
    with pytest.raises(KaioTypeError, match=r"`grad_out` must be f16 of shape \(1, 2, 8, 16\) \(the forward's output\)"):
        attention_backward(q, k, v, np.zeros((1, 2, 8, 16), np.float16), lse, q, device=dev)
    packed = [x[0].transpose(1, 0, 2).copy() for x in (q, k, v)]
    cu = np.array([0, 8], np.int32)
    with pytest.raises(KaioTypeError, match=r"`out` must be f16 of shape \(8, 2, 16\)"):
        attention_varlen_backward(*packed, packed[0], lse[0], packed[2], cu, cu, 8, 8, device=dev)
