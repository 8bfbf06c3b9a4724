"""fused_moe on quantised experts: GGUF blocks as stored (qtype=) against the float64 MLP over
gguf's own decoding of them, and e4m3 experts with per-expert or per-column scales (W8A16)
against the float64 MLP over their real values; the refusals of what cannot run."""

import math

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError, KaioValueError
from kaio.ops_library import fused_moe

from .test_gguf_matmul import random_weight, reference as decoded
from .test_moe_fused import reference

SIM = kaio.Device("sim")


def experts(rng, qtype, e, rows, k):
    return np.stack([random_weight(rng, qtype, rows, k) for _ in range(e)])


def decode(blocks, qtype):
    return np.stack([decoded(b, qtype) for b in blocks])


@pytest.mark.parametrize(("qtype", "d", "f"), [("Q8_0", 64, 32), (("Q4_K", "Q6_K"), 256, 256), ("MXFP4", 32, 64)],
                         ids=["Q8_0", "Q4_K+Q6_K", "MXFP4"])  # fmt: skip
def test_matches_float64_over_gguf_decoding(rng, poison, qtype, d, f):
    t, e, k = 7, 4, 2
    qg, qd = qtype if isinstance(qtype, tuple) else (qtype, qtype)
    wgu, wd = experts(rng, qg, e, 2 * f, d), experts(rng, qd, e, d, f)
    x = (rng.standard_normal((t, d)) / math.sqrt(d)).astype(np.float16)
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)
    ids[:, 0] = np.minimum(ids[:, 0], 2)  # expert 3 is often empty
    w = rng.random(ids.shape).astype(np.float32)
    y = fused_moe(x, wgu, wd, w, ids, qtype=qtype, device=SIM)
    want = reference(x, decode(wgu, qg), decode(wd, qd), w, ids)
    assert y.dtype == np.float16 and np.isfinite(y.astype(np.float64)).all()
    # h, the activation and the down product are rounded to f16 (the GGUF kernel stores x's type)
    assert np.linalg.norm(y.astype(np.float64) - want) <= 1e-2 * np.linalg.norm(want)


def test_float_experts_in_their_own_type(rng, poison):
    wgu = rng.standard_normal((2, 32, 16)).astype(np.float16)
    wd = rng.standard_normal((2, 16, 16)).astype(np.float16)
    x = rng.standard_normal((3, 16)).astype(np.float16)
    ids, w = np.array([[0], [1], [1]], np.int32), np.ones((3, 1), np.float32)
    got = fused_moe(x, wgu, wd, w, ids, qtype="F16", device=SIM)
    plain = fused_moe(x, wgu, wd, w, ids, device=SIM)
    assert np.linalg.norm(got.astype(np.float64) - plain) <= 1e-2 * np.linalg.norm(plain.astype(np.float64))


def test_bad_gguf_experts_are_named(rng):
    wgu, wd = experts(rng, "Q8_0", 2, 64, 64), experts(rng, "Q8_0", 2, 64, 32)
    x, ids, w = np.zeros((2, 64), np.float16), np.zeros((2, 1), np.int32), np.ones((2, 1), np.float32)
    with pytest.raises(KaioTypeError, match="`w_down` must have shape"):
        fused_moe(x, wgu, wd[:, :32], w, ids, qtype="Q8_0", device=SIM)
    with pytest.raises(KaioValueError, match="not whole Q4_K blocks"):
        fused_moe(x, wgu, wd, w, ids, qtype="Q4_K", device=SIM)
    with pytest.raises(KaioValueError, match="qtype"):
        fused_moe(x, wgu, wd, w, ids, qtype=("Q8_0",), device=SIM)
    with pytest.raises(KaioTypeError, match="uint8 blocks"):
        fused_moe(x, wgu.astype(np.float16), wd, w, ids, qtype="Q8_0", device=SIM)
    torch = pytest.importorskip("torch")
    with pytest.raises(KaioTypeError, match="frozen"):
        fused_moe(torch.zeros(2, 64, dtype=torch.float16, requires_grad=True), torch.from_numpy(wgu),
                  torch.from_numpy(wd), torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.int32), qtype="Q8_0")  # fmt: skip


SIM_89 = kaio.Device("sim", arch="sm_89")  # e4m3 conversions


