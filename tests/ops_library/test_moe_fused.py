"""kaio.ops_library.fused_moe (routing, grouped matmuls, activation, combine) on the simulator
against a float64 numpy MoE MLP."""

import math

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import KaioTypeError, KaioValueError
from kaio.ops_library import fused_moe, moe_topk_softmax
from kaio.ops_library.moe_fused import gather_kernel

SIM = kaio.Device("sim")
IN = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"f16": 5e-3, "bf16": 3e-2}
erf = np.vectorize(math.erf)


def reference(x, w_gate_up, w_down, weights, ids, activation="silu"):
    f = w_gate_up.shape[1] // 2
    x, wgu, wd = (a.astype(np.float64) for a in (x, w_gate_up, w_down))
    y = np.zeros(x.shape)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = ids[t, j]
            g, u = wgu[e, :f] @ x[t], wgu[e, f:] @ x[t]
            act = g / (1 + np.exp(-g)) if activation == "silu" else 0.5 * g * (1 + erf(g / math.sqrt(2)))
            y[t] += float(weights[t, j]) * (wd[e] @ (act * u))
    return y


def inputs(rng, t, d, f, experts, k, dtype="f16", ids=None):
    x = rng.standard_normal((t, d)).astype(IN[dtype])
    w_gate_up = (rng.standard_normal((experts, 2 * f, d)) / math.sqrt(d)).astype(IN[dtype])
    w_down = (rng.standard_normal((experts, d, f)) / math.sqrt(f)).astype(IN[dtype])
    if ids is None:
        ids = np.stack([rng.permutation(experts)[:k] for _ in range(t)]).astype(np.int32)
    weights = rng.random(ids.shape).astype(np.float32)
    return x, w_gate_up, w_down, weights, ids


def check(args, dtype="f16", activation="silu"):
    y = fused_moe(*args, activation=activation, device=SIM)
    want = reference(*args, activation=activation)
    assert y.dtype == IN[dtype] and y.shape == want.shape
    got = y.astype(np.float64)
    assert np.isfinite(got).all(), "unwritten (NaN) rows"
    assert np.linalg.norm(got - want) <= TOL[dtype] * np.linalg.norm(want)


@pytest.mark.parametrize("dtype", list(IN))
def test_matches_float64(rng, poison, dtype):
    check(inputs(rng, 7, 24, 40, 5, 2, dtype), dtype)  # 5 experts (not a power of two), some empty


def test_gelu(rng, poison):
    check(inputs(rng, 4, 16, 16, 3, 2), activation="gelu")


def test_one_token_k_1_and_k_e(rng, poison):
    check(inputs(rng, 1, 16, 16, 4, 1))
    check(inputs(rng, 3, 16, 16, 3, 3))  # every token on every expert


def test_all_tokens_on_one_expert(rng, poison):
    check(inputs(rng, 20, 16, 24, 4, 1, ids=np.full((20, 1), 3, np.int32)))


def test_no_tokens(rng, poison):
    x, w_gate_up, w_down, weights, ids = inputs(rng, 0, 16, 16, 3, 2, ids=np.zeros((0, 2), np.int32))
    y = fused_moe(x, w_gate_up, w_down, weights, ids, device=SIM)
    assert y.shape == (0, 16) and y.dtype == np.float16


def test_from_the_router(rng, poison):
    x, w_gate_up, w_down, _, _ = inputs(rng, 6, 16, 16, 6, 2)
    weights, ids = moe_topk_softmax(rng.standard_normal((6, 6)).astype(np.float32), 2, device=SIM)
    check((x, w_gate_up, w_down, weights, ids))


def test_torch_tensors_in_torch_tensors_out(rng, poison):
    torch = pytest.importorskip("torch")
    args = inputs(rng, 5, 16, 16, 3, 2)
    y = fused_moe(*(torch.from_numpy(a) for a in args))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float16
    want = reference(*args)
    assert np.linalg.norm(y.double().numpy() - want) <= TOL["f16"] * np.linalg.norm(want)


@pytest.fixture
def no_launch(monkeypatch):
    """Any launch fails the test: a refused call writes nothing."""

    def launch(*args, **kwargs):
        raise AssertionError("launched")

    monkeypatch.setattr(type(gather_kernel(kaio.dtypes.f16)), "launch", launch)


def _bad_cases():
    rng = np.random.default_rng(0)
    x, wgu, wd, wts, ids = inputs(rng, 3, 16, 8, 4, 2)
    good = {"x": x, "w_gate_up": wgu, "w_down": wd, "weights": wts, "ids": ids}
    return good, [
        (dict(ids=np.array([[0, 1], [2, 4], [0, 1]], np.int32)), KaioValueError, r"`ids`\[1, 1\] = 4"),
        (dict(ids=ids.astype(np.float32)), KaioTypeError, "ids"),
        (dict(ids=ids[:2]), KaioTypeError, "ids"),
        (dict(weights=wts[:, :1]), KaioTypeError, "weights"),
        (dict(weights=wts.astype(np.float64)), KaioTypeError, "weights"),
        (dict(x=x.astype(np.float32)), KaioTypeError, "`x`"),
        (dict(w_gate_up=wgu.astype(ml_dtypes.bfloat16)), KaioTypeError, "w_gate_up"),
        (dict(w_gate_up=wgu[:, :15]), KaioTypeError, "w_gate_up"),
        (dict(w_down=wd[:, :, :4]), KaioTypeError, "w_down"),
        (dict(activation="relu"), KaioValueError, "activation"),
    ]


GOOD, BAD = _bad_cases()


@pytest.mark.parametrize("args, err, match", BAD)
def test_bad_input_names_the_argument_before_any_launch(no_launch, args, err, match):
    call = {**GOOD, **args}
    activation = call.pop("activation", "silu")
    with pytest.raises(err, match=match):
        fused_moe(call["x"], call["w_gate_up"], call["w_down"], call["weights"], call["ids"], activation=activation,
                  device=SIM)  # fmt: skip
