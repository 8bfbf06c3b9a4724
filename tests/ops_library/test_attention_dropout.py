"""attention(..., dropout_p=, seed=) and attention_backward with the same p and seed on the
simulator: forward and gradients against float64 torch autograd of softmax(q k^T s) with the
mask of kaio.random at the documented offsets ((b * H + h) * Sq + q) * Sk + k; causal or not,
GQA, odd lengths, flash-decoding, the sm_90a (wgmma) path; the kept fraction within 3 sigma of
1 - p; p = 0 is no dropout, bit for bit; torch autograd replays the forward's mask; bad
arguments named. Fresh random inputs, poisoned outputs."""

import math

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.random as kr
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import attention, attention_backward

torch = pytest.importorskip("torch")

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
OUT_BOUND, GRAD_BOUND = 2e-2, {"f16": 1e-2, "bf16": 3e-2}


def keep_scale(b: int, h: int, sq: int, sk: int, p: float, seed: int) -> np.ndarray:
    """Z: 1 / (1 - p) where kept, 0 where dropped, (b, h, sq, sk), from the documented offsets."""
    rows = np.arange(b * h * sq, dtype=np.int64).reshape(b, h, sq, 1)
    offs = rows * sk + np.arange(sk, dtype=np.int64)
    return np.where(kr.rand(seed, offs) > np.float32(p), 1.0 / (1.0 - p), 0.0)


