"""grouped_matmul_backward and fused_moe_backward on the simulator: against float64 numpy (the
grouped products) and float64 torch autograd of the MoE MLP, with empty experts, one token and
every token on one expert."""

import math

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import fused_moe_backward, grouped_matmul_backward

torch = pytest.importorskip("torch")

SIM = kaio.Device("sim")
IN = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"f16": 5e-3, "bf16": 3e-2}  # relative Frobenius error: one rounding of 16-bit results


def close(got, want, dtype):
    got = np.asarray(got).astype(np.float64)
    assert got.shape == want.shape
    assert np.isfinite(got).all(), "unwritten (NaN) elements"
    assert np.linalg.norm(got - want) <= TOL[dtype] * max(np.linalg.norm(want), 1e-30)


def offsets_of(sizes):
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


GROUPS = {
    "ragged": [20, 0, 45, 5],  # an empty expert, groups that end inside a 32-row step
    "one token": [0, 1, 0],
    "all on one": [0, 0, 70],
}


@pytest.mark.parametrize("dtype", list(IN))
@pytest.mark.parametrize("w_nk", [False, True], ids=["w(E,K,N)", "w(E,N,K)"])
@pytest.mark.parametrize("groups", list(GROUPS))
def test_grouped_gradients_match_float64(rng, poison, dtype, w_nk, groups):
    off = offsets_of(GROUPS[groups])
    t, k, n, e = int(off[-1]), 48, 40, len(off) - 1
    x = rng.standard_normal((t, k)).astype(IN[dtype])
    w = rng.standard_normal((e, k, n)).astype(IN[dtype])
    dy = rng.standard_normal((t, n)).astype(np.float32)
    stored = np.ascontiguousarray(w.transpose(0, 2, 1)) if w_nk else w
    dx, dw = grouped_matmul_backward(dy, x, stored, off, w_nk=w_nk, device=SIM)
    dy16 = dy.astype(IN[dtype]).astype(np.float64)  # the products take dy in x's type
    want_dx, want_dw = np.zeros((t, k)), np.zeros((e, k, n))
    for g in range(e):
        rows = slice(off[g], off[g + 1])
        want_dx[rows] = dy16[rows] @ w[g].astype(np.float64).T
        want_dw[g] = x[rows].astype(np.float64).T @ dy16[rows]
    close(dx, want_dx, dtype)
    close(dw, want_dw.transpose(0, 2, 1) if w_nk else want_dw, dtype)
    assert dx.dtype == IN[dtype] and dw.dtype == IN[dtype]


def test_a_groups_end_bounds_its_weight_gradient(rng, poison):
    """Rows of the next expert inside the last 32-row step of a group must not join its sum."""
    off = offsets_of([3, 3])
    x = rng.standard_normal((6, 16)).astype(np.float16)
    dy = rng.standard_normal((6, 16)).astype(np.float16)
    _, dw = grouped_matmul_backward(dy, x, np.zeros((2, 16, 16), np.float16), off, device=SIM)
    for g in range(2):
        rows = slice(3 * g, 3 * g + 3)
        np.testing.assert_allclose(dw[g].astype(np.float64), x[rows].astype(np.float64).T @ dy[rows].astype(np.float64),
                                   rtol=1e-2, atol=1e-2)  # fmt: skip


def torch_moe(x, w_gate_up, w_down, weights, ids, activation):
    f = w_gate_up.shape[1] // 2
    act = torch.nn.functional.silu if activation == "silu" else torch.nn.functional.gelu
    rows = []
    for t in range(x.shape[0]):
        y = torch.zeros(x.shape[1], dtype=x.dtype)
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w_gate_up[e] @ x[t]
            y = y + weights[t, j] * (w_down[e] @ (act(h[:f]) * h[f:]))
        rows.append(y)
    return torch.stack(rows) if rows else None


def moe_inputs(rng, t, d, f, experts, k, dtype, ids=None, weight_type=np.float32):
    x = rng.standard_normal((t, d)).astype(IN[dtype])
    w_gate_up = (rng.standard_normal((experts, 2 * f, d)) / math.sqrt(d)).astype(IN[dtype])
    w_down = (rng.standard_normal((experts, d, f)) / math.sqrt(f)).astype(IN[dtype])
    if ids is None:
        ids = np.stack([rng.permutation(experts)[:k] for _ in range(t)]).astype(np.int32).reshape(t, k)
    weights = rng.random(ids.shape).astype(weight_type)
    return x, w_gate_up, w_down, weights, ids


