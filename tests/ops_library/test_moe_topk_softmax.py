"""kaio.ops_library.moe_topk_softmax on the simulator against a float64 numpy router."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError, KaioValueError
from kaio.ops_library import moe_topk_softmax

from .conftest import DTYPES, f64

SIM = kaio.Device("sim")


def reference(logits, k, renormalize=True):
    """float64 softmax, the k largest by a stable descending sort (ties: lower id first)."""
    x = f64(logits)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ids = np.argsort(-p, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, 1)
    if renormalize:
        w = w / w.sum(1, keepdims=True)
    return w, ids


def check(logits, k, renormalize=True, tol=1e-6):
    w, ids = moe_topk_softmax(logits, k, renormalize=renormalize, device=SIM)
    want_w, want_ids = reference(logits, k, renormalize)
    assert w.dtype == np.float32 and ids.dtype == np.int32
    assert w.shape == ids.shape == (logits.shape[0], k)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(w, want_w, rtol=tol, atol=tol)


def distinct_logits(rng, t, e, dtype):
    """Logits whose probabilities differ in the storage type (a random permutation of a spread
    grid): no ties, so the order is the reference's whatever the rounding."""
    base = np.linspace(-4, 4, e)
    return np.stack([rng.permutation(base) for _ in range(t)]).astype(DTYPES[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("t, e, k", [(5, 8, 2), (3, 60, 6), (2, 7, 7)])
def test_matches_float64(rng, poison, dtype, t, e, k):
    check(distinct_logits(rng, t, e, dtype), k)


@pytest.mark.parametrize("k", [1, 5])
def test_without_renormalizing_the_weights_are_the_probabilities(rng, poison, k):
    check(rng.standard_normal((4, 5)).astype(np.float32), k, renormalize=False)


def test_k_equal_to_e_sorts_every_expert(rng, poison):
    x = rng.standard_normal((3, 13)).astype(np.float32)
    w, ids = moe_topk_softmax(x, 13, device=SIM)
    assert (np.sort(ids, 1) == np.arange(13)).all()
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-6)
    check(x, 13)


def test_one_token_and_many_tokens_per_program(rng, poison):
    check(rng.standard_normal((1, 6)).astype(np.float32), 2)
    check(rng.standard_normal((37, 4)).astype(np.float32), 3)  # 16 tokens a program, a partial last


def test_no_tokens(poison):
    w, ids = moe_topk_softmax(np.zeros((0, 5), np.float16), 2, device=SIM)
    assert w.shape == ids.shape == (0, 2) and w.dtype == np.float32 and ids.dtype == np.int32


def test_ties_go_to_the_lower_expert_id(poison):
    x = np.array([[1, 3, 3, 0, 3, 1], [0, 0, 0, 0, 0, 0]], np.float32)
    w, ids = moe_topk_softmax(x, 4, device=SIM)
    np.testing.assert_array_equal(ids, [[1, 2, 4, 0], [0, 1, 2, 3]])
    np.testing.assert_allclose(w[1], 0.25)


def test_ties_in_the_order_of_torchs_stable_descending_sort(rng, poison):
    """Integer logits: equal ones give bit-equal probabilities in any implementation, unequal
    ones differ by a factor e or more, so the order is torch's exactly."""
    torch = pytest.importorskip("torch")
    x = rng.integers(0, 3, (6, 19)).astype(np.float32)
    w, ids = moe_topk_softmax(x, 7, renormalize=False, device=SIM)
    p = torch.softmax(torch.from_numpy(x), -1)
    want = torch.sort(p, dim=-1, descending=True, stable=True)
    np.testing.assert_array_equal(ids, want.indices[:, :7].numpy())
    np.testing.assert_allclose(w, want.values[:, :7].numpy(), rtol=1e-6)
    np.testing.assert_allclose(w, torch.topk(p, 7).values.numpy(), rtol=1e-6)  # its ids may differ


def test_a_router_of_256_experts(rng, poison):
    check(distinct_logits(rng, 2, 256, "bf16"), 8)


def test_torch_tensors_in_torch_tensors_out(rng, poison):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))
    w, ids = moe_topk_softmax(x, 2)
    assert isinstance(w, torch.Tensor) and w.dtype == torch.float32 and ids.dtype == torch.int32
    want_w, want_ids = reference(x.numpy(), 2)
    np.testing.assert_array_equal(ids.numpy(), want_ids)
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-6)
    w, ids = moe_topk_softmax(x.requires_grad_(True), 2)  # autograd records the weights' gradient
    assert w.grad_fn is not None and not ids.requires_grad


@pytest.mark.parametrize("bad, err, match", [
    (dict(logits=np.zeros((2, 3), np.int32)), KaioTypeError, "logits"),
    (dict(logits=np.zeros((2, 3), np.float64)), KaioTypeError, "logits"),
    (dict(logits=np.zeros((6,), np.float32)), KaioTypeError, "logits"),
    (dict(logits=np.zeros((2, 3, 4), np.float32)), KaioTypeError, "logits"),
    (dict(logits=np.zeros((2, 0), np.float32)), KaioValueError, "logits"),
    (dict(k=0), KaioValueError, "`k`"),
    (dict(k=4), KaioValueError, "`k`"),
    (dict(k=2.0), KaioTypeError, "`k`"),
    (dict(renormalize=1), KaioTypeError, "renormalize"),
])  # fmt: skip
def test_bad_input_names_the_argument(bad, err, match):
    args = {"logits": np.zeros((2, 3), np.float32), "k": 2, "renormalize": True, **bad}
    with pytest.raises(err, match=match):
        moe_topk_softmax(args.pop("logits"), args.pop("k"), device=SIM, **args)
