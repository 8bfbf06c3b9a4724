"""The library's kernels as synchronisation-mutant cases (:mod:`kaio.tools.sync_mutants`): each
a small launch on the simulated device, its result checked against numpy. Shapes are the
smallest that still exercise what synchronises: K loops longer than the copy ring (every stage
refilled), several warps per reduction, ragged edges, more than one program."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

Case = Callable[[Any], None]


def _rng() -> np.random.Generator:
    return np.random.default_rng(1234)  # the same inputs for the case and each of its mutants


def _close(got: Any, want: np.ndarray, tol: float) -> None:
    got = np.asarray(got, dtype=np.float64)
    assert np.isfinite(got).all(), "unwritten or non-finite elements"
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    assert err <= tol, f"relative error {err:.3g} > {tol}"


def _matmul(config: Any, m: int = 96, n: int = 80, k: int = 320) -> Case:
    def run(dev: Any) -> None:
        from kaio.ops_library import matmul
        from kaio.ops_library.matmul_kernel import MatmulKernel

        rng = _rng()
        a, b = (rng.standard_normal(s).astype(np.float16) for s in ((m, k), (k, n)))
        out = dev.alloc_from(np.full((m, n), np.nan, np.float32))
        # a persistent kernel on one program: it walks every tile, prefetching the next one's
        # first stages under the last one's epilogue (with a program per SM, each has one tile)
        with _constants(MatmulKernel, programs=lambda self, device: 1):
            matmul(dev.alloc_from(a), dev.alloc_from(b), out, config=config)
        _close(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), 1e-3)

    return run


def _attention(causal: bool, sq: int = 70, sk: int | None = None, d: int = 64, backward: bool = False,
               deterministic: bool = False) -> Case:  # fmt: skip
    """Forward (or, with ``backward``, the backward kernels alone: o and lse from numpy). ``sk``
    None: enough keys for three whole key blocks of the arch's tile (the two-stage K/V ring
    refilled) and a ragged one."""

    def run(dev: Any) -> None:
        from kaio.ops_library import attention, attention_backward
        from kaio.ops_library.attention import choose_config

        keys = sk if sk is not None else max(200, 3 * choose_config(sq, d, dev.arch).block_n + 72)
        rng = _rng()
        q, do = (rng.standard_normal((1, 2, sq, d)).astype(np.float16) for _ in range(2))
        k, v = (rng.standard_normal((1, 1, keys, d)).astype(np.float16) for _ in range(2))
        s = q.astype(np.float64) @ np.repeat(k, 2, 1).astype(np.float64).transpose(0, 1, 3, 2) / np.sqrt(d)
        if causal:
            s = np.where(np.arange(keys)[None, :] <= np.arange(sq)[:, None] + keys - sq, s, -np.inf)
        m = s.max(-1, keepdims=True)
        p = np.exp(s - m)
        p /= p.sum(-1, keepdims=True)
        vv = np.repeat(v, 2, 1).astype(np.float64)
        if not backward:
            o = attention(*(dev.alloc_from(x) for x in (q, k, v)), causal=causal)
            _close(o.to_host(), p @ vv, 2e-2)
            return
        o = (p @ vv).astype(np.float16)
        lse = (m[..., 0] + np.log(np.exp(s - m).sum(-1))).astype(np.float32)
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, causal=causal, deterministic=deterministic, device=dev)
        dov = do.astype(np.float64)
        ds = p * (dov @ vv.transpose(0, 1, 3, 2) - (dov * o.astype(np.float64)).sum(-1, keepdims=True))
        _close(dv, (p.transpose(0, 1, 3, 2) @ dov).reshape(1, 1, 2, keys, d).sum(2), 2e-2)
        _close(dq, ds @ np.repeat(k, 2, 1).astype(np.float64) / np.sqrt(d), 2e-2)
        _close(dk, (ds.transpose(0, 1, 3, 2) @ q.astype(np.float64)).reshape(1, 1, 2, keys, d).sum(2) / np.sqrt(d), 2e-2)

    return run


def _rows(op: str) -> Case:
    def run(dev: Any) -> None:
        from kaio import ops_library as ol

        rng = _rng()
        x = rng.standard_normal((5, 3000)).astype(np.float32)
        w = rng.standard_normal(3000).astype(np.float32)
        xd = x.astype(np.float64)
        if op == "rms_norm":
            got, want = ol.rms_norm(dev.alloc_from(x), dev.alloc_from(w)), xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-6) * w
        elif op == "layer_norm":
            c = xd - xd.mean(-1, keepdims=True)
            got, want = ol.layer_norm(dev.alloc_from(x), dev.alloc_from(w)), c / np.sqrt((c**2).mean(-1, keepdims=True) + 1e-5) * w
        elif op == "softmax":
            e = np.exp(xd - xd.max(-1, keepdims=True))
            got, want = ol.softmax(dev.alloc_from(x)), e / e.sum(-1, keepdims=True)
        else:  # cross_entropy
            t = rng.integers(0, 3000, 5)
            got = ol.cross_entropy(dev.alloc_from(x), dev.alloc_from(t.astype(np.int32)))
            want = np.log(np.exp(xd - xd.max(-1, keepdims=True)).sum(-1)) + xd.max(-1) - xd[np.arange(5), t]
        _close(got.to_host(), want, 1e-4)

    return run


def _gguf(m: int) -> Case:
    def run(dev: Any) -> None:
        from kaio.ops_library import gguf_matmul
        from kaio.ops_library.gguf_blocks import FORMATS

        rng = _rng()
        n, k = 72, 256
        fmt = FORMATS["Q8_0"]
        blocks = rng.integers(-127, 128, (n, k // 32, 34), dtype=np.int64).astype(np.uint8)
        blocks[:, :, :2] = np.full((n, k // 32, 1), 0.01, np.float16).view(np.uint8)
        w = blocks.reshape(n, -1)
        q = w.reshape(n, k // 32, fmt.nbytes)[:, :, 2:].view(np.int8).astype(np.float64).reshape(n, k) * 0.01
        x = rng.standard_normal((m, k)).astype(np.float16)
        _close(gguf_matmul(dev.alloc_from(x), dev.alloc_from(w), "Q8_0").to_host(), x.astype(np.float64) @ q.T, 2e-2)

    return run


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-a))


def _elementwise(op: str) -> Case:
    """The ops with no shared memory or a row reduction in one warp: run for the race check and
    synccheck (a barrier they should not need would show as a mutant)."""

    def run(dev: Any) -> None:
        from kaio import ops_library as ol
        from kaio.random import rand

        rng = _rng()
        x = rng.standard_normal((3, 1000)).astype(np.float32)
        g = rng.standard_normal((3, 500)).astype(np.float32)
        a, b = x[:, :500].astype(np.float64), x[:, 500:].astype(np.float64)
        s = _sigmoid(a)
        if op == "silu_and_mul":
            got, want = ol.silu_and_mul(dev.alloc_from(x)), a * s * b
        elif op == "silu_and_mul_backward":
            got = ol.silu_and_mul_backward(dev.alloc_from(g), dev.alloc_from(x))
            want = np.concatenate([g * b * s * (1 + a * (1 - s)), g * a * s], axis=-1)
        elif op.startswith("gelu_and_mul"):
            c = np.sqrt(2 / np.pi)
            t = np.tanh(c * (a + 0.044715 * a**3))
            gelu = 0.5 * a * (1 + t)
            if op == "gelu_and_mul":
                got, want = ol.gelu_and_mul(dev.alloc_from(x), "tanh"), gelu * b
            else:
                slope = 0.5 * (1 + t) + 0.5 * a * (1 - t**2) * c * (1 + 3 * 0.044715 * a**2)
                got = ol.gelu_and_mul_backward(dev.alloc_from(g), dev.alloc_from(x), approximate="tanh")
                want = np.concatenate([g * b * slope, g * gelu], axis=-1)
        else:  # dropout, dropout_add
            keep = rand(7, np.arange(x.size, dtype=np.int32)).reshape(x.shape) > 0.25
            want = np.where(keep, x.astype(np.float64) / 0.75, 0)
            if op == "dropout":
                got = ol.dropout(dev.alloc_from(x), 0.25, 7)
            else:
                residual = rng.standard_normal(x.shape).astype(np.float32)
                got, want = ol.dropout_add(dev.alloc_from(x), dev.alloc_from(residual), 0.25, 7), want + residual
        _close(got.to_host(), want, 1e-4)

    return run


def _row_backward(op: str) -> Case:
    def run(dev: Any) -> None:
        from kaio import ops_library as ol

        rng = _rng()
        x = rng.standard_normal((4, 3000)).astype(np.float32)
        w = rng.standard_normal(3000).astype(np.float32)
        g = rng.standard_normal((4, 3000)).astype(np.float32)
        xd, gd = x.astype(np.float64), g.astype(np.float64)
        if op in ("softmax_backward", "log_softmax_backward"):
            e = np.exp(xd - xd.max(-1, keepdims=True))
            y = e / e.sum(-1, keepdims=True)
            if op == "softmax_backward":
                got = ol.softmax_backward(dev.alloc_from(g), dev.alloc_from(y.astype(np.float32)))
                want = y * (gd - (gd * y).sum(-1, keepdims=True))
            else:
                got = ol.log_softmax_backward(dev.alloc_from(g), dev.alloc_from(np.log(y).astype(np.float32)))
                want = gd - y * gd.sum(-1, keepdims=True)
            _close(got.to_host(), want, 1e-4)
            return
        if op == "log_softmax":
            m = xd.max(-1, keepdims=True)
            _close(ol.log_softmax(dev.alloc_from(x)).to_host(), xd - m - np.log(np.exp(xd - m).sum(-1, keepdims=True)), 1e-4)
            return
        if op == "cross_entropy_backward":
            t = rng.integers(0, 3000, 4)
            grad_loss = rng.standard_normal(4).astype(np.float32)
            e = np.exp(xd - xd.max(-1, keepdims=True))
            want = e / e.sum(-1, keepdims=True)
            want[np.arange(4), t] -= 1
            got = ol.cross_entropy_backward(dev.alloc_from(x), dev.alloc_from(t.astype(np.int32)), dev.alloc_from(grad_loss))
            _close(got.to_host(), want * grad_loss[:, None], 1e-4)
            return
        mean = xd.mean(-1, keepdims=True) if op == "layer_norm_backward" else 0.0
        c = xd - mean
        rstd = 1 / np.sqrt((c**2).mean(-1, keepdims=True) + (1e-5 if op == "layer_norm_backward" else 1e-6))
        xhat, gw = c * rstd, gd * w
        assert op in ("rms_norm_backward", "layer_norm_backward"), op
        from kaio.ops_library import norms_backward

        want_dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdims=True))
        if op == "layer_norm_backward":
            want_dx -= rstd * gw.mean(-1, keepdims=True)
        # 4 rows on the 108 simulated SMs are a program each, and 4 programs' partial sums one
        # column-sum step: two programs make the row loop run two trips, a smaller column-sum
        # tile the column loop
        for tuning in ({"PROGRAMS_PER_SM": 2 / dev.sm_count}, {"SUM_TILE": 512}):
            with _constants(norms_backward, **tuning):
                dx, dw = _norm_backward(op, dev, g, x, w, mean, rstd)
            _close(dx.to_host(), want_dx, 1e-4)
            _close(dw.to_host(), (gd * xhat).sum(0), 1e-4)

    return run


def _norm_backward(op: str, dev: Any, g: np.ndarray, x: np.ndarray, w: np.ndarray, mean: Any, rstd: np.ndarray) -> tuple[Any, Any]:
    from kaio import ops_library as ol

    stats = dev.alloc_from(rstd[:, 0].astype(np.float32))
    if op == "layer_norm_backward":
        dx, dw, _ = ol.layer_norm_backward(*(dev.alloc_from(v) for v in (g, x, w)), dev.alloc_from(mean[:, 0].astype(np.float32)), stats)
        return dx, dw
    return ol.rms_norm_backward(*(dev.alloc_from(v) for v in (g, x, w)), stats)


@contextmanager
def _constants(module: Any, **values: Any) -> Iterator[None]:
    """``module``'s tuning constants set to ``values`` inside."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _rope(backward: bool) -> Case:
    def run(dev: Any) -> None:
        from kaio.ops_library import rope, rope_backward

        rng = _rng()
        x = rng.standard_normal((1, 5, 3, 64)).astype(np.float32)  # (B, S, H, D)
        angle = rng.random((5, 32)) * 6
        cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
        a, b = x[..., :32].astype(np.float64), x[..., 32:].astype(np.float64)
        c, s = cos[None, :, None].astype(np.float64), sin[None, :, None].astype(np.float64)
        s = -s if backward else s  # the backward rotates back
        want = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
        op = rope_backward if backward else rope
        _close(op(*(dev.alloc_from(v) for v in (x, cos, sin))).to_host(), want, 1e-5)

    return run


