"""attention_varlen(..., dropout_p=, seed=) and attention_varlen_backward with the same p and
seed on the simulator: each packed sequence against float64 torch autograd of its own
(softmax(q k^T s) * Z) v, Z from kaio.random at the documented offsets
((h * total_q + row) * total_k + k), row the packed query row and k the key's index in its
sequence; causal or not, GQA, a sequence of one query; torch autograd replays the mask."""

import numpy as np
import pytest

import kaio.random as kr
from kaio.errors import KaioValueError
from kaio.ops_library import attention_varlen, attention_varlen_backward

from .test_attention_dropout import GRAD_BOUND, OUT_BOUND, TYPES, reference

torch = pytest.importorskip("torch")


def keep_scale(h: int, rows: np.ndarray, sk: int, total_q: int, total_k: int, p: float, seed: int) -> np.ndarray:
    """Z of one sequence: (1, h, len(rows), sk) for its packed query rows and its sk keys."""
    heads = np.arange(h, dtype=np.int64).reshape(1, h, 1, 1)
    offs = (heads * total_q + rows.reshape(1, 1, -1, 1)) * total_k + np.arange(sk, dtype=np.int64)
    return np.where(kr.rand(seed, offs) > np.float32(p), 1.0 / (1.0 - p), 0.0)


def run(rng, dtype, causal, lens_q, lens_k, h=4, hkv=2, d=32, p=0.3, via_torch=False):
    t = TYPES[dtype]
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lens_q, lens_k))
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    q, do = (rng.standard_normal((total_q, h, d)).astype(t) for _ in range(2))
    k, v = (rng.standard_normal((total_k, hkv, d)).astype(t) for _ in range(2))
    seed = int(rng.integers(2**63))
    longest = (max(lens_q), max(lens_k))
    if via_torch:  # autograd records the forward's p and seed and regenerates the mask
        leaves = [torch.from_numpy(x.view(np.uint16)).view(torch.float16 if dtype == "f16" else torch.bfloat16)
                  .requires_grad_(True) for x in (q, k, v)]  # fmt: skip
        o = attention_varlen(*leaves, torch.from_numpy(cu_q), torch.from_numpy(cu_k), *longest, causal=causal,
                             dropout_p=p, seed=seed)  # fmt: skip
        o.backward(torch.from_numpy(do.view(np.uint16)).view(o.dtype))
        o = o.detach().float().numpy()
        grads = [x.grad.float().numpy() for x in leaves]
    else:
        o, lse = attention_varlen(q, k, v, cu_q, cu_k, *longest, causal=causal, return_lse=True, dropout_p=p, seed=seed)
        grads = attention_varlen_backward(q, k, v, o, lse, do, cu_q, cu_k, *longest, causal=causal, dropout_p=p,
                                          seed=seed)  # fmt: skip
    for b in range(len(lens_q)):
        rows, keys = np.arange(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        seq = [x[None].transpose(0, 2, 1, 3) for x in (q[rows], k[keys], v[keys], do[rows])]  # (1, H, S, D)
        z = keep_scale(h, rows, lens_k[b], total_q, total_k, p, seed)
        want_o, _, *want = reference(*seq, z, causal)
        got_o = np.asarray(o)[rows].astype(np.float64).transpose(1, 0, 2)[None]
        assert np.abs(got_o - want_o).max() <= OUT_BOUND, f"sequence {b}"
        for name, g, w, sel in zip(("dq", "dk", "dv"), grads, want, (rows, keys, keys), strict=True):
            g = np.asarray(g)[sel].astype(np.float64).transpose(1, 0, 2)[None]
            assert np.abs(g - w).max() / max(np.abs(w).max(), 1.0) <= GRAD_BOUND[dtype], f"{name} of sequence {b}"


@pytest.mark.usefixtures("poison")
@pytest.mark.parametrize(("dtype", "causal"), [("f16", False), ("bf16", True)])
def test_varlen_forward_and_backward_with_dropout(rng, dtype, causal):
    run(rng, dtype, causal, [1, 20, 9], [5, 33, 9])


def test_torch_autograd_replays_the_mask(rng):
    run(rng, "f16", True, [7, 12], [7, 30], via_torch=True)


def test_the_backward_needs_the_forwards_seed(rng):
    q = np.zeros((2, 1, 16), np.float16)
    cu = np.array([0, 2], np.int32)
    with pytest.raises(KaioValueError, match="needs the forward's integer `seed`"):
        attention_varlen_backward(q, q, q, q, np.zeros((1, 2), np.float32), q, cu, cu, 2, 2, dropout_p=0.1)
    with pytest.raises(KaioValueError, match="dropout_p"):
        attention_varlen(q, q, q, cu, cu, 2, 2, dropout_p=1.5, seed=1)