@pytest.mark.parametrize("per_column", [False, True], ids=["per expert", "per column"])
def test_fp8_experts_match_float64(rng, poison, per_column):
    import ml_dtypes

    t, e, k, d, f = 6, 3, 2, 32, 48
    e4m3 = ml_dtypes.float8_e4m3fn
    wgu = rng.standard_normal((e, 2 * f, d)).astype(e4m3)
    wd = rng.standard_normal((e, d, f)).astype(e4m3)
    sg = (rng.random((e, 2 * f) if per_column else (e,)) / math.sqrt(d)).astype(np.float32)
    sd = (rng.random((e, d) if per_column else (e,)) / math.sqrt(f)).astype(np.float32)
    x = rng.standard_normal((t, d)).astype(np.float16)
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)
    w = rng.random(ids.shape).astype(np.float32)
    y = fused_moe(x, wgu, wd, w, ids, w_gate_up_scale=sg, w_down_scale=sd, device=SIM_89)
    real_gu = wgu.astype(np.float64) * (sg[:, :, None] if per_column else sg[:, None, None])
    real_d = wd.astype(np.float64) * (sd[:, :, None] if per_column else sd[:, None, None])
    want = reference(x, real_gu, real_d, w, ids)
    assert np.linalg.norm(y.astype(np.float64) - want) <= 5e-3 * np.linalg.norm(want)


def test_fp8_experts_are_refused_where_they_cannot_run(rng):
    import ml_dtypes

    wgu = np.zeros((2, 32, 16), ml_dtypes.float8_e4m3fn)
    wd = np.zeros((2, 16, 16), ml_dtypes.float8_e4m3fn)
    x, ids, w = np.zeros((2, 16), np.float16), np.zeros((2, 1), np.int32), np.ones((2, 1), np.float32)
    with pytest.raises(kaio.KaioTargetError, match="sm_89"):
        fused_moe(x, wgu, wd, w, ids, device=SIM)
    with pytest.raises(KaioTypeError, match="w_down_scale"):
        fused_moe(x, wgu, wd, w, ids, w_down_scale=np.ones((3,), np.float32), device=SIM_89)
    with pytest.raises(KaioTypeError, match="no `w_gate_up_scale`"):
        fused_moe(x, np.zeros((2, 32, 32), np.uint8), np.zeros((2, 16, 32), np.uint8), w, ids, qtype="F16",
                  w_gate_up_scale=np.ones(2, np.float32), device=SIM_89)  # F16 blocks: 2 bytes an element  # fmt: skip
    from kaio.ops_library import fused_moe_backward

    with pytest.raises(KaioTypeError, match="experts are frozen"):
        fused_moe_backward(np.zeros((2, 16), np.float32), x, wgu, wd, w, ids, device=SIM_89)


def test_gptq_experts_match_float64(rng, poison):
    from kaio.ops_library import GPTQExperts

    from .test_w4a16_matmul import dequantize_gptq, random_gptq

    t, e, k, d, f, group = 7, 3, 2, 128, 64, 64
    gu = [random_gptq(rng, d, 2 * f, group, True) for _ in range(e)]
    dn = [random_gptq(rng, f, d, group, False) for _ in range(e)]
    stack = lambda ws, i: np.stack([w[i] for w in ws])  # noqa: E731
    w_gate_up = GPTQExperts(stack(gu, 0), stack(gu, 1), stack(gu, 2), group)
    w_down = GPTQExperts(stack(dn, 0), stack(dn, 1), None, group)
    x = (rng.standard_normal((t, d)) / 4).astype(np.float16)
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)
    w = rng.random(ids.shape).astype(np.float32)
    y = fused_moe(x, w_gate_up, w_down, w, ids, device=SIM)
    # GPTQ's W is (in, out): the MLP's nn.Linear layout is its transpose
    real_gu = np.stack([dequantize_gptq(*g, group).T for g in gu]).astype(np.float64)
    real_d = np.stack([dequantize_gptq(*g, group).T for g in dn]).astype(np.float64)
    want = reference(x, real_gu, real_d, w, ids)
    assert np.isfinite(y.astype(np.float64)).all()
    assert np.linalg.norm(y.astype(np.float64) - want) <= 1e-2 * np.linalg.norm(want)
    with pytest.raises(KaioTypeError, match="both GPTQExperts or neither"):
        fused_moe(x, w_gate_up, real_d.astype(np.float16), w, ids, device=SIM)
    with pytest.raises(KaioTypeError, match=r"`w_down.qweight` must be \(3, 8, 128\)"):
        fused_moe(x, w_gate_up, GPTQExperts(stack(dn, 0)[:2], stack(dn, 1)[:2], None, group), w, ids, device=SIM)
