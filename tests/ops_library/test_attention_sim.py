"""kaio.ops_library.attention on the simulator against a float64 numpy reference: every head
dim, f16 and bf16, causal or not, Sq == Sk, Sq < Sk, Sq > Sk, Sq = 1, GQA and MQA, kv_lens
(with a zero length), logsumexp. Fresh random inputs, poisoned outputs; unit-variance inputs,
2e-2 absolute error on the outputs."""

import math

import ml_dtypes
import numpy as np
import pytest

from kaio.errors import KaioTypeError
from kaio.ops_library import attention

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
BOUND = 2e-2
MEASURED: list[float] = []  # the worst error seen, printed at the end


def reference(q, k, v, causal=False, scale=None, lens=None):
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = np.zeros((b, h, sq, d))
    lse = np.full((b, h, sq), -np.inf)
    for bi in range(b):
        n = sk if lens is None else int(lens[bi])
        for hi in range(h):
            kh = hi // (h // hkv)
            s = q[bi, hi].astype(np.float64) @ k[bi, kh, :n].astype(np.float64).T * scale
            if causal:
                s = np.where(np.arange(n)[None, :] <= np.arange(sq)[:, None] + n - sq, s, -np.inf)
            for r in range(sq):
                if n == 0 or np.isneginf(s[r]).all():
                    continue
                m = s[r].max()
                p = np.exp(s[r] - m)
                out[bi, hi, r] = p @ v[bi, kh, :n].astype(np.float64) / p.sum()
                lse[bi, hi, r] = m + np.log(p.sum())
    return out, lse


def run(dev, rng, b, h, hkv, sq, sk, d, dtype="f16", causal=False, lens=None):
    t = TYPES[dtype]
    q = rng.standard_normal((b, h, sq, d)).astype(t)
    k = rng.standard_normal((b, hkv, sk, d)).astype(t)
    v = rng.standard_normal((b, hkv, sk, d)).astype(t)
    out = dev.alloc_from(np.full((b, h, sq, d), np.nan, dtype=t))
    kw = {"kv_lens": dev.alloc_from(np.asarray(lens, np.int32))} if lens is not None else {}
    got, lse = attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=causal, out=out, return_lse=True, **kw)
    want, want_lse = reference(q, k, v, causal, lens=lens)
    got = got.to_host().astype(np.float64)
    err = float(np.abs(got - want).max())
    MEASURED.append(err)
    assert not np.isnan(got).any()
    assert err <= BOUND, err
    lse = lse.to_host()
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = ~np.isneginf(want_lse)
    assert np.abs(lse[finite] - want_lse[finite]).max(initial=0) <= 1e-3
    return got


@pytest.mark.parametrize("d", [8, 16, 32, 40, 64, 80, 96, 128, 160, 192, 256])
def test_every_head_dim(dev, rng, d):
    run(dev, rng, 1, 2, 1, 40, 48, d)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq, sk", [(64, 64), (30, 90), (90, 30)], ids=["sq=sk", "sq<sk", "sq>sk"])
def test_causal_or_not_and_sequence_lengths(dev, rng, dtype, causal, sq, sk):
    run(dev, rng, 1, 2, 2, sq, sk, 64, dtype, causal)


@pytest.mark.parametrize("causal", [False, True])
def test_a_single_query_decodes(dev, rng, causal):
    run(dev, rng, 2, 4, 2, 1, 200, 64, causal=causal)


