"""Small sample calls of every library op with torch tensors, and torch's own version of each,
shared by the autograd, opcheck and torch.compile tests.

``PUBLIC``: one case per way of calling a public ``kaio.ops_library`` op; ``make(rng, grow)``
gives fresh f32 CPU tensors (``grow=1``: larger leading sizes, for dynamic-shape tests) (the simulator runs them), ``kaio`` calls the op, ``torch_ref`` computes
the same math with torch. ``custom_op_args(name, rng)``: arguments for ``torch.ops.kaio.<name>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kaio.ops_library as ol
import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

import kaio


def randn(rng: np.random.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype)


def targets(rng: np.random.Generator, rows: int, vocab: int, ignored: int = 1) -> torch.Tensor:
    t = torch.from_numpy(rng.integers(0, vocab, size=rows)).long()
    t[rng.choice(rows, size=ignored, replace=False)] = -100  # ignored rows get no gradient
    return t


def rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rope of x (B, S, H, D) by cos, sin (S, D/2)."""
    half = x.shape[-1] // 2
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    qf, kf, vf = q.float(), k.float(), v.float()
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:  # bottom-right aligned
        sq, sk = s.shape[-2:]
        keep = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        s = s.masked_fill(~keep, float("-inf"))
    return (torch.softmax(s, -1) @ vf).to(q.dtype)


def varlen_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor,
                         causal: bool = False) -> torch.Tensor:  # fmt: skip
    """Packed (tokens, heads, D) attention: each sequence alone through :func:`attention_ref`."""
    outs = []
    for b in range(len(cu_q) - 1):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        seq = [x[None].transpose(1, 2) for x in (q[rows], k[keys], v[keys])]  # (1, H, S, D)
        outs.append(attention_ref(*seq, causal=causal)[0].transpose(0, 1))
    return torch.cat(outs)


@dataclass(frozen=True)
class Case:
    """One way of calling a public op: inputs, the kaio call and torch's same math."""

    name: str
    op: str  # the public function's name in kaio.ops_library
    make: Callable[[np.random.Generator, int], dict[str, torch.Tensor]]
    kaio: Callable[..., Any]
    torch_ref: Callable[..., Any]
    grads: tuple[str, ...]  # the inputs that get gradients
    tol: float = 1e-4
    marks: tuple[Any, ...] = field(default=())


def _norm_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    rows = 6 + 3 * grow
    return {"x": randn(rng, rows, 40), "w": randn(rng, 40), "b": randn(rng, 40), "r": randn(rng, rows, 40)}


def _rows(cols: int) -> Callable[[np.random.Generator, int], dict[str, torch.Tensor]]:
    return lambda rng, grow=0: {"x": randn(rng, 5 + 3 * grow, cols)}


def _rope_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    seq = 5 + 2 * grow
    angles = torch.from_numpy(rng.uniform(0, 6.3, size=(seq, 8)).astype(np.float32))
    return {"x": randn(rng, 2, seq, 3, 16), "cos": angles.cos(), "sin": angles.sin()}


def _ce_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    return {"logits": randn(rng, 6 + 3 * grow, 50), "t": targets(rng, 6 + 3 * grow, 50)}


def _matmul_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    return {"a": randn(rng, 12 + 5 * grow, 20), "b": randn(rng, 20, 16)}


def _matmul_bias_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    return {**_matmul_inputs(rng, grow), "c": randn(rng, 16)}


def _attention_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    dt, seq = torch.float16, 24 + 8 * grow
    return {"q": randn(rng, 1, 4, seq, 32, dtype=dt), "k": randn(rng, 1, 2, seq, 32, dtype=dt),
            "v": randn(rng, 1, 2, seq, 32, dtype=dt)}  # fmt: skip


# ragged lengths (one of 1) that stay under the samples' max_seqlen (16) when grown; each
# sequence has at least as many keys as queries, so every causal query sees a key
VARLEN_MAX = 16


def _varlen_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    dt = torch.float16
    cu_q = torch.tensor([0, 1, 8 + grow, 13 + 2 * grow], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 10 + 2 * grow, 22 + 3 * grow], dtype=torch.int32)
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    return {"q": randn(rng, total_q, 4, 16, dtype=dt), "k": randn(rng, total_k, 2, 16, dtype=dt),
            "v": randn(rng, total_k, 2, 16, dtype=dt), "cu_q": cu_q, "cu_k": cu_k}  # fmt: skip


