"""attention as torch.ops.kaio.attention: gradients through kaio.ops_library.attention with CPU
tensors that require grad (the simulator) match torch's scaled_dot_product_attention autograd;
torch.library.opcheck on the forward and backward ops; torch.compile(fullgraph=True,
dynamic=True) forward and backward; the fake refuses what the real op refuses."""

import pytest

torch = pytest.importorskip("torch")

from kaio.errors import KaioTypeError  # noqa: E402
from kaio.ops_library import attention  # noqa: E402


def make(b=1, h=4, hkv=2, sq=20, sk=24, d=32, dtype=torch.float16, grad=True):
    q = torch.randn(b, h, sq, d, dtype=dtype)
    k = torch.randn(b, hkv, sk, d, dtype=dtype)
    v = torch.randn(b, hkv, sk, d, dtype=dtype)
    return [x.requires_grad_(grad) for x in (q, k, v)]


def sdpa_grads(q, k, v, grad, causal, lens=None):
    """float64 gradients from torch's own attention (bottom-right causal, GQA by repetition)."""
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    sq, sk, g = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    n = torch.tensor(lens if lens is not None else [sk] * q.shape[0])[:, None, None, None]
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    mask = (j < n) & ((j <= i + n - sq) if causal else True)
    out = torch.nn.functional.scaled_dot_product_attention(
        qr, kr.repeat_interleave(g, 1), vr.repeat_interleave(g, 1), attn_mask=mask
    )
    out.backward(grad.double())
    return out, (qr.grad, kr.grad, vr.grad)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_scaled_dot_product_attention(causal):
    torch.manual_seed(1)
    q, k, v = make()
    out = attention(q, k, v, causal=causal)
    assert out.requires_grad
    grad = torch.randn_like(out)
    out.backward(grad)
    want_out, want = sdpa_grads(q, k, v, grad, causal)
    assert (out.double() - want_out).abs().max() <= 1e-2
    for x, w in zip((q, k, v), want):
        assert (x.grad.double() - w).abs().max() <= 1e-2 * max(w.abs().max().item(), 1.0)


def test_gradients_with_kv_lens_and_the_logsumexp():
    torch.manual_seed(2)
    q, k, v = make(b=2, h=2, hkv=1, sq=16, sk=40)
    lens = torch.tensor([40, 9], dtype=torch.int32)
    out, lse = attention(q, k, v, kv_lens=lens, causal=True, return_lse=True)
    assert lse.requires_grad and lse.dtype == torch.float32
    grad = torch.randn_like(out)
    (out * grad).sum().backward()
    _, want = sdpa_grads(q, k, v, grad, True, [40, 9])
    for x, w in zip((q, k, v), want):
        assert (x.grad.double() - w).abs().max() <= 1e-2 * max(w.abs().max().item(), 1.0)


def test_out_with_grad_is_refused_not_dropped():
    q, k, v = make()
    with pytest.raises(KaioTypeError, match="out="):
        attention(q, k, v, out=torch.empty_like(q))


def test_opcheck_forward_and_backward():
    import kaio.torch  # noqa: F401  (registers torch.ops.kaio.*)

    torch.manual_seed(3)
    q, k, v = make(sq=16, sk=16)
    torch.library.opcheck(torch.ops.kaio.attention.default, (q, k, v, True, None, None, None))
    out, lse = torch.ops.kaio.attention(q.detach(), k.detach(), v.detach(), True, None, None, None)
    do = torch.randn_like(out)
    args = (q.detach(), k.detach(), v.detach(), out, lse, do, None, True, None, None, True)
    torch.library.opcheck(torch.ops.kaio.attention_backward.default, args)


def test_the_fake_refuses_what_the_op_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode

    import kaio.torch  # noqa: F401  (registers torch.ops.kaio.*)

    with FakeTensorMode():
        q = torch.empty(1, 2, 8, 32, dtype=torch.float32)
        with pytest.raises(KaioTypeError, match="must all be f16 or all bf16"):
            torch.ops.kaio.attention(q, q, q, False, None, None, None)
        q = torch.empty(1, 2, 32, 8, dtype=torch.float16).transpose(2, 3)
        with pytest.raises(KaioTypeError, match="`q` is not contiguous"):
            torch.ops.kaio.attention(q, q, q, False, None, None, None)


def test_compile_fullgraph_dynamic_forward_and_backward():
    torch.manual_seed(4)

    @torch.compile(fullgraph=True, dynamic=True, backend="aot_eager")  # inductor: no C compiler needed
    def step(q, k, v):
        return (attention(q, k, v, causal=True).float() ** 2).sum()

    for sq in (16, 24):  # a second length runs the dynamic graph
        q, k, v = make(sq=sq, sk=sq)
        step(q, k, v).backward()
        qe, ke, ve = (x.detach().clone().requires_grad_() for x in (q, k, v))
        (attention(qe, ke, ve, causal=True).float() ** 2).sum().backward()
        for a, b in zip((q, k, v), (qe, ke, ve)):
            assert torch.equal(a.grad, b.grad)