def _matmul_backward(dev: Any) -> None:
    from kaio.ops_library import matmul_backward

    rng = _rng()
    # both products' K (the batch and the output width) past a wgmma ring (up to four 64-deep stages)
    m, n = (320, 320) if dev.arch == "sm_90a" else (48, 40)
    a, b, g = (rng.standard_normal(s).astype(np.float16) for s in ((m, 96), (96, n), (m, n)))
    da, db, dbias = matmul_backward(*(dev.alloc_from(v) for v in (g, a, b)), bias=True)
    ad, bd, gd = (v.astype(np.float64) for v in (a, b, g))
    _close(da.to_host(), gd @ bd.T, 2e-3)
    _close(db.to_host(), ad.T @ gd, 2e-3)
    _close(dbias.to_host(), gd.sum(0), 2e-3)


def _quantized(kind: str) -> Case:
    def run(dev: Any) -> None:
        from kaio import ops_library as ol

        rng = _rng()
        # K = 384 rows of w: the per-tensor scale's loop over row maxima (256 a trip) runs two trips
        x = rng.standard_normal((40, 384)).astype(np.float16)
        w = rng.standard_normal((384, 72)).astype(np.float16)
        if kind == "int8":
            qa, sa = ol.quantize_int8(dev.alloc_from(x))
            qb, sb = ol.quantize_int8(dev.alloc_from(np.ascontiguousarray(w.T)))
            qa_h, sa_h, qb_h, sb_h = qa.to_host(), sa.to_host(), qb.to_host(), sb.to_host()
            _close(qa_h * sa_h[:, None].astype(np.float64), x.astype(np.float64), 1e-2)
            got = ol.int8_matmul(qa, dev.alloc_from(np.ascontiguousarray(qb_h.T)), sa, sb)
            want = (qa_h.astype(np.float64) @ qb_h.T.astype(np.float64)) * sa_h[:, None] * sb_h[None, :]
        else:  # fp8
            qa, sa = ol.quantize_fp8(dev.alloc_from(x))
            qb, sb = ol.quantize_fp8(dev.alloc_from(w))
            got = ol.fp8_matmul(qa, qb, sa, sb)
            dq = lambda q, s: q.to_host().astype(np.float64) * float(s.to_host()[0])  # noqa: E731
            want = dq(qa, sa) @ dq(qb, sb)
        _close(got.to_host(), want, 1e-2)

    return run