def check_fused(rng, args, dtype, activation="silu"):
    x, w_gate_up, w_down, weights, ids = args
    dy = rng.standard_normal(x.shape).astype(np.float32)
    got = fused_moe_backward(dy, *args, activation=activation, device=SIM)
    leaves = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (x, w_gate_up, w_down, weights)]
    y = torch_moe(*leaves, ids, activation)
    if x.shape[0]:
        y.backward(torch.tensor(dy, dtype=torch.float64))
    else:  # no token: nothing flows back, every gradient is 0
        for leaf in leaves:
            leaf.grad = torch.zeros_like(leaf)
    for name, g, leaf, like in zip(("dx", "dw_gate_up", "dw_down", "dweights"), got, leaves, (x, w_gate_up, w_down, weights), strict=True):
        assert g.dtype == like.dtype, name
        close(g, leaf.grad.numpy(), dtype)  # dweights too: they come from 16-bit intermediates


@pytest.mark.parametrize("dtype", list(IN))
def test_fused_gradients_match_torch_autograd(rng, poison, dtype):
    check_fused(rng, moe_inputs(rng, 9, 32, 24, 5, 2, dtype), dtype)  # 5 experts, some empty


def test_fused_gelu_and_weights_in_x_type(rng, poison):
    check_fused(rng, moe_inputs(rng, 5, 16, 16, 3, 2, "bf16", weight_type=ml_dtypes.bfloat16), "bf16", "gelu")


@pytest.mark.parametrize("case", ["one token", "all on one expert", "no token", "no feature"])
def test_fused_edge_cases(rng, poison, case):
    if case == "one token":
        args = moe_inputs(rng, 1, 16, 16, 4, 2, "f16")
    elif case == "all on one expert":
        args = moe_inputs(rng, 6, 16, 16, 4, 1, "f16", ids=np.full((6, 1), 2, np.int32))
    elif case == "no token":
        args = moe_inputs(rng, 0, 16, 16, 4, 2, "f16", ids=np.zeros((0, 2), np.int32))
    else:  # D = 0: no product has an element, the weights' gradients are 0
        args = moe_inputs(rng, 3, 0, 16, 4, 2, "f16")
    check_fused(rng, args, "f16")


def test_bad_gradients_are_named(rng):
    x, wgu, wd, w, ids = moe_inputs(rng, 3, 16, 16, 2, 1, "f16")
    with pytest.raises(KaioTypeError, match="grad_out.*shape"):
        fused_moe_backward(np.zeros((3, 8), np.float32), x, wgu, wd, w, ids, device=SIM)
    with pytest.raises(KaioTypeError, match="grad_out.*f32 or f16"):
        fused_moe_backward(np.zeros((3, 16), ml_dtypes.bfloat16), x, wgu, wd, w, ids, device=SIM)
    off = offsets_of([3])
    with pytest.raises(KaioTypeError, match="grad_out.*shape"):
        grouped_matmul_backward(np.zeros((3, 5), np.float32), x, np.zeros((1, 16, 4), np.float16), off, device=SIM)
    with pytest.raises(KaioTypeError, match="`w` must be \\(experts, N, K\\) with K = 16"):
        grouped_matmul_backward(np.zeros((3, 4), np.float32), x, np.zeros((1, 16, 4), np.float16), off, w_nk=True,
                                device=SIM)  # fmt: skip
    with pytest.raises(kaio.KaioValueError, match="expert_offsets"):
        grouped_matmul_backward(np.zeros((3, 4), np.float32), x, np.zeros((1, 16, 4), np.float16),
                                np.array([0, 2], np.int32), device=SIM)  # fmt: skip


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize(("experts", "k", "renormalize"), [(5, 2, True), (5, 2, False), (64, 8, True), (3, 3, False)])
def test_router_gradient_matches_torch_autograd(rng, poison, dtype, experts, k, renormalize):
    from kaio.ops_library import moe_topk_softmax, moe_topk_softmax_backward

    types = {**IN, "f32": np.float32}
    logits = rng.standard_normal((19, experts)).astype(types[dtype])
    _, ids = moe_topk_softmax(logits, k, renormalize=renormalize, device=SIM)
    g = rng.standard_normal(ids.shape).astype(np.float32)
    got = moe_topk_softmax_backward(g, logits, ids, renormalize=renormalize, device=SIM)
    assert got.dtype == logits.dtype and got.shape == logits.shape
    leaf = torch.tensor(logits.astype(np.float64), requires_grad=True)
    w = torch.softmax(leaf, -1).gather(1, torch.from_numpy(ids.astype(np.int64)))
    if renormalize:
        w = w / w.sum(1, keepdim=True)
    (w * torch.from_numpy(g.astype(np.float64))).sum().backward()
    close(got, leaf.grad.numpy(), "f16" if dtype == "f32" else dtype)


def test_router_gradient_refuses_bad_ids(rng):
    from kaio.ops_library import moe_topk_softmax_backward

    logits = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(kaio.KaioValueError, match="ids"):
        moe_topk_softmax_backward(np.zeros((3, 1), np.float32), logits, np.full((3, 1), 4, np.int32), device=SIM)
    with pytest.raises(KaioTypeError, match="grad_weights"):
        moe_topk_softmax_backward(np.zeros((3, 2), np.float16), logits, np.zeros((3, 2), np.int32), device=SIM)
