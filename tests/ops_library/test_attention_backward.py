"""kaio.ops_library.attention_backward on the simulator against float64 torch autograd of the same
math: f16 and bf16, causal or not (bottom-right aligned when Sq != Sk), GQA and MQA, kv_lens
(with a zero length), the logsumexp's gradient, dQ by atomics and the deterministic kernel
(bit-identical over two runs, and agreeing with the atomic path), every head dim's kernels
assembled by ptxas without spills, bad arguments named. Fresh random inputs, poisoned outputs."""

import math

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import attention, attention_backward

torch = pytest.importorskip("torch")

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
BOUND = {"f16": 1e-2, "bf16": 3e-2}  # max error relative to the gradient's largest element


def reference(q, k, v, do, causal, lens=None, dlse=None):
    """(dq, dk, dv) in float64 by torch autograd of softmax(q k^T * scale) v and its logsumexp."""
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    qt, kt, vt = (torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v))
    s = qt @ kt.repeat_interleave(h // hkv, 1).transpose(-1, -2) / math.sqrt(d)
    n = torch.tensor(lens if lens is not None else [sk] * b)[:, None, None, None]
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    visible = (j < n) & ((j <= i + n - sq) if causal else True)
    s = s.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None].masked_fill(lse[..., None].isinf(), 0.0)).masked_fill(~visible, 0.0)
    o = p @ vt.repeat_interleave(h // hkv, 1)
    loss = (o * torch.tensor(np.asarray(do, np.float64))).sum()
    if dlse is not None:
        loss = loss + (lse.masked_fill(lse.isinf(), 0.0) * torch.tensor(dlse, dtype=torch.float64)).sum()
    loss.backward()
    return qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def inputs(rng, b, h, hkv, sq, sk, d, dtype):
    t = TYPES[dtype]
    shape_q, shape_k = (b, h, sq, d), (b, hkv, sk, d)
    return [rng.standard_normal(s).astype(t) for s in (shape_q, shape_k, shape_k, shape_q)]


def run(dev, rng, b, h, hkv, sq, sk, d, dtype="f16", causal=False, lens=None, deterministic=False, with_dlse=False):
    q, k, v, do = inputs(rng, b, h, hkv, sq, sk, d, dtype)
    kw = {"kv_lens": np.asarray(lens, np.int32)} if lens is not None else {}
    o, lse = attention(q, k, v, causal=causal, return_lse=True, **kw)
    dlse = rng.standard_normal(lse.shape).astype(np.float32) if with_dlse else None
    got = attention_backward(q, k, v, o, lse, do, causal=causal, deterministic=deterministic, grad_lse=dlse, **kw)
    want = reference(q, k, v, do, causal, lens, dlse)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.dtype == q.dtype and g.shape == w.shape, name
        g = g.astype(np.float64)
        assert np.isfinite(g).all(), f"{name}: unwritten or non-finite elements"
        err = np.abs(g - w).max() / max(np.abs(w).max(), 1.0)
        assert err <= BOUND[dtype], (name, err)
    return got


@pytest.mark.usefixtures("poison")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq, sk", [(40, 40), (24, 70), (70, 24)], ids=["sq=sk", "sq<sk", "sq>sk"])
def test_causal_or_not_and_sequence_lengths(dev, rng, dtype, causal, sq, sk):
    run(dev, rng, 1, 2, 1, sq, sk, 32, dtype, causal)


@pytest.mark.usefixtures("poison")
@pytest.mark.parametrize("deterministic", [False, True])
def test_grouped_and_multi_query_heads_sum_over_the_group(dev, rng, deterministic):
    run(dev, rng, 1, 4, 2, 20, 33, 32, causal=True, deterministic=deterministic)  # GQA
    run(dev, rng, 1, 4, 1, 20, 33, 32, deterministic=deterministic)  # MQA


@pytest.mark.usefixtures("poison")
def test_kv_lens_with_a_zero_length_and_the_logsumexp_gradient(dev, rng):
    dq, dk, dv = run(dev, rng, 3, 2, 1, 16, 50, 64, causal=True, lens=[50, 0, 17], with_dlse=True)
    assert (dq[1] == 0).all() and (dk[1] == 0).all() and (dv[1] == 0).all()
    assert (dk[2, :, 17:] == 0).all()  # keys past the length get no gradient


@pytest.mark.usefixtures("poison")
@pytest.mark.parametrize("d", [8, 40, 96, 128, 192, 256])
def test_wide_head_dims(dev, rng, d):
    run(dev, rng, 1, 2, 1, 20, 24, d, "bf16", causal=True, deterministic=d == 128)


@pytest.mark.slow
@pytest.mark.parametrize("deterministic", [False, True])
def test_several_blocks_each_way(dev, rng, deterministic):
    run(dev, rng, 2, 4, 2, 130, 150, 64, causal=True, lens=[150, 77], deterministic=deterministic)


def test_deterministic_mode_is_bit_identical_and_agrees_with_atomics(dev, rng):
    q, k, v, do = inputs(rng, 1, 2, 1, 40, 48, 32, "f16")
    o, lse = attention(q, k, v, return_lse=True)
    first = attention_backward(q, k, v, o, lse, do, deterministic=True)
    second = attention_backward(q, k, v, o, lse, do, deterministic=True)
    atomic = attention_backward(q, k, v, o, lse, do)
    for a, b, c in zip(first, second, atomic):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
        assert np.abs(a.astype(np.float64) - c.astype(np.float64)).max() <= 2e-3 * max(np.abs(a.astype(np.float64)).max(), 1)


def test_buffers_and_torch_come_back_as_they_went_in(dev, rng):
    q, k, v, do = inputs(rng, 1, 2, 1, 16, 16, 32, "f16")
    o, lse = attention(q, k, v, return_lse=True)
    bufs = [dev.alloc_from(x) for x in (q, k, v, o, lse, do)]
    got = attention_backward(*bufs)
    assert all(isinstance(g, kaio.Buffer) for g in got)
    tensors = [torch.from_numpy(x) for x in (q, k, v, o, lse, do)]
    got_t = attention_backward(*tensors)
    for b, t in zip(got, got_t):
        assert isinstance(t, torch.Tensor) and np.array_equal(b.to_host(), t.numpy())


BAD = [
    ({"q": (1, 2, 8)}, "attention_backward: `q` must be 4-D"),
    ({"dtype_k": np.float32}, "must all be f16 or all bf16"),
    ({"out": (1, 2, 8, 16)}, r"`out` must be f16 of shape \(1, 2, 8, 32\)"),
    ({"grad_out": (1, 2, 9, 32)}, "`grad_out` must be f16 of shape"),
    ({"lse": (1, 2, 9)}, r"`lse` must be f32 of shape \(1, 2, 8\)"),
    ({"grad_lse": (1, 2)}, "`grad_lse` must be f32 of shape"),
    ({"kv_lens": np.array([9], np.int32)}, r"`kv_lens` must lie in 0..8"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_arguments_are_named_before_launch(dev, change, message):
    shapes = {"q": (1, 2, 8, 32), "k": (1, 2, 8, 32), "v": (1, 2, 8, 32), "out": (1, 2, 8, 32), "grad_out": (1, 2, 8, 32)}
    shapes.update({n: s for n, s in change.items() if n in shapes})
    arrays = {n: np.zeros(s, np.float16) for n, s in shapes.items()}
    if "dtype_k" in change:
        arrays["k"] = np.zeros(shapes["k"], change["dtype_k"])
    arrays["lse"] = np.zeros(change.get("lse", (1, 2, 8)), np.float32)
    kw = {n: change[n] for n in ("kv_lens",) if n in change}
    if "grad_lse" in change:
        kw["grad_lse"] = np.zeros(change["grad_lse"], np.float32)
    with pytest.raises(KaioTypeError, match=message):
        attention_backward(*(arrays[n] for n in ("q", "k", "v", "out", "lse", "grad_out")), **kw)


def test_flags_are_bools(dev):
    z = np.zeros((1, 1, 8, 32), np.float16)
    with pytest.raises(KaioTypeError, match="deterministic"):
        attention_backward(z, z, z, z, np.zeros((1, 1, 8), np.float32), z, deterministic="yes")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("d, lengths", [(32, "ragged"), (64, "ragged"), (128, "ragged"), (256, "ragged"),
                                        (128, "whole"), (256, "whole")])  # fmt: skip
def test_every_head_dim_assembles_without_spills(arch, d, lengths):
    """As a launch compiles them: it specializes on the power of two (up to MAX_DIVISOR) that
    divides the head dim and, for sequences of whole 64-row blocks, their lengths (the dQ
    kernel at head dims 128 and 256 fills the 128 registers ptxas gives it)."""
    from kaio.frontend.tile_kernel import MAX_DIVISOR
    from kaio.ops_library import attention_backward_kernel as kernels
    from kaio.ops_library.attention_backward import choose_backward_tiles, padded
    from kaio.targets.ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 not installed")
    t = choose_backward_tiles(d)
    divisor = min(d & -d, MAX_DIVISOR)
    facts = (("D", divisor), ("DV", divisor)) + ((("SQ", 64), ("SK", 64)) if lengths == "whole" else ())
    meta = {"BM": t.block_m, "BN": t.block_n, "BD": padded(d), "BDV": padded(d), "CAUSAL": 1, "HAS_LENS": True, "__divisible__": facts}
    for kernel, extra in ((kernels.dkdv_tile_kernel(dtypes.bf16, t.warps, t.stages), {"ATOMIC_DQ": True}),
                          (kernels.dq_tile_kernel(dtypes.bf16, t.warps, t.stages), {})):  # fmt: skip
        compiled = kaio.compile(kernel, arch, **meta, **extra)
        report = toolchain.assemble(compiled.ptx, arch)
        assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0, compiled.name