def reference(q, k, v, do, z, causal):
    """(o, lse, dq, dk, dv) in float64 by torch autograd of (softmax(s) * z) v."""
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    qt, kt, vt = (torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v))
    s = qt @ kt.repeat_interleave(h // hkv, 1).transpose(-1, -2) / math.sqrt(d)
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    visible = (j <= i + sk - sq) if causal else torch.ones(sq, sk, dtype=torch.bool)
    s = s.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(s, -1)  # -inf for a row that sees no key: its output is 0
    p = torch.exp(s - lse[..., None].masked_fill(lse[..., None].isinf(), 0.0)).masked_fill(~visible, 0.0)
    o = (p * torch.tensor(z)) @ vt.repeat_interleave(h // hkv, 1)
    (o * torch.tensor(np.asarray(do, np.float64))).sum().backward()
    return o.detach().numpy(), lse.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def run(dev, rng, b, h, hkv, sq, sk, d, dtype, causal, p, deterministic=False):
    t = TYPES[dtype]
    q, do = (rng.standard_normal((b, h, sq, d)).astype(t) for _ in range(2))
    k, v = (rng.standard_normal((b, hkv, sk, d)).astype(t) for _ in range(2))
    seed = int(rng.integers(2**64, dtype=np.uint64))
    out = dev.alloc_from(np.full(q.shape, np.nan, t))
    dq, dk, dv = (dev.alloc_from(x) for x in (q, k, v))
    o, lse = attention(dq, dk, dv, causal=causal, out=out, return_lse=True, dropout_p=p, seed=seed)
    want_o, want_lse, *want_grads = reference(q, k, v, do, keep_scale(b, h, sq, sk, p, seed), causal)
    o = o.to_host()
    assert np.abs(o.astype(np.float64) - want_o).max() <= OUT_BOUND
    finite = ~np.isneginf(want_lse)
    assert np.array_equal(np.isneginf(lse.to_host()), ~finite)
    assert np.abs(lse.to_host()[finite] - want_lse[finite]).max() <= 1e-3, "the logsumexp of the undropped scores"
    grads = attention_backward(q, k, v, o, lse.to_host(), do, causal=causal, dropout_p=p, seed=seed,
                               deterministic=deterministic)  # fmt: skip
    for name, g, w in zip(("dq", "dk", "dv"), grads, want_grads):
        g = g.astype(np.float64)
        assert np.isfinite(g).all(), name
        assert np.abs(g - w).max() / max(np.abs(w).max(), 1.0) <= GRAD_BOUND[dtype], name


@pytest.mark.usefixtures("poison")
@pytest.mark.parametrize("dtype, causal, sq, sk", [("f16", False, 40, 70), ("bf16", True, 70, 40), ("f16", True, 33, 33)])
def test_forward_and_backward_with_dropout(dev, rng, dtype, causal, sq, sk):
    run(dev, rng, 2, 4, 2, sq, sk, 64, dtype, causal, 0.3)  # GQA: two query heads per key head


@pytest.mark.usefixtures("poison")
def test_deterministic_dq_and_a_large_p(dev, rng):
    run(dev, rng, 1, 2, 1, 24, 50, 32, "f16", False, 0.8, deterministic=True)


@pytest.mark.usefixtures("poison")
def test_flash_decoding_drops_the_same_keys(rng):
    """One query over many keys: split into key chunks and combined; the chunks' offsets are the
    keys' own."""
    run(kaio.Device("sim"), rng, 1, 2, 2, 1, 1000, 64, "bf16", False, 0.25)


@pytest.mark.heavy_seeds
@pytest.mark.schedule_seeds
@pytest.mark.usefixtures("poison")
def test_on_wgmma(rng):
    run(kaio.Device("sim", arch="sm_90a"), rng, 1, 2, 1, 64, 96, 64, "f16", True, 0.2)


def test_the_kept_fraction_is_within_three_sigma(rng):
    """Zero queries and keys give every probability 1/Sk; with V the identity, O[q, j] is
    Z[q, j] / Sk: positive where kept."""
    b, h, sq, sk, p = 2, 2, 64, 64, 0.35
    q = np.zeros((b, h, sq, sk), np.float16)
    v = np.broadcast_to(np.eye(sk, dtype=np.float16), (b, h, sk, sk)).copy()
    o = attention(q, q, v, dropout_p=p, seed=12345)
    kept, n = np.count_nonzero(o > 0), o.size
    assert abs(kept - n * (1 - p)) <= 3 * math.sqrt(n * p * (1 - p)), (kept, n * (1 - p))
    np.testing.assert_allclose(o[o > 0], 1 / sk / (1 - p), rtol=2e-3)


def test_p_zero_is_no_dropout_bit_for_bit(dev, rng):
    q, k, v = (rng.standard_normal((1, 2, 30, 64)).astype(np.float16) for _ in range(3))
    assert np.array_equal(attention(q, k, v, dropout_p=0.0, seed=3), attention(q, k, v))


def test_torch_autograd_replays_the_forwards_mask(rng):
    shape = (1, 2, 20, 32)
    q, k, v = (torch.from_numpy(rng.standard_normal(shape).astype(np.float16)).requires_grad_() for _ in range(3))
    do = torch.from_numpy(rng.standard_normal(shape).astype(np.float16))
    torch.manual_seed(7)  # seed=None: one seed drawn from torch's default generator
    o = attention(q, k, v, dropout_p=0.4)
    o.backward(do)
    torch.manual_seed(7)
    seed = int(torch.randint(0, 2**63 - 1, ()).item())
    want_o, _, *want = reference(*(x.detach().numpy() for x in (q, k, v)), do.numpy(), keep_scale(1, 2, 20, 20, 0.4, seed), False)
    assert np.abs(o.detach().double().numpy() - want_o).max() <= OUT_BOUND
    for g, w in zip((q.grad, k.grad, v.grad), want):
        assert np.abs(g.double().numpy() - w).max() / max(np.abs(w).max(), 1.0) <= GRAD_BOUND["f16"]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda q: attention(q, q, q, dropout_p=1.0, seed=1), KaioValueError, r"`dropout_p` must be a number in \[0, 1\)"),
        (lambda q: attention(q, q, q, dropout_p=0.1), KaioValueError, "`dropout_p` 0.1 needs a `seed`"),
        (lambda q: attention(q, q, q, dropout_p=0.1, seed="7"), KaioTypeError, "`seed` must be an integer"),
        (lambda q: attention_backward(q, q, q, q, np.zeros((1, 1, 8), np.float32), q, dropout_p=0.1),
         KaioValueError, "needs the forward's integer `seed`"),
    ],
)
def test_bad_dropout_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call(np.zeros((1, 1, 8, 32), np.float16))