def _w4a16(dev: Any) -> None:
    from kaio.ops_library import w4a16_matmul

    rng = _rng()
    k, n = 256, 64
    qweight = rng.integers(0, 2**32, (k // 8, n), dtype=np.uint64).astype(np.uint32).view(np.int32)
    scales = (rng.random((k // 128, n)) * 0.02 + 0.002).astype(np.float16)
    x = rng.standard_normal((24, k)).astype(np.float16)
    nib = np.stack([(qweight.view(np.uint32) >> (4 * j)) & 0xF for j in range(8)], axis=1).reshape(k, n).astype(np.float64)
    weight = (nib - 8) * scales.astype(np.float64)[np.arange(k) // 128]
    got = w4a16_matmul(*(dev.alloc_from(v) for v in (x, qweight, scales)), group_size=128)
    _close(got.to_host(), x.astype(np.float64) @ weight, 1e-2)


def _linear_cross_entropy(dev: Any) -> None:
    from kaio.ops_library import linear_cross_entropy, linear_cross_entropy_backward

    rng = _rng()
    tokens, hidden, vocab = 24, 64, 200
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    w = (rng.standard_normal((vocab, hidden)) * 0.2).astype(np.float16)
    t = rng.integers(0, vocab, tokens).astype(np.int32)
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]
    loss, got_lse = linear_cross_entropy(*(dev.alloc_from(v) for v in (x, w, t)), return_lse=True)
    _close(loss.to_host(), lse - logits[np.arange(tokens), t], 1e-2)
    grad = np.ones(tokens, np.float32)
    dx, dw, _ = linear_cross_entropy_backward(*(dev.alloc_from(v) for v in (x, w, t)), got_lse, dev.alloc_from(grad))
    p = np.exp(logits - lse[:, None])
    p[np.arange(tokens), t] -= 1
    _close(dx.to_host(), p @ w.astype(np.float64), 2e-2)
    _close(dw.to_host(), p.T @ x.astype(np.float64), 2e-2)


def _attention_mods(dev: Any) -> None:
    """Forward with a window wide enough for whole key blocks between masked edges (the masked
    loop's index jumping them), a softcap and sinks, against numpy. On sm_90a (128 x 128 tiles)
    one query block over 800 keys, its window (bottom-right aligned) off the block grid on both
    sides: two masked blocks on each edge, three whole ones between (both two-stage rings
    refilled); elsewhere 192 queries and keys (64 x 32 tiles)."""
    from kaio.ops_library import attention

    rng = _rng()
    d, cap = 64, 2.0
    sq, sk, left, right = (128, 800, 608, 28) if dev.arch == "sm_90a" else (192, 192, 96, 64)
    q = rng.standard_normal((1, 2, sq, d)).astype(np.float16)
    k, v = (rng.standard_normal((1, 2, sk, d)).astype(np.float16) for _ in range(2))
    sinks = np.array([0.5, -1.0], np.float32)
    s = cap * np.tanh(q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / np.sqrt(d) / cap)
    i, j = np.arange(sq)[:, None] + sk - sq, np.arange(sk)[None, :]
    s = np.where((j >= i - left) & (j <= i + right), s, -np.inf)
    m = np.maximum(s.max(-1, keepdims=True), sinks[None, :, None, None])
    p = np.exp(s - m)
    p /= p.sum(-1, keepdims=True) + np.exp(sinks[None, :, None, None] - m)
    o = attention(*(dev.alloc_from(x) for x in (q, k, v)), window=(left, right), softcap=cap, sinks=dev.alloc_from(sinks))
    _close(o.to_host(), p @ v.astype(np.float64), 2e-2)


def _attention_varlen(dev: Any) -> None:
    """attention_varlen, causal, over four packed sequences of 2 query heads on 1 kv head: one
    with three whole key blocks of the arch's tile (the two-stage K/V ring refilled) and a ragged
    one, one with two (the whole-block loop's last prefetch into the stage the masked loop copies
    to first), one within a key block, one with queries and no key (its rows 0); past a
    sequence's queries a program walks no key."""
    from kaio.ops_library import attention_varlen
    from kaio.ops_library.attention import choose_config

    rng = _rng()
    d, heads = 64, 2
    lens_q = (70, 40, 33, 16)
    bn = choose_config(max(lens_q), d, dev.arch).block_n
    lens_k = (3 * bn + 72, 2 * bn + 40, 50, 0)
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lens_q, lens_k))
    q = rng.standard_normal((int(cu_q[-1]), heads, d)).astype(np.float16)
    k, v = (rng.standard_normal((int(cu_k[-1]), 1, d)).astype(np.float16) for _ in range(2))
    want = np.zeros(q.shape)
    for b, (sq, sk) in enumerate(zip(lens_q, lens_k)):
        if not sk:
            continue
        qs = q[cu_q[b] : cu_q[b + 1]].astype(np.float64).transpose(1, 0, 2)  # (H, sq, D)
        ks, vs = (x[cu_k[b] : cu_k[b + 1], 0].astype(np.float64) for x in (k, v))
        s = qs @ ks.T / np.sqrt(d)
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        want[cu_q[b] : cu_q[b + 1]] = ((p / p.sum(-1, keepdims=True)) @ vs).transpose(1, 0, 2)
    got = attention_varlen(*(dev.alloc_from(x) for x in (q, k, v, cu_q, cu_k)), max(lens_q), max(lens_k), causal=True)
    _close(got.to_host(), want, 2e-2)


def _paged_attention(lens: tuple[int, ...], heads: int = 8) -> Case:
    """Paged decoding over a permuted block table, 2 kv heads: sequences of several key steps
    (the two-stage K/V ring refilled) and, past 8 key blocks, the split and its combine."""

    def run(dev: Any) -> None:
        from kaio.ops_library import paged_attention

        rng = _rng()
        b, hkv, d, block_size = len(lens), 2, 64, 16
        max_blocks = -(-max(lens) // block_size)
        q = rng.standard_normal((b, heads, d)).astype(np.float16)
        k, v = (rng.standard_normal((b * max_blocks, block_size, hkv, d)).astype(np.float16) for _ in range(2))
        table = rng.permutation(b * max_blocks).reshape(b, max_blocks).astype(np.int32)
        want = np.zeros((b, heads, d))
        for bi, n in enumerate(lens):
            j = np.arange(n)
            rows = table[bi, j // block_size] * block_size + j % block_size
            for h in range(heads):
                kh = h // (heads // hkv)
                keys, values = (x.reshape(-1, hkv, d)[rows, kh].astype(np.float64) for x in (k, v))
                s = keys @ q[bi, h].astype(np.float64) / np.sqrt(d)
                p = np.exp(s - s.max())
                want[bi, h] = p @ values / p.sum()
        got = paged_attention(*(dev.alloc_from(x) for x in (q, k, v, table, np.array(lens, np.int32))))
        _close(got.to_host(), want, 2e-2)

    return run


def _attention_dropout(dev: Any) -> None:
    """Forward with dropout: each probability kept iff ``rand(seed, ((b*H + h)*Sq + q)*Sk + k) > p``."""
    from kaio.ops_library import attention
    from kaio.random import rand

    from kaio.ops_library.attention import choose_config

    rng = _rng()
    sq, d, p = 40, 64, 0.2
    sk = max(72, 3 * choose_config(sq, d, dev.arch).block_n + 8)  # the K/V ring refilled, a ragged block
    q, k, v = (rng.standard_normal((1, 2, n, d)).astype(np.float16) for n in (sq, sk, sk))
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / np.sqrt(d)
    prob = np.exp(s - s.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    offsets = np.arange(2 * sq, dtype=np.int64).reshape(1, 2, sq, 1) * sk + np.arange(sk)
    keep = np.where(rand(3, offsets) > np.float32(p), 1 / (1 - p), 0.0)
    got = attention(*(dev.alloc_from(x) for x in (q, k, v)), dropout_p=p, seed=3)
    _close(got.to_host(), (prob * keep) @ v.astype(np.float64), 2e-2)


def _moe(dev: Any) -> None:
    """The router, the alignment and the MoE MLP (its grouped matmuls walking ragged groups,
    one expert empty), against numpy; then the gate/up product's specialization once more with
    an empty K loop.

    That second launch is for the barrier at the top of each tile. With f16 out, the product
    stages C through shared memory behind a barrier of its own, which already orders the last
    tile's ring reads before the next tile's first copies; what the top barrier alone orders is
    the last tile's staging reads before this tile's staging writes when the K loop runs no
    trip (with a trip, the loop's barrier comes between). No fused_moe launch has an empty K,
    and K = 0 is another specialization (the launch records a divisibility fact only for a
    nonzero integer). K = -32 is this one (32 divides it, as it divides 160) and the kernel
    reads it as empty (its bounds clamp at 0): every row's y is 0, the staging walked on every
    tile of one program. (That is sm_80's kernel. On sm_90a a second barrier lies between on
    every path, the one after the K loop's last wgmma.wait_group, so the two survive as a pair:
    see EXPLAINED.)"""
    from kaio.ops_library import fused_moe, moe_topk_softmax

    rng = _rng()
    t, d, f, e, k = 24, 160, 160, 4, 2  # K of both products: 5 tiles of 32, the 3-stage ring refilled
    logits = rng.standard_normal((t, e)).astype(np.float32)
    logits[:, 3] = -30.0  # expert 3 gets no token
    weights, ids = (a.to_host() for a in moe_topk_softmax(dev.alloc_from(logits), k))
    p = np.exp(logits - logits.max(-1, keepdims=True))
    top = np.argsort(-p, -1, kind="stable")[:, :k]
    assert (ids == top).all(), "router ids"
    picked = np.take_along_axis(p, top, -1)
    _close(weights, picked / picked.sum(-1, keepdims=True), 1e-5)
    x = rng.standard_normal((t, d)).astype(np.float16)
    w_gate_up = (rng.standard_normal((e, 2 * f, d)) / 8).astype(np.float16)
    w_down = (rng.standard_normal((e, d, f)) / 8).astype(np.float16)
    import sys

    with _one_persistent_program():
        got = fused_moe(dev.alloc_from(x), dev.alloc_from(w_gate_up), dev.alloc_from(w_down), dev.alloc_from(weights),
                        dev.alloc_from(ids)).to_host()  # fmt: skip
    want = np.zeros((t, d))
    for i in range(t):
        for j in range(k):
            gu = w_gate_up[ids[i, j]].astype(np.float64) @ x[i].astype(np.float64)
            h = gu[:f] / (1 + np.exp(-gu[:f])) * gu[f:]
            want[i] += weights[i, j] * (w_down[ids[i, j]].astype(np.float64) @ h)
    _close(got, want, 2e-2)
    from kaio.ops_library.operands import Operands

    gm = sys.modules["kaio.ops_library.grouped_matmul"]
    pairs, n = t * k, 2 * f  # the gate/up product's rows and columns
    offsets = np.concatenate([[0], np.cumsum(np.bincount(ids.ravel(), minlength=e))]).astype(np.int32)
    x0, w0 = dev.alloc_from(np.zeros((pairs, 0), np.float16)), dev.alloc_from(np.zeros((e, n, 0), np.float16))
    o0, y0 = dev.alloc_from(offsets), dev.alloc_from(np.full((pairs, n), np.nan, np.float16))
    ops = Operands("grouped_matmul", x0, w0, o0, y0, device=dev)
    operands = ops.take("x", x0), ops.take("w", w0), ops.take("expert_offsets", o0), ops.take("y", y0)
    gm.launch(dev, *operands, e, n, -gm.BLOCK[2], programs=1, w_nk=True)  # K = -BK: fused_moe's facts, no trip
    assert (y0.to_host() == 0).all(), "grouped_matmul with an empty K loop"


def _groups(sizes: tuple[int, ...]) -> np.ndarray:
    """Expert offsets (int32, E + 1) of groups of these row counts."""
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


def _grouped_reference(x: np.ndarray, weights: Any, offsets: np.ndarray) -> np.ndarray:
    """y[g] = x[g] @ weights[e] (float64) for each expert e's rows g; ``weights[e]`` (K, N)."""
    y = np.zeros((x.shape[0], weights[0].shape[1]))
    for e in range(len(offsets) - 1):
        rows = slice(offsets[e], offsets[e + 1])
        y[rows] = x[rows].astype(np.float64) @ np.asarray(weights[e], np.float64)
    return y


# groups walking the 3-stage ring of 32-row steps more than once (100 rows: 4 trips), one empty
# expert, and ragged ends; 130 rows in all
_GROUP_SIZES = (100, 0, 20, 10)


def _one_persistent_program() -> Any:
    """grouped_matmul's persistent grid as one program walking every tile: the next tile's ring
    copies come after the last tile's reads (with a program per SM, each has one tile)."""
    import sys

    import kaio.ops_library.grouped_matmul  # noqa: F401  (the module; the package's name is the op)

    return _constants(sys.modules["kaio.ops_library.grouped_matmul"], programs_for=lambda device, tiles: 1)


def _grouped_backward(dev: Any) -> None:
    """grouped_matmul_backward: dx through grouped_matmul, dw through the weight-gradient kernel
    (each expert's rows in 32-row steps, the group's end bounding them), both layouts of w."""
    from kaio.ops_library import grouped_matmul_backward

    rng = _rng()
    offsets = _groups(_GROUP_SIZES)
    # N = 320: dx's product has K = 320, 5 tiles of 64, so every ring stage (3 on sm_90a) is refilled
    x = rng.standard_normal((int(offsets[-1]), 72)).astype(np.float16)
    w = (rng.standard_normal((4, 72, 320)) / 8).astype(np.float16)  # (E, K, N)
    dy = rng.standard_normal((int(offsets[-1]), 320)).astype(np.float16)
    for w_nk in (False, True):
        given = np.ascontiguousarray(w.transpose(0, 2, 1)) if w_nk else w
        with _one_persistent_program():
            dx, dw = grouped_matmul_backward(*(dev.alloc_from(a) for a in (dy, x, given, offsets)), w_nk=w_nk)
        _close(dx.to_host(), _grouped_reference(dy, w.transpose(0, 2, 1), offsets), 2e-2)
        want = np.stack([x[offsets[e]:offsets[e + 1]].astype(np.float64).T @ dy[offsets[e]:offsets[e + 1]].astype(np.float64)
                         for e in range(4)])  # fmt: skip
        _close(dw.to_host(), want.transpose(0, 2, 1) if w_nk else want, 2e-2)


def _moe_backward(dev: Any) -> None:
    """fused_moe_backward and moe_topk_softmax_backward against numpy's chain rule, pair by pair."""
    from kaio.ops_library import fused_moe_backward, moe_topk_softmax, moe_topk_softmax_backward

    rng = _rng()
    # D = 160: the pair dot products walk two column trips of 128; F = 160: every product's K
    # (D, F or 2F) 160 or more, so the rings are refilled; expert 0 takes most tokens, so its
    # groups (the weight gradients' K) run several ring trips
    t, d, f, e, k = 40, 160, 160, 4, 2
    logits = rng.standard_normal((t, e)).astype(np.float32)
    logits[:, 0] += 2.0
    weights, ids = (a.to_host() for a in moe_topk_softmax(dev.alloc_from(logits), k))
    x = rng.standard_normal((t, d)).astype(np.float16)
    w_gate_up = (rng.standard_normal((e, 2 * f, d)) / 8).astype(np.float16)
    w_down = (rng.standard_normal((e, d, f)) / 8).astype(np.float16)
    dy = rng.standard_normal((t, d)).astype(np.float16)
    with _one_persistent_program():
        got = fused_moe_backward(*(dev.alloc_from(a) for a in (dy, x, w_gate_up, w_down, weights, ids)))
    dx, dwgu, dwd = np.zeros((t, d)), np.zeros(w_gate_up.shape), np.zeros(w_down.shape)
    dweights = np.zeros((t, k))
    for i in range(t):
        xi, dyi = x[i].astype(np.float64), dy[i].astype(np.float64)
        for j in range(k):
            ex, wt = ids[i, j], float(weights[i, j])
            gu = w_gate_up[ex].astype(np.float64) @ xi
            g, u = gu[:f], gu[f:]
            sg = _sigmoid(g)
            h = g * sg * u
            wd = w_down[ex].astype(np.float64)
            dweights[i, j] = dyi @ (wd @ h)
            dh = wt * (wd.T @ dyi)
            dgu = np.concatenate([dh * u * sg * (1 + g * (1 - sg)), dh * g * sg])
            dx[i] += w_gate_up[ex].astype(np.float64).T @ dgu
            dwgu[ex] += np.outer(dgu, xi)
            dwd[ex] += wt * np.outer(dyi, h)
    for name, g_, want in zip(("dx", "dw_gate_up", "dw_down", "dweights"), got, (dx, dwgu, dwd, dweights)):
        try:
            _close(g_.to_host(), want, 2e-2)
        except AssertionError as failed:
            raise AssertionError(f"{name}: {failed}") from None
    gw = rng.standard_normal((t, k)).astype(np.float32)
    dlogits = moe_topk_softmax_backward(dev.alloc_from(gw), dev.alloc_from(logits), dev.alloc_from(ids)).to_host()
    p = np.exp(logits - logits.max(-1, keepdims=True)).astype(np.float64)
    picked = np.take_along_axis(p, ids, -1)
    s = picked.sum(-1, keepdims=True)
    # w_j = p_j / s over the picked: d w_j / d logit_i = w_j ([i = j] - w_i) for picked i, 0 else
    wts = picked / s
    dpicked = wts * (gw - (gw * wts).sum(-1, keepdims=True))
    want = np.zeros((t, e))
    np.put_along_axis(want, ids, dpicked, -1)
    _close(dlogits, want, 1e-4)


def _quantized_experts(kind: str) -> Case:
    """The grouped forms of the quantized kernels (MoE experts as stored): GGUF Q8_0 blocks,
    GPTQ 4-bit words, e4m3 with per-column scales, over groups of _GROUP_SIZES rows."""

    def run(dev: Any) -> None:
        from kaio import ops_library as ol

        rng = _rng()
        offsets = _groups(_GROUP_SIZES)
        tokens, kdim, n, e = int(offsets[-1]), 256, 72, len(_GROUP_SIZES)
        x = rng.standard_normal((tokens, kdim)).astype(np.float16)
        if kind == "gguf":
            blocks = rng.integers(-127, 128, (e, n, kdim // 32, 34), dtype=np.int64).astype(np.uint8)
            blocks[..., :2] = np.full((e, n, kdim // 32, 1), 0.01, np.float16).view(np.uint8)
            q = blocks[..., 2:].view(np.int8).astype(np.float64).reshape(e, n, kdim) * 0.01
            got = ol.gguf_grouped_matmul(dev.alloc_from(x), dev.alloc_from(blocks.reshape(e, n, -1)), "Q8_0",
                                         dev.alloc_from(offsets))  # fmt: skip
            want = _grouped_reference(x, q.transpose(0, 2, 1), offsets)
        elif kind == "gptq":
            n = 64  # whole words of 8 output columns
            qweight = rng.integers(0, 2**32, (e, kdim // 8, n), dtype=np.uint64).astype(np.uint32).view(np.int32)
            scales = (rng.random((e, kdim // 128, n)) * 0.02 + 0.002).astype(np.float16)
            nib = np.stack([(qweight.view(np.uint32) >> (4 * j)) & 0xF for j in range(8)], axis=2).reshape(e, kdim, n)
            weight = (nib.astype(np.float64) - 8) * scales.astype(np.float64)[:, np.arange(kdim) // 128]
            got = ol.w4a16_grouped_matmul(*(dev.alloc_from(a) for a in (x, qweight, scales, offsets)), group_size=128)
            want = _grouped_reference(x, weight, offsets)
        else:  # fp8 e4m3 weights (E, K, N), a scale per expert and output column
            import ml_dtypes

            w = (rng.standard_normal((e, kdim, n)) * 4).astype(ml_dtypes.float8_e4m3fn)
            scale = (rng.random((e, n)) * 0.02 + 0.01).astype(np.float32)
            got = ol.grouped_matmul(*(dev.alloc_from(a) for a in (x, w, offsets)), w_scale=dev.alloc_from(scale))
            want = _grouped_reference(x, w.astype(np.float64) * scale[:, None, :], offsets)
        _close(got.to_host(), want, 2e-2)

    return run


def _sample(dev: Any) -> None:
    """sample: greedy (the first maximum of each row) and with temperature (the row's argmax of
    logits / T plus Gumbel noise from kaio.random at the offsets row * cols + col + offset); rows
    of 3000 logits, so several column trips, the row maxima reduced across the warps."""
    from kaio.ops_library import sample
    from kaio.random import rand

    rng = _rng()
    rows, cols = 6, 3000
    logits = rng.standard_normal((rows, cols)).astype(np.float32)
    logits[2, [17, 2500]] = 9.0  # a tie: the first wins
    got = sample(dev.alloc_from(logits)).to_host()
    want = logits.argmax(-1)
    assert (got == want).all(), f"greedy: {got.tolist()} != {want.tolist()}"
    counter = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols) + 5
    noisy = logits.astype(np.float64) / 0.7 - np.log(-np.log(rand(11, counter).astype(np.float64)))
    got = sample(dev.alloc_from(logits), temperature=0.7, seed=11, offset=5).to_host()
    want = noisy.argmax(-1)
    assert (got == want).all(), f"temperature 0.7: {got.tolist()} != {want.tolist()}"


def cases(arch: str) -> dict[str, Case]:
    """Every library kernel family on ``arch`` (the sm_90a matmul in each of its paths); on
    sm_90 (Hopper without its ``a`` features: the sm_80 kernels) the matmul family only."""
    from kaio.ops_library.matmul_config import WGMMA_CONFIGS, MatmulConfig

    small = MatmulConfig((32, 64, 32), (2, 2), 3)
    out: dict[str, Case] = {
        "matmul mma.sync cp.async": _matmul(small),
        "matmul split-K": _matmul(small.with_split_k(3), m=16, n=64, k=512),
        "matmul default config": _matmul(None),
    }
    if arch == "sm_90":
        return out
    if arch == "sm_90a":
        head = WGMMA_CONFIGS[4]  # 64x64x64, 4 warps, a 3-stage ring: K of 5 tiles refills every stage
        out |= {
            "matmul wgmma tma": _matmul(head, m=64, n=64, k=320),
            "matmul wgmma warp-specialised": _matmul(replace(head, warp_specialize=True), m=64, n=64, k=320),
            "matmul wgmma cp.async": _matmul(replace(head, tma=False), m=64, n=64, k=320),
            "matmul wgmma persistent": _matmul(replace(head, persistent=True), m=256, n=64, k=320),
            # two consumer warpgroups: one's C staging must wait for the other's last wgmma reads
            "matmul wgmma 2 warpgroups": _matmul(replace(WGMMA_CONFIGS[3], block=(128, 64, 32)), m=128, n=64, k=160),
            "matmul wgmma persistent 2 warpgroups": _matmul(replace(WGMMA_CONFIGS[7], block=(128, 64, 64)), m=256, n=64, k=320),
        }
    out |= {
        "attention": _attention(False),
        "attention causal": _attention(True),
        "attention dropout": _attention_dropout,
        "attention window softcap sinks": _attention_mods,
        "attention decode (split keys)": _attention(False, sq=1, sk=1100),
        "attention_varlen": _attention_varlen,
        "paged_attention": _paged_attention((70, 33)),
        "paged_attention (split keys)": _paged_attention((300, 20)),
        "attention backward (atomic dQ)": _attention(True, sq=70, sk=130, backward=True),
        "attention backward (deterministic dQ)": _attention(False, sq=70, sk=130, backward=True, deterministic=True),
        "rms_norm": _rows("rms_norm"),
        "layer_norm": _rows("layer_norm"),
        "softmax": _rows("softmax"),
        "cross_entropy": _rows("cross_entropy"),
        "gguf Q8_0 decode": _gguf(1),
        "gguf Q8_0 prefill": _gguf(40),
        "silu_and_mul": _elementwise("silu_and_mul"),
        "silu_and_mul_backward": _elementwise("silu_and_mul_backward"),
        "gelu_and_mul": _elementwise("gelu_and_mul"),
        "gelu_and_mul_backward": _elementwise("gelu_and_mul_backward"),
        "dropout": _elementwise("dropout"),
        "dropout_add": _elementwise("dropout_add"),
        "log_softmax": _row_backward("log_softmax"),
        "softmax_backward": _row_backward("softmax_backward"),
        "log_softmax_backward": _row_backward("log_softmax_backward"),
        "cross_entropy_backward": _row_backward("cross_entropy_backward"),
        "rms_norm_backward": _row_backward("rms_norm_backward"),
        "layer_norm_backward": _row_backward("layer_norm_backward"),
        "rope": _rope(False),
        "rope_backward": _rope(True),
        "matmul_backward": _matmul_backward,
        "int8 quantize + matmul": _quantized("int8"),
        "w4a16 matmul": _w4a16,
        "linear_cross_entropy fwd + bwd": _linear_cross_entropy,
        "moe router + fused_moe": _moe,
        "grouped_matmul_backward": _grouped_backward,
        "fused_moe_backward + router backward": _moe_backward,
        "gguf Q8_0 experts": _quantized_experts("gguf"),
        "gptq experts": _quantized_experts("gptq"),
        "sample": _sample,
    }
    if arch != "sm_80":  # fp8 needs sm_89
        out["fp8 quantize + matmul"] = _quantized("fp8")
        out["fp8 experts"] = _quantized_experts("fp8")
    return out


# Why each survivor of the campaign survives, per arch, by case name and Site.key (kernel,
# instruction, which occurrence of it in the kernel): the table shows it, and a survivor missing
# here fails `python -m kaio.tools.sync_mutants` and the slow campaign test. Each is either an
# instruction that orders nothing (for the compiler to stop emitting) or one this case's shape
# does not need and another case kills; none is a rule the simulator lacks.
_DISJOINT = ("redundant: it orders only accesses to disjoint bytes of one shared array ({}); the race check, which "
             "compares bytes, finds no pair it orders. ptx-sync-cleanup tells arrays apart, and the buffers laid out "
             "in one static array, not the bytes within one buffer (a ring's stages), those reached from the array's "
             "own start, or the dynamic array's buffers: a compiler follow-up")  # fmt: skip
_Q_BEFORE_RING = _DISJOINT.format("the diagonal block's Q tile stored before it, the K/V ring's first copies after it")
_X_RING_STAGES = _DISJOINT.format("one K step's ldmatrix reads of a stage of x's cp.async ring and of the dequantised "
                                  "W tile before it, the copies into the ring's next stage after it (that stage was "
                                  "read a step before, behind this step's barriers), and the next step's W stores come "
                                  "after that step's first barrier")  # fmt: skip
_DRAIN_SHAPE = ("needed, not in this shape: the drain after the whole-block key loop keeps its last prefetch from "
                "landing after the masked block's first copy into the same ring stage, and whether they share a stage "
                "depends on the number of trips; the 'attention' case gets a wrong result without it")

SCHEDULING_FENCES = {
    ("*", "*", "membar.cta;", -1): "not synchronisation: kaio emits membar.cta only as a ptxas scheduling fence in "
    "the shared writes of a map that reads global memory (relayout.FENCE_BYTES: without it ptxas hoists the map's "
    "loads into the K loop's tail and spills); no result depends on it, by design",
}  # fmt: skip

_ONE_WARPGROUP = ("redundant with one consumer warpgroup: what it orders is that warpgroup's own wgmma reads (of a ring "
                  "stage or the accumulator) before a refill or the C staging, and a wgmma and its wait_group are "
                  "warpgroup-wide (.sync.aligned over the 4 warps), so each warp's wait already covers them; with two "
                  "warpgroups it is needed ('matmul wgmma 2 warpgroups' and 'matmul wgmma persistent 2 warpgroups' kill "
                  "their own). A compiler follow-up: drop it when one warpgroup consumes")  # fmt: skip
_ASYNC_OPAQUE = ("redundant: the race check, which compares bytes, finds no pair it orders under three schedule seeds (the "
                 "barrier before the loop is covered by the loop's first barrier; the others by barriers of the loop "
                 "body). ptx-sync-cleanup keeps it because an mbarrier or TMA instruction lies beside it, which it "
                 "counts as touching everything (their shared addresses are mbarriers and tensor maps it does not "
                 "trace): a compiler follow-up")  # fmt: skip
_UNPLACED = ("redundant: the race check, which compares bytes, finds no pair it orders. ptx-sync-cleanup keeps it: "
             "an access it cannot place precisely (an address it does not trace, or a buffer's bytes reached from "
             "the start of the array they share, which it takes for the whole array) lies in the interval before or "
             "after it: a compiler follow-up")  # fmt: skip
_MASKED_ONE_TRIP = ("not exercised: the masked-block loop runs one trip in these shapes (at most one when not causal: fewer "
                    "than BN keys are left after the whole blocks), so its second ring stage (that mbarrier's init, the "
                    "prefetch's expect_tx and fence) is never used. A kernel follow-up: no ring for that loop when not "
                    "causal")  # fmt: skip
_ONE_OF_TWO = ("redundant while the masked-block loop runs one trip: the barrier before the loop and the one at the top "
               "of its trip order the same things (Q's stores, the mbarrier inits); the campaign deletes one at a time")  # fmt: skip
_SHORT_K = ("not exercised: this product's K (24 tokens, 64 hidden or 200 vocabulary entries) is shorter than the wgmma "
            "ring plus one stage, so the refill path (a later stage's mbarrier init and expect_tx, the wait that frees a "
            "stage, the barrier before the refill) never runs; the matmul cases (K = 320) kill it in their own "
            "specializations")  # fmt: skip

# grouped_matmul on sm_90a (the MoE case): 4 warps, one warpgroup consuming a 3-stage TMA ring
_MOE_BEFORE_TILES = ("redundant: it follows one thread's mbarrier inits and their proxy fence, and the barrier at the top "
                     "of each tile follows it with only register arithmetic and the group cursor's loads of the offsets "
                     "(global reads) between; that barrier orders the inits before any thread's use of an mbarrier, and "
                     "with no tile none is used. ptx-sync-cleanup keeps it because it counts an mbarrier init and a fence "
                     "as touching everything, global memory included: a compiler follow-up")  # fmt: skip
_MOE_WARPGROUP = ("redundant with grouped_matmul's one warpgroup: what it orders is the warpgroup's wgmma reads of a ring "
                  "stage, and each warp's mbarrier wait on that stage, before thread 0 refills the stage and re-arms its "
                  "mbarrier (in the next K step, or for the next tile's first copies); thread 0's own wgmma.wait_group "
                  "already orders them: a wgmma is one warpgroup-wide operation, issued by all 4 warps (each after its "
                  "mbarrier wait), and its wait_group returns only when its shared reads are done. Before the one at "
                  "the top of a tile lie also the last tile's global stores of y, which conflict with nothing after it "
                  "(the copies read x and w). A compiler follow-up: drop it when one warpgroup consumes")  # fmt: skip
_MOE_STAGING_PAIR = ("redundant while the other of the pair stands (the campaign deletes one at a time): with f16 out C goes "
                     "through a staging array, and both the barrier at the top of each tile and the one after the K loop's "
                     "last wgmma.wait_group (before the staging writes) lie between one tile's staging reads and the next "
                     "tile's staging writes, on every path, the K loop empty or not. The staging is the only array the "
                     "second one orders; the top one also orders the last tile's ring reads before this tile's first "
                     "copies, which the barrier between the staging writes and reads orders too (and, with one warpgroup, "
                     "thread 0's wgmma.wait_group 0). A compiler follow-up: keep one of the two")  # fmt: skip

# grouped_matmul in the MoE backward's products (dx, the gate/up and down gradients) on sm_80
_TOP_OF_TILE = ("needed only when a tile's K loop runs no trip: with f16 out, C is staged through shared memory behind "
                "barriers of its own, and the K loop's barrier lies between one tile's staging reads and the next "
                "tile's staging writes whenever the loop runs; with no trip this barrier alone orders them. Every "
                "product of this case has K > 0; 'moe router + fused_moe' launches the same kernel with an empty K "
                "loop and kills it there (its own specialization)")  # fmt: skip
_WGRAD_SHORT = ("not exercised: the weight gradients' K is an expert's rows, here at most 2 steps of 32, fewer than the "
                "3-stage ring plus one, so no stage is refilled; 'grouped_matmul_backward' (100 rows) kills it in its "
                "own specialization")  # fmt: skip
_WGRAD_WARPGROUP = ("redundant with the weight-gradient kernel's one warpgroup: it lies between a K step's "
                    "wgmma.wait_group 1 and every thread's cp.async refill of the stage the previous step's wgmma "
                    "read, and a wgmma is one warpgroup-wide operation (.sync.aligned over the 4 warps), so each "
                    "warp's wait_group 1 returns only when those reads are done (as in 'matmul wgmma cp.async'). A "
                    "compiler follow-up: drop it when one warpgroup consumes")  # fmt: skip
_WAIT_AFTER_WAITS = ("redundant: every product of the K loop ends with wgmma.wait_group 0, so after the loop no "
                     "wgmma is in flight (with no trip none was issued) and the epilogue's wait orders nothing. A "
                     "compiler follow-up: drop a wait_group 0 that another dominates with no wgmma between")  # fmt: skip
# w4a16's grouped kernel on sm_90a: each K step's 8 nibble products are 8 wgmmas into one
# accumulator, each reading A (x) and B (the dequantised W) from its own buffers, slices of one
# shared array that only the next K step rewrites
_NIBBLE_COMMIT = ("redundant one at a time: an uncommitted wgmma joins the next product's commit_group, whose wait_group "
                  "0 waits for it, and between the two only wgmmas touch the accumulator (A and B are shared-memory "
                  "descriptors) and their buffers are rewritten only in the next K step; the step's last commit, "
                  "before the epilogue, is killed")  # fmt: skip
_NIBBLE_WAIT = ("redundant one at a time: the next product's wait_group 0 (the epilogue's, for the last) waits for this "
                "wgmma too; chained wgmmas into one accumulator need no wait between them, and what the wait must "
                "precede, the rewrite of its A and B buffers, comes only in the next K step")  # fmt: skip
_NIBBLE_FENCE = ("redundant: wgmma.fence orders other instructions' accesses of a wgmma's registers (the accumulator, "
                 "register A operands) before it; A and B here are shared-memory descriptors and between two of a K "
                 "step's products only wgmmas touch the accumulator, so only the step's first fence orders anything "
                 "(and is killed)")  # fmt: skip
_FP8_WARPGROUP = ("redundant with grouped_matmul's one warpgroup: it orders the warpgroup's wgmma reads of the x ring stage "
                  "and of the converted W tile (a K step's, or the last tile's last) before thread 0's next TMA copy into "
                  "the stage and every thread's next conversion stores into the W tile; a wgmma is one warpgroup-wide "
                  "operation (.sync.aligned over the 4 warps), so each warp's wait_group 0 returns only when those "
                  "reads are done. A compiler follow-up: drop it when one warpgroup consumes")  # fmt: skip
# grouped_matmul's barriers on sm_90a by occurrence: with f16 out (a C staging array) four, as
# in the MoE forward; with f32 out three (no staging)
_MOE_STAGED = {0: _MOE_BEFORE_TILES, 1: _MOE_STAGING_PAIR, 2: _MOE_WARPGROUP, 3: _MOE_STAGING_PAIR}
_MOE_UNSTAGED = {0: _MOE_BEFORE_TILES, 1: _MOE_WARPGROUP, 2: _MOE_WARPGROUP}

# attention on sm_90a (128 query rows over two warpgroups, a Q tile and two-stage K/V TMA rings
# in dynamic shared memory), with both key loops running several trips
_BEFORE_KEY_LOOP = ("redundant: it follows the Q tile's stores and one thread's mbarrier inits (and proxy fence) for the "
                    "key loop after it, and the barrier at the top of that loop's every trip comes before any read of Q "
                    "(the wgmma) and any wait on those mbarriers; between the two only thread 0's first K/V copies "
                    "(into ring bytes, not Q's, on mbarriers it initialised itself, after its own fence) and every "
                    "thread's proxy fence after its Q stores. When the loop runs no trip the copies are not issued (the "
                    "loop's bound guards them) and nothing reads Q or the mbarriers. ptx-sync-cleanup keeps it because "
                    "it counts TMA copies and mbarrier instructions as touching everything, and Q and the rings are one "
                    "dynamic shared array to it: a compiler follow-up")  # fmt: skip
_O_INTO_Q = ("redundant: after the last key loop the output is staged in Q's bytes, each warpgroup writing only its own 64 "
             "query rows, which only its own wgmmas read (a warpgroup's A operand is its 64 rows), after its own "
             "wgmma.wait_group 0, which returns only when those warpgroup-wide reads are done; the other warpgroup "
             "reads other rows, and the masked loop's Q stores are ordered before by the barrier before that loop. "
             "ptx-sync-cleanup cannot tell the rows apart (one dynamic shared array) and counts a wgmma as touching "
             "everything: a compiler follow-up")  # fmt: skip

EXPLAINED: dict[str, dict[tuple[str, str, str, int], str]] = {
    "sm_80": {
        **SCHEDULING_FENCES,
        **{(case, "attention", "bar.sync 0;", 2): _Q_BEFORE_RING
           for case in ("attention", "attention causal", "attention dropout", "attention decode (split keys)",
                        "attention window softcap sinks", "attention_varlen")},  # fmt: skip
        ("attention decode (split keys)", "attention", "cp.async.wait_group 0;", 1): _DRAIN_SHAPE,
        **{(case, "gguf_matmul", "bar.sync 0;", 2): _X_RING_STAGES for case in ("gguf Q8_0 prefill", "gguf Q8_0 experts")},
        **{(case, kernel, "bar.sync 0;", 0): _TOP_OF_TILE
           for case, kernels in (("grouped_matmul_backward", ("grouped_matmul", "grouped_matmul#1")),
                                 ("fused_moe_backward + router backward", ("grouped_matmul", "grouped_matmul#2")))
           for kernel in kernels},  # fmt: skip
    },
    "sm_90": {},
    "sm_90a": {
        **SCHEDULING_FENCES,
        ("matmul wgmma tma", "matmul", "bar.sync 0;", 1): _ONE_WARPGROUP,
        ("matmul wgmma tma", "matmul", "bar.sync 0;", 2): _ONE_WARPGROUP,
        ("matmul wgmma warp-specialised", "matmul", "bar.sync 1, 128;", 0): _ONE_WARPGROUP,
        ("matmul wgmma cp.async", "matmul", "bar.sync 0;", 1): _ONE_WARPGROUP,
        ("matmul wgmma persistent", "persistent_matmul", "bar.sync 0;", 1): _ONE_WARPGROUP,
        ("matmul wgmma persistent", "persistent_matmul", "bar.sync 0;", 2): _ASYNC_OPAQUE,
        ("matmul wgmma persistent", "persistent_matmul", "bar.sync 0;", 3): _ASYNC_OPAQUE,
        ("matmul wgmma persistent 2 warpgroups", "persistent_matmul", "bar.sync 0;", 2): _ASYNC_OPAQUE,
        ("matmul wgmma persistent 2 warpgroups", "persistent_matmul", "bar.sync 0;", 3): _ASYNC_OPAQUE,
        **{(case, "attention", "bar.sync 0;", n): why
           for case in ("attention", "attention causal", "attention dropout", "attention decode (split keys)")
           for n, why in ((0, _ASYNC_OPAQUE), (3, _ASYNC_OPAQUE), (4, _ONE_OF_TWO))},  # fmt: skip
        **{(case, "attention", "bar.sync 0;", 5): _ASYNC_OPAQUE for case in ("attention", "attention causal", "attention dropout")},
        # varlen's kernel loads with cp.async, not TMA: Q and the K and V buffers are byte ranges
        # of one dynamic shared array
        ("attention_varlen", "attention", "bar.sync 0;", 2): _Q_BEFORE_RING,
        **{("attention window softcap sinks", "attention", "bar.sync 0;", n): why
           for n, why in ((0, _BEFORE_KEY_LOOP), (3, _BEFORE_KEY_LOOP), (5, _O_INTO_Q))},  # fmt: skip
        **{(case, "attention", text, 0): _MASKED_ONE_TRIP for case, text in (
            ("attention", "mbarrier.init.shared::cta.b64 [%r214], 1;"),
            ("attention", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r261], 32768;"),
            ("attention causal", "mbarrier.init.shared::cta.b64 [%r223], 1;"),
            ("attention causal", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r276], 32768;"),
            ("attention dropout", "mbarrier.init.shared::cta.b64 [%r5912], 1;"),
            ("attention dropout", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r5920], 32768;"),
            ("attention decode (split keys)", "mbarrier.init.shared::cta.b64 [%r319], 1;"),
            ("attention decode (split keys)", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r404], 4096;"),
        )},  # fmt: skip
        ("attention decode (split keys)", "attention", "fence.proxy.async.shared::cta;", 3): _MASKED_ONE_TRIP,
        ("attention backward (deterministic dQ)", "attention_dq", "bar.sync 0;", 0): _ASYNC_OPAQUE,
        ("attention backward (deterministic dQ)", "attention_dq", "bar.sync 0;", 1): _ASYNC_OPAQUE,
        **{("gguf Q8_0 prefill", "gguf_matmul", "bar.sync 0;", n): _ASYNC_OPAQUE for n in (1, 4, 5)},
        ("attention backward (atomic dQ)", "attention_dkdv", "bar.sync 0;", 0): _UNPLACED,
        **{(case, "scaled_matmul", "bar.sync 0;", n): _ASYNC_OPAQUE
           for case in ("int8 quantize + matmul", "fp8 quantize + matmul") for n in (1, 4)},  # fmt: skip
        **{("moe router + fused_moe", kernel, "bar.sync 0;", n): why for kernel, n, why in (
            ("grouped_matmul", 0, _MOE_BEFORE_TILES), ("grouped_matmul", 1, _MOE_STAGING_PAIR),
            ("grouped_matmul", 2, _MOE_WARPGROUP), ("grouped_matmul", 3, _MOE_STAGING_PAIR),
            ("grouped_matmul#1", 0, _MOE_BEFORE_TILES), ("grouped_matmul#1", 1, _MOE_WARPGROUP),
            ("grouped_matmul#1", 2, _MOE_WARPGROUP),
        )},  # fmt: skip
        **{(case, kernel, "bar.sync 0;", n): why for case, kernel, barriers in (
            ("grouped_matmul_backward", "grouped_matmul", _MOE_STAGED),
            ("grouped_matmul_backward", "grouped_matmul#1", _MOE_STAGED),
            ("fused_moe_backward + router backward", "grouped_matmul", _MOE_STAGED),
            ("fused_moe_backward + router backward", "grouped_matmul#1", _MOE_UNSTAGED),
            ("fused_moe_backward + router backward", "grouped_matmul#2", _MOE_STAGED),
            ("fused_moe_backward + router backward", "grouped_matmul#3", _MOE_UNSTAGED),
        ) for n, why in barriers.items()},  # fmt: skip
        ("grouped_matmul_backward", "grouped_wgrad", "bar.sync 0;", 1): _WGRAD_WARPGROUP,
        ("fused_moe_backward + router backward", "grouped_wgrad", "bar.sync 0;", 1): _WGRAD_WARPGROUP,
        ("fused_moe_backward + router backward", "grouped_wgrad", "wgmma.wait_group.sync.aligned 1;", 0): _WGRAD_SHORT,
        ("gguf Q8_0 experts", "gguf_matmul", "bar.sync 0;", 2): _UNPLACED,
        ("gguf Q8_0 experts", "gguf_matmul", "wgmma.wait_group.sync.aligned 0;", 1): _WAIT_AFTER_WAITS,
        **{("gptq experts", "w4a16_matmul", text, n): why for text, numbers, why in (
            ("wgmma.commit_group.sync.aligned;", range(7), _NIBBLE_COMMIT),
            ("wgmma.wait_group.sync.aligned 0;", range(8), _NIBBLE_WAIT),
            ("wgmma.wait_group.sync.aligned 0;", (8,), _WAIT_AFTER_WAITS),
            ("wgmma.fence.sync.aligned;", range(1, 8), _NIBBLE_FENCE),
            ("bar.sync 0;", (11,), _ONE_WARPGROUP),
        ) for n in numbers},  # fmt: skip
        **{("fp8 experts", "grouped_matmul", "bar.sync 0;", n): why
           for n, why in ((0, _MOE_BEFORE_TILES), (1, _FP8_WARPGROUP), (3, _FP8_WARPGROUP))},  # fmt: skip
        ("w4a16 matmul", "w4a16_matmul", "bar.sync 0;", 0): _ASYNC_OPAQUE,
        **{("linear_cross_entropy fwd + bwd", "matmul#2", text, n): _SHORT_K for text, n in (
            ("mbarrier.init.shared::cta.b64 [%r52], 1;", 0), ("mbarrier.init.shared::cta.b64 [%r53], 1;", 0),
            ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r57], 49152;", 0),
            ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r82], 49152;", 0),
            ("wgmma.wait_group.sync.aligned 1;", 0), ("bar.sync 0;", 1),
        )},  # fmt: skip
    },
}
