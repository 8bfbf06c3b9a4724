"""paged_attention on the simulator against a float64 numpy reference that gathers each
sequence's keys through its block table. Fresh random inputs, a randomly permuted block table
(pages out of order, some never used), outputs poisoned with NaN before the launch; 2e-2 absolute
error on the outputs, 1e-3 on the logsumexp. Bad input: a kaio error naming the argument, before
any launch (``out`` left as it was). And the bytes the kernel loads: each cached byte a sequence
needs, once."""

import importlib
import math

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.errors import KaioTargetError, KaioTypeError, KaioValueError
from kaio.ops_library import paged_attention

paged_module = importlib.import_module("kaio.ops_library.paged_attention")  # the module (the package's name is the op)

BOUND = 2e-2
E4M3 = ml_dtypes.float8_e4m3fn


def reference(q, k_cache, v_cache, block_table, seq_lens, scale=None, window=None, softcap=None, sinks=None,
              k_scale=1.0, v_scale=1.0):  # fmt: skip
    """(out, lse) in float64: each query head's softmax over its sequence's keys (and its sink)."""
    b, h, d = q.shape
    num_blocks, block_size, hkv, _ = k_cache.shape
    keys = k_cache.astype(np.float64).reshape(num_blocks * block_size, hkv, d) * k_scale
    values = v_cache.astype(np.float64).reshape(num_blocks * block_size, hkv, d) * v_scale
    out, lse = np.zeros((b, h, d)), np.full((b, h), -np.inf)
    for bi in range(b):
        n = int(seq_lens[bi])
        j = np.arange(n)
        rows = block_table[bi, j // block_size] * block_size + j % block_size
        for hi in range(h):
            kh = hi // (h // hkv)
            s = keys[rows, kh] @ q[bi, hi].astype(np.float64) * (scale if scale is not None else 1 / math.sqrt(d))
            if softcap is not None:
                s = softcap * np.tanh(s / softcap)
            if window is not None:
                s = np.where(j >= n - 1 - window[0], s, -np.inf)
            logits = s if sinks is None else np.append(s, sinks[hi])
            m = logits.max(initial=-np.inf)
            if m == -np.inf:
                continue
            p = np.exp(logits - m)
            out[bi, hi] = p[:n] @ values[rows, kh] / p.sum()
            lse[bi, hi] = m + np.log(p.sum())
    return out, lse


def inputs(rng, b=2, h=8, hkv=2, d=64, block_size=16, lens=(37, 5), t=np.float16, cache_t=None, spare=3):
    """q, the caches, a permuted block table (``spare`` pages no sequence uses; entries past a
    sequence's blocks hold garbage) and the lengths."""
    max_blocks = max(1, max(-(-n // block_size) for n in lens))
    num_blocks = b * max_blocks + spare
    q = rng.standard_normal((b, h, d)).astype(t)
    caches = [rng.standard_normal((num_blocks, block_size, hkv, d)).astype(cache_t or t) for _ in range(2)]
    table = rng.permutation(num_blocks)[: b * max_blocks].reshape(b, max_blocks).astype(np.int32)
    for bi, n in enumerate(lens):  # unused entries: never read, so any value goes
        table[bi, -(-n // block_size):] = rng.integers(-(2**31), 2**31 - 1, max_blocks - -(-n // block_size))
    return q, *caches, table, np.array(lens, np.int32)


def check(dev, args, bound=BOUND, **kw):
    q = args[0]
    out = dev.alloc_from(np.full(q.shape, np.nan, q.dtype))
    on_device = {k: dev.alloc_from(x) if isinstance(x, np.ndarray) else x for k, x in kw.items()}
    got, lse = paged_attention(*(dev.alloc_from(x) for x in args), out=out, return_lse=True, device=dev, **on_device)
    got, lse = got.to_host().astype(np.float64), lse.to_host()
    want, want_lse = reference(*args, **kw)
    assert not np.isnan(got).any()
    assert float(np.abs(got - want).max()) <= bound
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = ~np.isneginf(want_lse)
    assert float(np.abs(lse[finite] - want_lse[finite]).max(initial=0)) <= 1e-3
    return got


@pytest.mark.parametrize("t", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize("h, hkv", [(8, 2), (4, 4)], ids=["gqa", "mha"])
def test_matches_the_reference(dev, rng, t, block_size, h, hkv):
    lens = (0, 1, 17, block_size, 2 * block_size + 3)
    check(dev, inputs(rng, b=len(lens), h=h, hkv=hkv, block_size=block_size, lens=lens, t=t))


@pytest.mark.parametrize("d", [16, 32, 40, 96, 128, 192, 256])
def test_head_dims(dev, rng, d):
    check(dev, inputs(rng, h=4, hkv=2, d=d, lens=(40, 3)))


def test_many_query_heads_per_kv_head_take_more_tile_rows(dev, rng):
    check(dev, inputs(rng, h=32, hkv=1, d=32, lens=(50, 9)))  # G 32: two warps of 16 rows


@pytest.mark.parametrize("h, lens", [(8, (300, 5)), (64, (300, 5)), (64, (3000,))], ids=["mma.sync", "wgmma", "wgmma split"])
def test_on_sm_90a(rng, h, lens):
    """Hopper's default target: 64 query heads of a kv head are a warpgroup's wgmma rows."""
    check(kaio.Device("sim", arch="sm_90a"), inputs(rng, b=len(lens), h=h, hkv=1, d=64, lens=lens))


def test_a_long_sequence_is_split_into_chunks_and_combined(dev, rng):
    args = inputs(rng, b=2, h=2, hkv=1, d=32, lens=(4096, 100))
    assert paged_module.decode_splits(4096, paged_module.config_for(paged_module.Sizes(2, 2, 1, 32, 1, 16, 1)).block_n) > 1
    check(dev, args)


def test_split_chunks_with_sinks_window_and_softcap(dev, rng):
    args = inputs(rng, b=3, h=4, hkv=2, d=32, block_size=32, lens=(3000, 0, 7))
    sinks = rng.standard_normal(4).astype(np.float32)
    check(dev, args, sinks=sinks, window=(1000, 4), softcap=3.0)  # a sink counted once over the chunks


def test_a_sliding_window_skips_the_keys_before_it(dev, rng):
    args = inputs(rng, b=3, lens=(300, 10, 71))
    check(dev, args, window=(70, 5))
    check(dev, args, window=(0, 0))  # the query's own key alone


def test_softcap_is_c_tanh_of_the_score_over_c(dev, rng):
    check(dev, inputs(rng, lens=(100, 10)), softcap=1.5, scale=0.7)


@pytest.mark.parametrize("scale", [-0.3, 0.0])
def test_negative_and_zero_scales(dev, rng, scale):
    check(dev, inputs(rng, lens=(100, 10)), scale=scale)


def test_sinks_join_the_softmax_denominator(dev, rng):
    args = inputs(rng, lens=(100, 0), t=ml_dtypes.bfloat16)
    check(dev, args, sinks=rng.standard_normal(8).astype(np.float32))  # length 0: all weight on the sink, 0 out


def test_fp8_caches_with_per_tensor_scales(rng):
    dev = kaio.Device("sim", arch="sm_89")  # e4m3 conversions are sm_89+
    # the reference dequantises the same e4m3 values (exact in f16), so only P's rounding to f16
    # and the f32 sums differ: the f16 bound holds, scaled by v_scale (the outputs' size)
    args = inputs(rng, b=3, lens=(150, 3, 0), cache_t=E4M3)
    check(dev, args, bound=BOUND * 2.0, k_scale=0.25, v_scale=2.0)
    check(dev, inputs(rng, lens=(600, 40), t=ml_dtypes.bfloat16, cache_t=E4M3, block_size=128),
          k_scale=0.5, v_scale=0.5, window=(300, 0))  # fmt: skip


def test_fp8_caches_need_sm_89(dev, rng):
    with pytest.raises(KaioTargetError, match="sm_89"):
        paged_attention(*inputs(rng, cache_t=E4M3), device=dev)


def test_numpy_in_numpy_out_and_the_default_scale(dev, rng):
    args = inputs(rng, lens=(20, 33))
    got = paged_attention(*args, device=dev)
    assert isinstance(got, np.ndarray) and got.dtype == np.float16 and got.shape == args[0].shape
    assert np.abs(got.astype(np.float64) - reference(*args)[0]).max() <= BOUND


def test_an_empty_block_table_gives_zeros(dev, rng):
    q, k, v, _, _ = inputs(rng, lens=(0, 0))
    sinks = rng.standard_normal(8).astype(np.float32)
    got, lse = paged_attention(q, k, v, np.zeros((2, 0), np.int32), np.zeros(2, np.int32), sinks=sinks,
                               return_lse=True, device=dev)  # fmt: skip
    assert not got.any() and np.allclose(lse, np.broadcast_to(sinks, (2, 8)), atol=1e-6)


def test_device_resident_tables_are_checked_too(dev, rng):
    args = list(inputs(rng, lens=(20, 33)))
    args[3][1, 0] = 10_000
    with pytest.raises(KaioTypeError, match="`block_table`"):
        paged_attention(*(dev.alloc_from(x) for x in args), device=dev)


# --------------------------------------------------------------------------- bad input


def changed(rng, **kw):
    """Valid arguments (b 2, h 8, hkv 2, d 64, block_size 16, 4 blocks a row) with some replaced."""
    q, k, v, table, lens = inputs(rng, lens=(37, 64))
    args = {"q": q, "k_cache": k, "v_cache": v, "block_table": table, "seq_lens": lens}
    return {**args, **kw}


BAD = [
    # (name, replacement(args) -> dict, error, the argument named)
    ("q 2-D", lambda a: {"q": a["q"][0]}, KaioTypeError, "`q`"),
    ("q f32", lambda a: {"q": a["q"].astype(np.float32)}, KaioTypeError, "`q`"),
    ("cache head dim", lambda a: {"k_cache": a["k_cache"][..., :32]}, KaioTypeError, "`k_cache`"),
    ("v shape", lambda a: {"v_cache": a["v_cache"][:-1]}, KaioTypeError, "`v_cache`"),
    ("cache f32", lambda a: {"k_cache": a["k_cache"].astype(np.float32), "v_cache": a["v_cache"].astype(np.float32)},
     KaioTypeError, "`k_cache`"),  # fmt: skip
    ("k fp8, v f16", lambda a: {"k_cache": a["k_cache"].astype(E4M3)}, KaioTypeError, "`k_cache`"),
    ("heads", lambda a: {"q": a["q"][:, :3]}, KaioTypeError, "heads"),
    ("head dim 44", lambda a: {"q": a["q"][..., :44], "k_cache": a["k_cache"][..., :44], "v_cache": a["v_cache"][..., :44]},
     KaioTypeError, "head dim"),  # fmt: skip
    ("block size 8", lambda a: {"k_cache": a["k_cache"][:, :8], "v_cache": a["v_cache"][:, :8]}, KaioTypeError, "block_size"),
    ("block size 24", lambda a: {"k_cache": a["k_cache"][:, :12].repeat(2, 1), "v_cache": a["v_cache"][:, :12].repeat(2, 1)},
     KaioTypeError, "block_size"),  # fmt: skip
    ("table i64", lambda a: {"block_table": a["block_table"].astype(np.int64)}, KaioTypeError, "`block_table`"),
    ("table batch", lambda a: {"block_table": a["block_table"][:1]}, KaioTypeError, "`block_table`"),
    ("table page -1", lambda a: {"block_table": np.where(np.arange(4) == 1, -1, a["block_table"]).astype(np.int32)},
     KaioTypeError, "`block_table`"),  # fmt: skip
    ("table page past the cache", lambda a: {"block_table": np.full_like(a["block_table"], 11)}, KaioTypeError, "`block_table`"),
    ("lens i64", lambda a: {"seq_lens": a["seq_lens"].astype(np.int64)}, KaioTypeError, "`seq_lens`"),
    ("lens shape", lambda a: {"seq_lens": a["seq_lens"][:1]}, KaioTypeError, "`seq_lens`"),
    ("lens negative", lambda a: {"seq_lens": np.array([-1, 3], np.int32)}, KaioTypeError, "`seq_lens`"),
    ("lens past the table", lambda a: {"seq_lens": np.array([65, 3], np.int32)}, KaioTypeError, "`seq_lens`"),
    ("sinks shape", lambda a: {"sinks": np.zeros(2, np.float32)}, KaioTypeError, "`sinks`"),
    ("sinks f16", lambda a: {"sinks": np.zeros(8, np.float16)}, KaioTypeError, "`sinks`"),
    ("window negative", lambda a: {"window": (-1, 0)}, KaioValueError, "`window`"),
    ("window not a pair", lambda a: {"window": 5}, KaioTypeError, "`window`"),
    ("softcap 0", lambda a: {"softcap": 0.0}, KaioValueError, "`softcap`"),
    ("softcap negative", lambda a: {"softcap": -2.0}, KaioValueError, "`softcap`"),
    ("softcap inf", lambda a: {"softcap": math.inf}, KaioValueError, "`softcap`"),
    ("scale inf", lambda a: {"scale": math.inf}, KaioValueError, "`scale`"),
    ("k_scale 0", lambda a: {"k_scale": 0.0}, KaioValueError, "`k_scale`"),
    ("v_scale nan", lambda a: {"v_scale": math.nan}, KaioValueError, "`v_scale`"),
    ("v_scale a string", lambda a: {"v_scale": "1"}, KaioTypeError, "`v_scale`"),
    ("return_lse", lambda a: {"return_lse": "no"}, KaioTypeError, "return_lse"),
]


@pytest.mark.parametrize("name, change, error, named", BAD, ids=[c[0] for c in BAD])
def test_bad_input_raises_naming_the_argument_and_writes_nothing(dev, rng, name, change, error, named):
    args = changed(rng)
    args = {**args, **change(args)}
    out = np.full((2, 8, 64), np.nan, np.float16)
    with pytest.raises(error, match=named.replace("(", r"\(")):
        paged_attention(**args, out=out, device=dev)
    assert np.isnan(out).all()


def test_out_of_range_entries_of_unused_blocks_are_never_read(dev, rng):
    args = changed(rng)
    table = args["block_table"]
    table[0, 3] = -5  # sequence 0 (37 keys) uses blocks 0..2
    out = np.full((2, 8, 64), np.nan, np.float16)
    paged_attention(**args, out=out, device=dev)
    assert np.abs(out.astype(np.float64) - reference(*args.values())[0]).max() <= BOUND


def test_a_wrong_out_is_refused(dev, rng):
    out = np.full((2, 8, 64), np.nan, np.float32)
    with pytest.raises(KaioTypeError, match="`out`"):
        paged_attention(**changed(rng), out=out, device=dev)
    assert np.isnan(out).all()


# --------------------------------------------------------------------------- bytes read


def cache_bytes_loaded(dev, monkeypatch, args, **kw):
    """Global-memory bytes the chunk kernel's K and V loads read (cp.async copies of f16/bf16
    tiles, byte loads of e4m3 ones; the q tile and the scalars load otherwise), on the
    simulator's count (each request's distinct bytes), and all its loads, with flash-decoding's combine made a
    no-op so that the latest launch report is the chunk kernel's."""
    from kaio.ops_library import attention_kernel

    class NoCombine:
        def launch(self, *args, **kw):
            pass

    monkeypatch.setattr(attention_kernel, "combine_tile_kernel", lambda t: NoCombine())
    with dev.profiling():
        paged_attention(*args, device=dev, **kw)
    rows = dev.last_launch_report.global_memory
    kv = sum(r.bytes for r in rows if r.text.lstrip("@%p0123456789! ").startswith(("cp.async", "ld.global.u8")))
    total = sum(r.bytes for r in rows if r.text.lstrip("@%p0123456789! ").startswith(("ld.", "cp.async")))
    return kv, total


@pytest.mark.parametrize("lens, cache", [((200, 37, 0), "f16"), ((1500, 700, 1), "f16"), ((900, 5), "e4m3")],
                         ids=["one chunk", "split", "fp8"])  # fmt: skip
def test_each_cached_byte_is_loaded_once_for_all_heads_of_its_kv_head(rng, monkeypatch, lens, cache):
    h, hkv, d = 8, 2, 64
    dev = kaio.Device("sim", arch="sm_89")
    args = inputs(rng, b=len(lens), h=h, hkv=hkv, d=d, lens=lens, cache_t=E4M3 if cache == "e4m3" else None)
    needed = 2 * sum(lens) * hkv * d * args[1].itemsize  # K and V
    kv, total = cache_bytes_loaded(dev, monkeypatch, args)
    assert needed <= kv <= 1.05 * needed
    splits = paged_module.decode_splits(max(lens), paged_module.config_for(paged_module.Sizes(2, h, hkv, d, 1, 16, 1)).block_n)
    small = args[0].nbytes * splits + 4 * len(lens) + args[3].nbytes  # q once a chunk, the lengths, the table
    assert total <= 1.05 * needed + small


def test_a_window_loads_only_the_blocks_it_sees(dev, rng, monkeypatch):
    lens = (1000, 50)
    args = inputs(rng, b=2, h=4, hkv=1, d=64, lens=lens)
    kv, _ = cache_bytes_loaded(dev, monkeypatch, args, window=(100, 0))
    seen = sum(min(n, 101) for n in lens)
    block = paged_module.config_for(paged_module.Sizes(2, 4, 1, 64, 1, 16, 1)).block_n
    assert kv <= 2 * (seen + 2 * block) * 64 * 2  # at most a key block more at each end


# --------------------------------------------------------------------------- generated code


@pytest.mark.parametrize("arch, cache, d, h, hkv, block_size", [
    ("sm_80", "f16", 128, 8, 2, 16), ("sm_80", "bf16", 128, 32, 4, 128), ("sm_90", "f16", 256, 8, 2, 16),
    ("sm_80", "f16", 64, 32, 1, 16), ("sm_89", "f8e4m3", 128, 8, 2, 16)])  # fmt: skip
def test_every_variant_assembles_without_spills_on_tensor_cores(arch, cache, d, h, hkv, block_size):
    """With every mod on, both output types (the split's f32 partials too); f16/bf16 K and V
    tiles arrive by cp.async (LDGSTS), e4m3 ones by register loads converted before the dot."""
    import re

    from kaio import dtypes
    from kaio.targets.ptx import toolchain

    if toolchain.find_ptxas() is None or toolchain.find_cuobjdump() is None or toolchain.find_nvdisasm() is None:
        pytest.skip("the nvidia-cuda-nvcc / cuobjdump / nvdisasm wheels are not installed")
    kv = dtypes.BY_NAME[cache]
    t = dtypes.bf16 if kv == dtypes.bf16 else dtypes.f16
    sizes = paged_module.Sizes(1, h, hkv, d, 1, block_size, 1)
    config = paged_module.config_for(sizes)
    for out in (t, dtypes.f32):
        compiled = kaio.compile(paged_module.kernel_for(t, kv, out, config), arch, BM=config.block_m, BN=config.block_n,
                                BD=paged_module.next_pow2(d), BLOCK_SIZE=block_size, WINDOW=True, SOFTCAP=True,
                                SINKS=True, __divisible__=(("D", 16),))  # fmt: skip
        report = toolchain.assemble(compiled.ptx, arch)
        assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0
        sass = toolchain.disassemble(report.cubin)
        assert re.search(r"\bHMMA\.16816", sass)
        assert bool(re.search(r"\bLDGSTS", sass)) == (kv != dtypes.BY_NAME["f8e4m3"])


def test_help_shows_how_to_call_it():
    import pydoc

    text = pydoc.render_doc(paged_attention, renderer=pydoc.plaintext)
    assert "paged_attention(q, k_cache, v_cache, block_table, seq_lens" in text and "k_scale" in text