def _lce_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    rows = 6 + 3 * grow
    return {"x": randn(rng, rows, 32), "weight": randn(rng, 70, 32) * 0.2, "t": targets(rng, rows, 70)}


def _w4a16_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    words = rng.integers(0, 2**32, (8, 16), dtype=np.uint64).astype(np.uint32).view(np.int32)
    scales = (rng.random((2, 16)) * 0.02 + 0.002).astype(np.float16)
    return {"x": randn(rng, 3 + 2 * grow, 64, dtype=torch.float16), "qweight": torch.from_numpy(words),
            "scales": torch.from_numpy(scales)}  # fmt: skip


def _gguf_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    """Q8_0 blocks of a (16, 64) weight: small positive f16 scales ahead of random int8 quants."""
    blocks = rng.integers(0, 256, (16, 2, 34), dtype=np.uint8)
    blocks[:, :, :2] = (rng.random((16, 2, 1)) * 0.01 + 0.001).astype(np.float16).view(np.uint8)
    return {"x": randn(rng, 12 + 2 * grow, 64, dtype=torch.float16), "weight": torch.from_numpy(blocks.reshape(16, 68))}


def gguf_ref(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Q8_0 dequantised (d * q per block of 32), then the product in f32."""
    blocks = weight.reshape(weight.shape[0], -1, 34)
    d = blocks[:, :, :2].contiguous().view(torch.float16).float()
    w = (blocks[:, :, 2:].contiguous().view(torch.int8).float() * d).reshape(weight.shape[0], -1)
    return (x.float() @ w.T).half()


def w4a16_ref(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """GPTQ int4 (symmetric, groups of 32) dequantised, then the product in f32."""
    q = (qweight[:, None, :] >> (4 * torch.arange(8))[None, :, None]) & 0xF  # low nibble first, along K
    w = ((q.reshape(-1, qweight.shape[1]) - 8).float() * scales.float().repeat_interleave(32, 0)).half()
    return (x.float() @ w.float()).half()


def _int8_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    m = 3 + 2 * grow
    return {"a": torch.from_numpy(rng.integers(-128, 128, (m, 64)).astype(np.int8)),
            "b": torch.from_numpy(rng.integers(-128, 128, (64, 16)).astype(np.int8)),
            "scale_a": randn(rng, m).abs() * 0.01, "scale_b": randn(rng, 16).abs() * 0.01}  # fmt: skip


def int8_ref(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    return ((a.long() @ b.long()).float() * scale_a[:, None] * scale_b[None, :]).half()


def quantize_int8_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax(-1)
    q = torch.round(x * torch.where(amax > 0, 127 / amax, 0)[:, None]).clamp(-127, 127).to(torch.int8)
    return q, amax / 127


def _fp8_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    m = 3 + 2 * grow
    return {"a": randn(rng, m, 64).to(torch.float8_e4m3fn), "b": randn(rng, 64, 16).to(torch.float8_e5m2),
            "scale_a": randn(rng, 1).abs(), "scale_b": randn(rng, 16).abs()}  # fmt: skip


def fp8_ref(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    return ((a.double() @ b.double()).float() * scale_a * scale_b[None, :]).bfloat16()


def quantize_fp8_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax().reshape(1)
    return (x * (448 / amax)).to(torch.float8_e4m3fn), amax / 448


def topk_softmax_ref(x: torch.Tensor, k: int, renormalize: bool = True) -> torch.Tensor:
    p = torch.softmax(x, -1)
    w = p.gather(-1, torch.sort(p.detach(), dim=-1, descending=True, stable=True).indices[..., :k])
    return w / w.sum(-1, keepdim=True) if renormalize else w


def _paged_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    """Two sequences in pages of 16 (lengths 5 and 20: a partial page, a second page)."""
    lens = torch.tensor([5, 20 + grow], dtype=torch.int32)
    table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    return {"q": randn(rng, 2, 4, 32, dtype=torch.float16), "k": randn(rng, 4, 16, 2, 32, dtype=torch.float16),
            "v": randn(rng, 4, 16, 2, 32, dtype=torch.float16), "table": table, "lens": lens}  # fmt: skip


def paged_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Each sequence's keys gathered from its pages, then attention_ref of its one query."""
    outs = []
    for b in range(q.shape[0]):
        n = int(lens[b])
        rows = [table[b, j // k.shape[1]] * k.shape[1] + j % k.shape[1] for j in range(n)]
        kb, vb = (c.reshape(-1, *c.shape[2:])[torch.stack(rows)].transpose(0, 1)[None] for c in (k, v))
        outs.append(attention_ref(q[b][None, :, None], kb, vb)[0, :, 0])
    return torch.stack(outs)


def _grouped_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    off = torch.tensor([0, 5, 5, 12 + 3 * grow], dtype=torch.int32)  # an empty expert
    t = int(off[-1])
    return {"x": randn(rng, t, 24, dtype=torch.float16), "w": randn(rng, 3, 24, 16, dtype=torch.float16) * 0.2,
            "off": off}  # fmt: skip


def grouped_ref(x: torch.Tensor, w: torch.Tensor, off: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[int(off[e]) : int(off[e + 1])].float() @ w[e].float() for e in range(w.shape[0])])


def _moe_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    t, e, k, d, f = 5 + 2 * grow, 3, 2, 16, 16
    ids = torch.from_numpy(np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32))
    return {"x": randn(rng, t, d, dtype=torch.float16), "wgu": randn(rng, e, 2 * f, d, dtype=torch.float16) * 0.25,
            "wd": randn(rng, e, d, f, dtype=torch.float16) * 0.25,
            "weights": torch.from_numpy(rng.random((t, k)).astype(np.float32)), "ids": ids}  # fmt: skip


def moe_ref(x: torch.Tensor, wgu: torch.Tensor, wd: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    f = wgu.shape[1] // 2
    rows = []
    for t in range(x.shape[0]):
        y = torch.zeros(x.shape[1])
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = wgu[e].float() @ x[t].float()
            y = y + weights[t, j] * (wd[e].float() @ (F.silu(h[:f]) * h[f:]))
        rows.append(y)
    return torch.stack(rows).to(x.dtype)


def dropout_ref(x: torch.Tensor, p: float, seed: int, residual: torch.Tensor | None = None) -> torch.Tensor:
    """The mask from kaio.random (Triton's numbers), scaled by the f32 1 / (1 - p)."""
    import kaio.random as kr

    keep = torch.from_numpy(kr.rand(seed, np.arange(x.numel(), dtype=np.int32)).reshape(x.shape) > np.float32(p))
    y = torch.where(keep, x * np.float32(1.0 / (1.0 - p)), torch.zeros_like(x))
    return y if residual is None else y + residual


SIM = kaio.Device("sim")
SIM_89 = kaio.Device("sim", arch="sm_89")  # fp8 tensor cores
CUSTOM_OP_DEVICES = {"fp8_matmul": SIM_89, "quantize_fp8": SIM_89}  # custom ops the default device's arch cannot run
# opcheck's schema test compares CPU tensors with arithmetic torch lacks for float8 ("mul" not
# implemented for Float8_e4m3fn): the fp8 ops' schemas are checked by the other tests only
OPCHECK_SKIPS = {"fp8_matmul": ("test_schema",), "quantize_fp8": ("test_schema",)}

PUBLIC: list[Case] = [
    Case("softmax", "softmax", _rows(33), lambda x: ol.softmax(x),
         lambda x: torch.softmax(x, -1), ("x",)),
    Case("softmax_device", "softmax", _rows(33), lambda x: ol.softmax(x, device=SIM),
         lambda x: torch.softmax(x, -1), ("x",)),
    Case("log_softmax", "log_softmax", _rows(33), lambda x: ol.log_softmax(x),
         lambda x: torch.log_softmax(x, -1), ("x",)),
    Case("layer_norm", "layer_norm", _norm_inputs, lambda x, w, b, r: ol.layer_norm(x, w, b),
         lambda x, w, b, r: F.layer_norm(x, (40,), w, b, 1e-5), ("x", "w", "b")),
    Case("rms_norm", "rms_norm", _norm_inputs, lambda x, w, b, r: ol.rms_norm(x, w),
         lambda x, w, b, r: F.rms_norm(x, (40,), w, 1e-6), ("x", "w")),
    Case("add_rms_norm", "rms_norm", _norm_inputs, lambda x, w, b, r: ol.rms_norm(x, w, residual=r),
         lambda x, w, b, r: (F.rms_norm(x + r, (40,), w, 1e-6), x + r), ("x", "w", "r")),
    Case("rope", "rope", _rope_inputs, lambda x, cos, sin: ol.rope(x, cos, sin), rope_ref, ("x",)),
    Case("silu_and_mul", "silu_and_mul", _rows(24), lambda x: ol.silu_and_mul(x),
         lambda x: F.silu(x[..., :12]) * x[..., 12:], ("x",)),
    Case("gelu_and_mul", "gelu_and_mul", _rows(24), lambda x: ol.gelu_and_mul(x),
         lambda x: F.gelu(x[..., :12]) * x[..., 12:], ("x",)),
    Case("gelu_tanh_and_mul", "gelu_and_mul", _rows(24),
         lambda x: ol.gelu_and_mul(x, "tanh"), lambda x: F.gelu(x[..., :12], approximate="tanh") * x[..., 12:],
         ("x",)),
    Case("cross_entropy", "cross_entropy", _ce_inputs, lambda logits, t: ol.cross_entropy(logits, t),
         lambda logits, t: F.cross_entropy(logits, t, reduction="none"), ("logits",)),
    Case("matmul", "matmul", _matmul_inputs,
         lambda a, b: ol.matmul(a, b), lambda a, b: a @ b, ("a", "b"), tol=1e-3),
    Case("matmul_bias", "matmul", _matmul_bias_inputs,
         lambda a, b, c: ol.matmul(a, b, bias=c), lambda a, b, c: a @ b + c, ("a", "b", "c"), tol=1e-3),
    Case("matmul_device", "matmul", _matmul_inputs,
         lambda a, b: ol.matmul(a, b, device=SIM), lambda a, b: a @ b, ("a", "b"), tol=1e-3),
    Case("attention", "attention", _attention_inputs, lambda q, k, v: ol.attention(q, k, v, causal=True),
         lambda q, k, v: attention_ref(q, k, v, causal=True), ("q", "k", "v"), tol=2e-2),
    Case("attention_varlen", "attention_varlen", _varlen_inputs,
         lambda q, k, v, cu_q, cu_k: ol.attention_varlen(q, k, v, cu_q, cu_k, VARLEN_MAX, VARLEN_MAX, causal=True),
         lambda q, k, v, cu_q, cu_k: varlen_attention_ref(q, k, v, cu_q, cu_k, causal=True), ("q", "k", "v"), tol=2e-2),
    Case("paged_attention", "paged_attention", _paged_inputs,
         lambda q, k, v, table, lens: ol.paged_attention(q, k, v, table, lens), paged_ref, ("q",), tol=2e-2),
    Case("moe_topk_softmax", "moe_topk_softmax", _rows(7), lambda x: ol.moe_topk_softmax(x, 2)[0],
         lambda x: topk_softmax_ref(x, 2), ("x",)),
    Case("moe_topk_softmax_no_renormalize", "moe_topk_softmax", _rows(7),
         lambda x: ol.moe_topk_softmax(x, 3, renormalize=False)[0], lambda x: topk_softmax_ref(x, 3, False), ("x",)),
    Case("grouped_matmul", "grouped_matmul", _grouped_inputs, lambda x, w, off: ol.grouped_matmul(x, w, off),
         grouped_ref, ("x", "w"), tol=1e-2),
    Case("fused_moe", "fused_moe", _moe_inputs, lambda x, wgu, wd, weights, ids: ol.fused_moe(x, wgu, wd, weights, ids),
         moe_ref, ("x", "wgu", "wd", "weights"), tol=2e-2),
    Case("dropout", "dropout", _rows(33), lambda x: ol.dropout(x, 0.25, 2**40 + 3),
         lambda x: dropout_ref(x, 0.25, 2**40 + 3), ("x",)),
    Case("dropout_add", "dropout_add", _norm_inputs, lambda x, w, b, r: ol.dropout_add(x, r, 0.25, 11),
         lambda x, w, b, r: dropout_ref(x, 0.25, 11, r), ("x", "r")),
]
if hasattr(ol, "w4a16_matmul"):
    PUBLIC.append(
        Case("w4a16_matmul", "w4a16_matmul", _w4a16_inputs,
             lambda x, qweight, scales: ol.w4a16_matmul(x, qweight, scales, group_size=32), w4a16_ref, ("x",),
             tol=1e-2)
    )  # fmt: skip
if hasattr(ol, "int8_matmul"):  # quantised inference: no backward (scales that require grad are refused)
    PUBLIC += [
        Case("int8_matmul", "int8_matmul", _int8_inputs,
             lambda a, b, scale_a, scale_b: ol.int8_matmul(a, b, scale_a, scale_b), int8_ref, ("scale_a",), tol=1e-2),
        Case("quantize_int8", "quantize_int8", _rows(40), lambda x: ol.quantize_int8(x), quantize_int8_ref, ("x",)),
        Case("fp8_matmul", "fp8_matmul", _fp8_inputs,
             lambda a, b, scale_a, scale_b: ol.fp8_matmul(a, b, scale_a, scale_b, device=SIM_89), fp8_ref, ("scale_b",),
             tol=1e-2),
        Case("quantize_fp8", "quantize_fp8", _rows(40), lambda x: ol.quantize_fp8(x, device=SIM_89), quantize_fp8_ref,
             ("x",)),
    ]  # fmt: skip
if hasattr(ol, "gguf_matmul"):
    PUBLIC.append(
        Case("gguf_matmul", "gguf_matmul", _gguf_inputs, lambda x, weight: ol.gguf_matmul(x, weight, "Q8_0"),
             gguf_ref, ("x",), tol=1e-2)
    )  # fmt: skip
if hasattr(ol, "linear_cross_entropy"):
    PUBLIC.append(
        Case("linear_cross_entropy", "linear_cross_entropy", _lce_inputs,
             lambda x, weight, t: ol.linear_cross_entropy(x, weight, t),  # type: ignore[attr-defined]
             lambda x, weight, t: F.cross_entropy(x @ weight.T, t, reduction="none"), ("x", "weight"), tol=1e-3)
    )  # fmt: skip



def _stats(x: torch.Tensor, eps: float, centred: bool) -> tuple[torch.Tensor, torch.Tensor]:
    mean = x.mean(-1) if centred else torch.zeros(x.shape[:-1])
    var = (x - mean[..., None]).pow(2).mean(-1)
    return mean, torch.rsqrt(var + eps)


def _softmax_grad_inputs(log: bool) -> Callable[[np.random.Generator, int], dict[str, torch.Tensor]]:
    def make(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
        x = randn(rng, 5 + 3 * grow, 33)
        return {"dy": randn(rng, *x.shape), "y": torch.log_softmax(x, -1) if log else torch.softmax(x, -1)}

    return make


def _gated_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    return {"dy": randn(rng, 5 + 3 * grow, 12), "x": randn(rng, 5 + 3 * grow, 24)}


def _ce_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    return {**_ce_inputs(rng, grow), "dl": randn(rng, 6 + 3 * grow)}


def _matmul_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    return {**_matmul_inputs(rng, grow), "dy": randn(rng, 12 + 5 * grow, 16)}


def _norm_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    n = _norm_inputs(rng, grow)
    mean, rstd = _stats(n["x"], 1e-5, centred=True)
    _, rms_rstd = _stats(n["x"], 1e-6, centred=False)
    return {"dy": randn(rng, *n["x"].shape), "x": n["x"], "w": n["w"], "mean": mean, "rstd": rstd, "rms_rstd": rms_rstd}


def _rope_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    d = _rope_inputs(rng, grow)
    return {"dy": randn(rng, *d["x"].shape), "cos": d["cos"], "sin": d["sin"]}


def _attention_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    d = _attention_inputs(rng, grow)
    out, lse = ol.attention(d["q"], d["k"], d["v"], return_lse=True)
    return {**d, "out": out, "lse": lse, "dout": randn(rng, *out.shape, dtype=out.dtype)}


def _varlen_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    d = _varlen_inputs(rng, grow)
    out, lse = ol.attention_varlen(*d.values(), VARLEN_MAX, VARLEN_MAX, return_lse=True)
    return {**d, "out": out, "lse": lse, "dout": randn(rng, *out.shape, dtype=out.dtype)}


def _topk_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    logits = randn(rng, 5 + 2 * grow, 7)
    _, ids = ol.moe_topk_softmax(logits, 2)
    return {"logits": logits, "ids": ids, "dw": randn(rng, logits.shape[0], 2)}


def _grouped_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    d = _grouped_inputs(rng, grow)
    return {**d, "dy": randn(rng, d["x"].shape[0], 16)}


def _moe_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    d = _moe_inputs(rng, grow)
    return {**d, "dy": randn(rng, *d["x"].shape)}


def _lce_grad_inputs(rng: np.random.Generator, grow: int = 0) -> dict[str, torch.Tensor]:
    d = _lce_inputs(rng, grow)
    _, lse = ol.linear_cross_entropy(d["x"], d["weight"], d["t"], return_lse=True)  # type: ignore[attr-defined]
    return {**d, "lse": lse, "dl": randn(rng, d["x"].shape[0])}


# The backward functions are public too: called with tensors that require grad (a second
# derivative), they record it or refuse; torch_ref None: no second derivative to compare.
def _none(**_: Any) -> None:
    return None


BACKWARD: list[Case] = [
    Case("softmax_backward", "softmax_backward", _softmax_grad_inputs(False),
         lambda dy, y: ol.softmax_backward(dy, y), _none, ("dy", "y")),
    Case("log_softmax_backward", "log_softmax_backward", _softmax_grad_inputs(True),
         lambda dy, y: ol.log_softmax_backward(dy, y), _none, ("dy", "y")),
    Case("silu_and_mul_backward", "silu_and_mul_backward", _gated_grad_inputs,
         lambda dy, x: ol.silu_and_mul_backward(dy, x), _none, ("dy", "x")),
    Case("gelu_and_mul_backward", "gelu_and_mul_backward", _gated_grad_inputs,
         lambda dy, x: ol.gelu_and_mul_backward(dy, x), _none, ("dy", "x")),
    Case("cross_entropy_backward", "cross_entropy_backward", _ce_grad_inputs,
         lambda logits, t, dl: ol.cross_entropy_backward(logits, t, dl), _none, ("logits", "dl")),
    Case("matmul_backward", "matmul_backward", _matmul_grad_inputs,
         lambda a, b, dy: tuple(g for g in ol.matmul_backward(dy, a, b) if g is not None), _none, ("a", "b", "dy")),
    Case("layer_norm_backward", "layer_norm_backward", _norm_grad_inputs,
         lambda dy, x, w, mean, rstd, rms_rstd: tuple(g for g in ol.layer_norm_backward(dy, x, w, mean, rstd) if g is not None),
         _none, ("dy", "x", "w")),
    Case("rms_norm_backward", "rms_norm_backward", _norm_grad_inputs,
         lambda dy, x, w, mean, rstd, rms_rstd: tuple(g for g in ol.rms_norm_backward(dy, x, w, rms_rstd) if g is not None),
         _none, ("dy", "x", "w")),
    Case("rope_backward", "rope_backward", _rope_grad_inputs,
         lambda dy, cos, sin: ol.rope_backward(dy, cos, sin), _none, ("dy",)),
    Case("attention_backward", "attention_backward", _attention_grad_inputs,
         lambda q, k, v, out, lse, dout: ol.attention_backward(q, k, v, out, lse, dout), _none, ("q", "k", "v", "dout")),
    Case("attention_varlen_backward", "attention_varlen_backward", _varlen_grad_inputs,
         lambda q, k, v, cu_q, cu_k, out, lse, dout: ol.attention_varlen_backward(q, k, v, out, lse, dout, cu_q, cu_k,
                                                                                   VARLEN_MAX, VARLEN_MAX),
         _none, ("q", "k", "v", "dout")),
    Case("moe_topk_softmax_backward", "moe_topk_softmax_backward", _topk_grad_inputs,
         lambda logits, ids, dw: ol.moe_topk_softmax_backward(dw, logits, ids), _none, ("logits", "dw")),
    Case("grouped_matmul_backward", "grouped_matmul_backward", _grouped_grad_inputs,
         lambda x, w, off, dy: ol.grouped_matmul_backward(dy, x, w, off), _none, ("x", "w", "dy")),
    Case("fused_moe_backward", "fused_moe_backward", _moe_grad_inputs,
         lambda x, wgu, wd, weights, ids, dy: ol.fused_moe_backward(dy, x, wgu, wd, weights, ids), _none,
         ("x", "wgu", "wd", "weights", "dy")),
]  # fmt: skip
if hasattr(ol, "linear_cross_entropy_backward"):
    BACKWARD.append(
        Case("linear_cross_entropy_backward", "linear_cross_entropy_backward", _lce_grad_inputs,
             lambda x, weight, t, lse, dl: tuple(g for g in ol.linear_cross_entropy_backward(x, weight, t, lse, dl)  # type: ignore[attr-defined]
                                                 if g is not None),
             _none, ("x", "weight", "dl"))
    )  # fmt: skip

# public names that are no ops (classes and configs; a GGUF loader, whose layers call gguf_matmul)
NOT_OPS = {"Attention", "Matmul", "MatmulConfig", "GGUFLinear", "gguf_linear", "PagedAttention", "BlockMask",
           "GPTQExperts"}  # fmt: skip
# ops with no torch custom op yet: torch tensors run eagerly through the op's operands (no
# torch.compile graph, no autograd: a tensor that requires grad is refused with a kaio error)
WITHOUT_TORCH_OP = {"moe_align", "create_block_mask", "sample", "gguf_grouped_matmul", "w4a16_grouped_matmul"}


def public_ops() -> set[str]:
    return {n for n in ol.__all__ if n not in NOT_OPS | WITHOUT_TORCH_OP}


def kaio_custom_ops() -> list[str]:
    """Every ``torch.ops.kaio.*`` op registered by now (after ``import kaio.torch``)."""
    from torch._library.custom_ops import OPDEFS

    import kaio.torch  # noqa: F401

    return sorted(q.split("::", 1)[1] for q in OPDEFS if q.startswith("kaio::"))


def records_gradient(case: Case, rng: np.random.Generator) -> bool:
    """Whether the op takes tensors that require grad (has a backward), or refuses them."""
    inputs = case.make(rng, 0)
    for n in case.grads:
        inputs[n].requires_grad_(True)
    try:
        case.kaio(**inputs)
    except kaio.KaioError:
        return False
    return True


def has_backward(name: str) -> bool:
    from kaio.ops_library.autograd import has_backward as registered

    return registered(f"kaio::{name}")


def custom_op_args(name: str, rng: np.random.Generator, requires_grad: bool) -> tuple[Any, ...]:
    """Sample arguments for ``torch.ops.kaio.<name>`` (float inputs require grad if asked)."""

    def g(t: torch.Tensor) -> torch.Tensor:
        return t.requires_grad_(requires_grad)

    n, ng, ce, rp, rg = _norm_inputs(rng), _norm_grad_inputs(rng), _ce_inputs(rng), _rope_inputs(rng), _rope_grad_inputs(rng)
    at, lc = _attention_inputs(rng), _lce_inputs(rng)
    gm, moe, tk = _grouped_grad_inputs(rng), _moe_grad_inputs(rng), _topk_grad_inputs(rng)
    sm, gated, mm = _softmax_grad_inputs(False)(rng), _gated_grad_inputs(rng), _matmul_grad_inputs(rng)
    builders: dict[str, Callable[[], tuple[Any, ...]]] = {
        "softmax": lambda: (g(randn(rng, 5, 33)), False),
        "softmax_backward": lambda: (g(sm["dy"]), g(sm["y"]), False),
        "layer_norm": lambda: (g(n["x"]), g(n["w"]), g(n["b"]), 1e-5),
        "layer_norm_fwd": lambda: (g(n["x"]), g(n["w"]), g(n["b"]), 1e-5),
        "layer_norm_backward": lambda: (g(ng["dy"]), g(ng["x"]), g(ng["w"]), g(n["b"]), ng["mean"], ng["rstd"]),
        "rms_norm": lambda: (g(n["x"]), g(n["w"]), 1e-6),
        "rms_norm_fwd": lambda: (g(n["x"]), g(n["w"]), 1e-6),
        "rms_norm_backward": lambda: (g(ng["dy"]), g(ng["x"]), g(ng["w"]), ng["rms_rstd"], None),
        "add_rms_norm": lambda: (g(n["x"]), g(n["r"]), g(n["w"]), 1e-6),
        "add_rms_norm_fwd": lambda: (g(n["x"]), g(n["r"]), g(n["w"]), 1e-6),
        "rope": lambda: (g(rp["x"]), rp["cos"], rp["sin"], False, None),
        "rope_backward": lambda: (g(rg["dy"]), rg["cos"], rg["sin"], False, None),
        "gated_activation": lambda: (g(randn(rng, 4, 24)), 0),
        "gated_activation_backward": lambda: (g(gated["dy"]), g(gated["x"]), 1),
        "cross_entropy": lambda: (g(ce["logits"]), ce["t"], -100),
        "cross_entropy_with_grad": lambda: (g(ce["logits"]), ce["t"], -100),
        "cross_entropy_backward": lambda: (g(ce["logits"]), ce["t"], g(randn(rng, 6)), -100),
        "matmul": lambda: (g(randn(rng, 12, 20)), g(randn(rng, 20, 16)), 1.0, 0.0, None, g(randn(rng, 16)), None),
        "matmul_out": lambda: (randn(rng, 12, 20), randn(rng, 20, 16), torch.zeros(12, 16), 1.0, 0.0, None, None, None),
        "matmul_backward": lambda: (g(mm["dy"]), g(mm["a"]), g(mm["b"]), 1.0, torch.float32),
        "attention": lambda: (g(at["q"]), g(at["k"]), g(at["v"]), True, None, None, None),
        "attention_backward": lambda: _attention_backward_args(g, _attention_grad_inputs(rng)),
        "attention_varlen": lambda: _varlen_args(g, _varlen_inputs(rng)),
        "attention_varlen_backward": lambda: _varlen_backward_args(g, _varlen_grad_inputs(rng)),
        "linear_cross_entropy": lambda: (g(lc["x"]), g(lc["weight"]), lc["t"], None, -100, 32),
        "linear_cross_entropy_backward": lambda: _lce_backward_args(g, _lce_grad_inputs(rng)),
        "w4a16_matmul": lambda: (*_w4a16_inputs(rng).values(), None, None, 32),
        "gguf_matmul": lambda: (*_gguf_inputs(rng).values(), "Q8_0"),
        "int8_matmul": lambda: (*_int8_inputs(rng).values(), None, "f16"),
        "quantize_int8": lambda: (randn(rng, 5, 40),),
        "quantize_fp8": lambda: (randn(rng, 5, 40), True, "e5m2"),
        "fp8_matmul": lambda: (*_fp8_inputs(rng).values(), None, "f32"),
        "dropout": lambda: (g(randn(rng, 5, 33)), g(randn(rng, 5, 33)), 0.25, -(2**62)),
        "paged_attention": lambda: (*_paged_inputs(rng).values(), None, -1, -1, 0.0, None, 1.0, 1.0),
        "moe_topk_softmax": lambda: (g(tk["logits"]), 2, True),
        "moe_topk_softmax_backward": lambda: (g(tk["dw"]), g(tk["logits"]), tk["ids"], True),
        "grouped_matmul": lambda: (g(gm["x"]), g(gm["w"]), gm["off"], "f32", None),
        "grouped_matmul_backward": lambda: (g(gm["dy"]), g(gm["x"]), g(gm["w"]), gm["off"], False),
        "fused_moe": lambda: (g(moe["x"]), g(moe["wgu"]), g(moe["wd"]), g(moe["weights"]), moe["ids"], "silu"),
        "fused_moe_backward": lambda: (g(moe["dy"]), g(moe["x"]), g(moe["wgu"]), g(moe["wd"]), g(moe["weights"]),
                                       moe["ids"], "silu"),
    }  # fmt: skip
    if name not in builders:
        raise KeyError(f"no sample arguments for torch.ops.kaio.{name}: add them to torch_op_samples.py")
    return builders[name]()


def _attention_backward_args(g: Callable[[torch.Tensor], torch.Tensor], d: dict[str, torch.Tensor]) -> tuple[Any, ...]:
    return g(d["q"]), g(d["k"]), g(d["v"]), d["out"], d["lse"], g(d["dout"]), None, False, None, None, False


def _lce_backward_args(g: Callable[[torch.Tensor], torch.Tensor], d: dict[str, torch.Tensor]) -> tuple[Any, ...]:
    return g(d["x"]), g(d["weight"]), d["t"], d["lse"], g(d["dl"]), None, None, -100, 32


def _varlen_args(g: Callable[[torch.Tensor], torch.Tensor], d: dict[str, torch.Tensor]) -> tuple[Any, ...]:
    return g(d["q"]), g(d["k"]), g(d["v"]), d["cu_q"], d["cu_k"], VARLEN_MAX, VARLEN_MAX, True


def _varlen_backward_args(g: Callable[[torch.Tensor], torch.Tensor], d: dict[str, torch.Tensor]) -> tuple[Any, ...]:
    # the samples' out and lse are the non-causal forward's
    return (g(d["q"]), g(d["k"]), g(d["v"]), d["out"], d["lse"], g(d["dout"]), d["cu_q"], d["cu_k"], VARLEN_MAX,
            VARLEN_MAX, False)  # fmt: skip