@pytest.mark.parametrize("sq", [1, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_decoding_splits_long_keys_and_combines(dev, rng, sq, causal):
    from kaio.ops_library.attention import choose_config, decode_splits

    assert decode_splits(sq, 700, choose_config(sq, 64).block_n) > 1  # the split path runs
    run(dev, rng, 2, 2, 1, sq, 700, 64, causal=causal, lens=[700, 333])


@pytest.mark.parametrize("d", [128, 256])
def test_wide_heads_causal_in_bf16_and_decoding(dev, rng, d):
    from kaio.ops_library.attention import choose_config, decode_splits

    run(dev, rng, 1, 2, 1, 33, 70, d, "bf16", causal=True)
    assert decode_splits(1, 300, choose_config(1, d).block_n) > 1
    run(dev, rng, 1, 2, 1, 1, 300, d, causal=True)


def test_grouped_and_multi_query_heads(dev, rng):
    run(dev, rng, 1, 8, 2, 20, 33, 32)  # GQA: 4 query heads per kv head
    run(dev, rng, 1, 4, 1, 20, 33, 32)  # MQA


def test_kv_lens_with_a_zero_length(dev, rng):
    got = run(dev, rng, 3, 2, 1, 8, 50, 32, lens=[50, 0, 17], causal=True)
    assert (got[1] == 0).all()  # no key at all: zeros, not NaN


def test_torch_and_numpy_come_back_as_they_went_in(rng):
    q = rng.standard_normal((1, 2, 16, 32)).astype(np.float16)
    o = attention(q, q, q)
    assert isinstance(o, np.ndarray) and o.shape == q.shape and o.dtype == np.float16
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(q)
    ot = attention(t, t, t, causal=True)
    assert isinstance(ot, torch.Tensor) and ot.dtype == torch.float16
    want, _ = reference(q, q, q, causal=True)
    assert np.abs(ot.double().numpy() - want).max() <= BOUND


BAD = [
    ({"q": (1, 2, 8)}, "`q` must be 4-D"),
    ({"k": (2, 1, 8, 32)}, r"`k` must have shape \(1, Hkv, Sk, 32\)"),
    ({"v": (1, 1, 9, 32)}, "`v` must have k's shape"),
    ({"q": (1, 3, 8, 32)}, "3 heads must be a multiple of k's and v's 2"),
    ({"q": (1, 2, 8, 44), "k": (1, 2, 8, 44), "v": (1, 2, 8, 44)}, "head dim must be a multiple of 8"),
    ({"q": (1, 2, 8, 264), "k": (1, 2, 8, 264), "v": (1, 2, 8, 264)}, "head dim must be a multiple of 8 from 8 to 256"),
    ({"dtype_k": np.float32}, "must all be f16 or all bf16"),
    ({"dtype": np.float32}, r"cast f32 inputs with \.half\(\) or \.bfloat16\(\)"),
    ({"kv_lens": np.array([9], np.int32)}, r"`kv_lens` must lie in 0..8"),
    ({"kv_lens": np.array([1, 2], np.int32)}, r"`kv_lens` must be int32 of shape \(1,\)"),
    ({"out": (1, 2, 8, 16)}, "`out` must be f16 of shape"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_arguments_are_named_before_launch(dev, change, message):
    shapes = {"q": (1, 2, 8, 32), "k": (1, 2, 8, 32), "v": (1, 2, 8, 32)}
    shapes.update({n: s for n, s in change.items() if n in shapes})
    arrays = {n: dev.alloc_from(np.zeros(s, change.get("dtype", np.float16))) for n, s in shapes.items()}
    if "dtype_k" in change:
        arrays["k"] = dev.alloc_from(np.zeros(shapes["k"], change["dtype_k"]))
    kw = {}
    if "kv_lens" in change:
        kw["kv_lens"] = change["kv_lens"]
    if "out" in change:
        kw["out"] = dev.alloc_from(np.zeros(change["out"], np.float16))
    with pytest.raises(KaioTypeError, match=message):
        attention(arrays["q"], arrays["k"], arrays["v"], **kw)


def test_measured_error_bound():
    if MEASURED:
        print(f"worst absolute error over {len(MEASURED)} runs: {max(MEASURED):.2e} (bound {BOUND})")


@pytest.mark.parametrize("scale", [-0.3, 0.0])
def test_negative_and_zero_scales(dev, rng, scale):
    """The kernel takes the row max of the unscaled scores times the scale: a negative scale
    takes the row minimum (NEG_SCALE), a zero one runs as 2**-100 (0 * -inf would be NaN)."""
    q, k, v = (rng.standard_normal((1, 2, s, 32)).astype(np.float16) for s in (20, 45, 45))
    for causal in (False, True):
        got = attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=causal, scale=scale).to_host()
        want, _ = reference(q, k, v, causal, scale=scale)
        assert np.abs(got.astype(np.float64) - want).max() <= BOUND


@pytest.mark.parametrize("causal", [False, True])
def test_the_two_key_loops_share_shared_memory_without_races(dev, rng, causal):
    """Whole key blocks (unmasked loop), then the diagonal and ragged ones (masked loop) in the
    same shared bytes: the race checker sees every access of both loops."""
    previous, dev.simulator.race_check = dev.simulator.race_check, True
    try:
        run(dev, rng, 1, 1, 1, 100, 150, 64, causal=causal)
    finally:
        dev.simulator.race_check = previous
