"""Training with kaio ops: a two-layer model (rms_norm -> linear -> silu_and_mul -> linear ->
cross_entropy) trained for 20 steps with kaio's ops and with torch's, from the same weights and
batches: the losses of every step and the final weights agree (f32, CPU tensors on the
simulator). And a transformer-like block compiled fullgraph with dynamic shapes, forward and
backward, against eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402, N812

import kaio.torch  # noqa: E402, F401
from kaio import ops_library as ol  # noqa: E402

TOKENS, HIDDEN, INNER, VOCAB = 12, 32, 24, 40


def kaio_model(x, targets, w_norm, w_up, w_down):
    h = ol.rms_norm(x, w_norm, eps=1e-6)
    a = ol.silu_and_mul(ol.matmul(h, w_up))
    return ol.cross_entropy(ol.matmul(a, w_down), targets).sum() / (targets != -100).sum()


def torch_model(x, targets, w_norm, w_up, w_down):
    h = F.rms_norm(x, (HIDDEN,), w_norm, eps=1e-6)
    u = h @ w_up
    a = F.silu(u[:, :INNER]) * u[:, INNER:]
    return F.cross_entropy(a @ w_down, targets, ignore_index=-100)


def train(model, weights, batches, lr=0.5):
    params = [w.clone().requires_grad_() for w in weights]
    opt = torch.optim.SGD(params, lr=lr)
    losses = []
    for x, t in batches:
        loss = model(x, t, *params)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), [p.detach() for p in params]


# ~13 s on the simulator (20 steps of 5 forward and 8 backward launches): an acceptance check, run in CI
def test_two_layer_model_trains_like_torch(rng):
    def f32(*shape, scale=1.0):
        return torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32))

    weights = [1.0 + f32(HIDDEN, scale=0.1), f32(HIDDEN, 2 * INNER, scale=0.3), f32(INNER, VOCAB, scale=0.3)]
    batches = []
    for _ in range(20):
        t = torch.from_numpy(rng.integers(0, VOCAB, TOKENS)).long()
        t[rng.integers(0, TOKENS)] = -100  # an ignored token
        batches.append((f32(TOKENS, HIDDEN), t))
    kaio_losses, kaio_weights = train(kaio_model, weights, batches)
    torch_losses, torch_weights = train(torch_model, weights, batches)
    assert kaio_losses[-5:].mean() < kaio_losses[:5].mean()  # it learns
    np.testing.assert_allclose(kaio_losses, torch_losses, rtol=1e-4, atol=1e-5)
    for got, want in zip(kaio_weights, torch_weights, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def block(x, w_norm, wq, wk, wv, w_up, w_down, targets):
    """rms_norm -> attention (GQA, causal) -> silu_and_mul -> cross_entropy."""
    s = x.shape[0]
    h = ol.rms_norm(x, w_norm)
    q = ol.matmul(h, wq).half().view(1, s, 4, 32).transpose(1, 2).contiguous()
    k = ol.matmul(h, wk).half().view(1, s, 2, 32).transpose(1, 2).contiguous()
    v = ol.matmul(h, wv).half().view(1, s, 2, 32).transpose(1, 2).contiguous()
    o = ol.attention(q, k, v, causal=True).float().transpose(1, 2).reshape(s, 128)
    a = ol.silu_and_mul(ol.matmul(o + h.repeat(1, 2)[:, :128], w_up))
    return ol.cross_entropy(ol.matmul(a, w_down), targets).mean()


# ~17 s (attention forward and backward on the simulator, two sizes): an acceptance check, run in CI
def test_block_compiles_fullgraph_dynamic_forward_and_backward(rng):
    def f32(*shape, scale=0.2):
        return torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32))

    weights = [1.0 + f32(64), f32(64, 128), f32(64, 64), f32(64, 64), f32(128, 2 * 48), f32(48, 30)]
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend="aot_eager")
    for s in (16, 24):  # a second sequence length: no recompile needed, same results
        x, t = f32(s, 64, scale=1.0), torch.from_numpy(rng.integers(0, 30, s)).long()
        eager_w = [w.clone().requires_grad_() for w in weights]
        comp_w = [w.clone().requires_grad_() for w in weights]
        want, got = block(x, *eager_w, t), compiled(x, *comp_w, t)
        want.backward()
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for g, w in zip(comp_w, eager_w, strict=True):
            torch.testing.assert_close(g.grad, w.grad, rtol=1e-3, atol=1e-4)
