"""create_block_mask and attention(..., block_mask=) on the simulator: the classes the device
gives each block against the same mask evaluated in numpy, the forward and the backward against
float64 references (causal, sliding window, document, prefix-LM, per-batch and per-head masks,
GQA, odd lengths, f16 and bf16, with a score_mod, softcap and sinks), the key bytes loaded (the
empty blocks never are), and every bad input. Outputs poisoned with NaN."""

import math

import ml_dtypes
import numpy as np
import pytest

from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import attention, attention_backward, create_block_mask
from kaio.ops_library.attention import AttentionConfig
from kaio.ops_library.block_mask import EMPTY, FULL, PARTIAL

from .test_attention_mods import assert_grads_close, inputs, reference, softcap_recipe, torch_reference_grads

BOUND = 2e-2


def causal(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx


def sliding(b, h, q_idx, kv_idx):
    return (kv_idx <= q_idx) & (kv_idx >= q_idx - 40)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < 20) | (kv_idx <= q_idx)


def document(b, h, q_idx, kv_idx, docs):
    return docs[q_idx] == docs[kv_idx]


def per_batch_and_head(b, h, q_idx, kv_idx):  # batch 1 sees half as far back; head 1 is causal only
    return (kv_idx <= q_idx) & ((h == 1) | (kv_idx >= q_idx - 30 + 15 * b))


def numpy_mask(name, docs=None):
    return {
        "causal": lambda b, h, i, j: j <= i,
        "sliding": lambda b, h, i, j: (j <= i) & (j >= i - 40),
        "prefix_lm": lambda b, h, i, j: (j < 20) | (j <= i),
        "document": lambda b, h, i, j: docs[i] == docs[j],
        "per_batch_and_head": lambda b, h, i, j: (j <= i) & ((h == 1) | (j >= i - 30 + 15 * b)),
    }[name]


MASKS = {"causal": causal, "sliding": sliding, "prefix_lm": prefix_lm, "document": document,
         "per_batch_and_head": per_batch_and_head}  # fmt: skip


def expected_classes(mask, bs, hs, sq, sk, block):
    bq, bkv = block
    out = np.zeros((bs, hs, math.ceil(sq / bq), math.ceil(sk / bkv)), np.int8)
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    for b in range(bs):
        for h in range(hs):
            seen = np.broadcast_to(mask(b, h, i, j), (sq, sk))
            for qb in range(out.shape[2]):
                for kb in range(out.shape[3]):
                    tile = seen[qb * bq : (qb + 1) * bq, kb * bkv : (kb + 1) * bkv]
                    whole = tile.shape[1] == bkv
                    out[b, h, qb, kb] = EMPTY if not tile.any() else FULL if tile.all() and whole else PARTIAL
    return out


def made(dev, name, b, h, sq, sk, docs=None, **kw):
    args = (dev.alloc_from(docs),) if name == "document" else ()
    return create_block_mask(MASKS[name], b, h, sq, sk, mod_args=args, device=dev, **kw)


@pytest.mark.parametrize("block", [None, (32, 64), 16])
@pytest.mark.parametrize("name", sorted(MASKS))
def test_the_device_classifies_each_block_as_numpy_does(dev, name, block):
    sq, sk = 150, 133
    docs = np.repeat(np.arange(4), [30, 70, 10, 40]).astype(np.int32)
    b, h = (2, 2) if name == "per_batch_and_head" else (None, None)
    mask = made(dev, name, b, h, sq, sk, docs, block=block)
    want = expected_classes(numpy_mask(name, docs), b or 1, h or 1, sq, sk, mask.block)
    assert np.array_equal(mask.to_dense(), want)
    assert mask.block == ((64, 32) if block is None else (block, block) if isinstance(block, int) else block)
    assert 0 < mask.sparsity() < 100


def check_forward(dev, qkv, want, **kw):
    q = qkv[0]
    out = dev.alloc_from(np.full(q.shape, np.nan, q.dtype))
    got, lse = attention(*(dev.alloc_from(x) for x in qkv), out=out, return_lse=True, **kw)
    got = got.to_host().astype(np.float64)
    assert not np.isnan(got).any()
    assert float(np.abs(got - want[0]).max()) <= BOUND
    finite = ~np.isneginf(want[1])
    assert np.array_equal(np.isneginf(lse.to_host()), ~finite)
    assert float(np.abs(lse.to_host()[finite] - want[1][finite]).max(initial=0)) <= 1e-3


@pytest.mark.parametrize("t", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", sorted(MASKS))
def test_attention_walks_the_listed_blocks(dev, rng, name, t):
    sq, sk = 150, 133
    docs = np.repeat(np.arange(4), [30, 70, 10, 40]).astype(np.int32)  # the documents of both the queries and keys
    bs = 2 if name == "per_batch_and_head" else 1
    qkv = inputs(rng, b=bs, h=2, hkv=1, sq=sq, sk=sk, t=t)  # GQA
    mask = made(dev, name, bs if name == "per_batch_and_head" else None, 2 if name == "per_batch_and_head" else None,
                sq, sk, docs)  # fmt: skip
    check_forward(dev, qkv, reference(*qkv, mask=numpy_mask(name, docs)), block_mask=mask)


def test_a_block_mask_with_a_score_mod_softcap_and_sinks(dev, rng):
    qkv = inputs(rng, h=2, hkv=2, sq=97, sk=97)
    sinks = np.array([0.5, -1.0], np.float32)
    mask = made(dev, "sliding", None, None, 97, 97)
    want = reference(*qkv, score=lambda s, *_: 2.0 * np.tanh(2.5 * np.tanh(s / 2.5) / 2.0), mask=numpy_mask("sliding"),
                     sinks=sinks)  # fmt: skip
    check_forward(dev, qkv, want, block_mask=mask, score_mod=softcap_recipe, softcap=2.0, sinks=dev.alloc_from(sinks))


def test_rows_that_see_no_block_get_zero_and_no_logsumexp(dev, rng):
    def late(b, h, q_idx, kv_idx):
        return q_idx >= 70

    qkv = inputs(rng, h=1, hkv=1, sq=130, sk=64)
    mask = create_block_mask(late, None, None, 130, 64, device=dev)
    check_forward(dev, qkv, reference(*qkv, mask=lambda b, h, i, j: np.broadcast_to(i >= 70, (130, 64))), block_mask=mask)


def test_the_block_mask_and_the_config_tiles(dev, rng):
    qkv = inputs(rng, h=1, hkv=1, sq=96, sk=96)
    want = reference(*qkv, mask=numpy_mask("causal"))
    check_forward(dev, qkv, want, block_mask=made(dev, "causal", None, None, 96, 96, block=(128, 64)),
                  config=AttentionConfig(64, 32, 4, 1, 2))  # fmt: skip
    small = made(dev, "causal", None, None, 96, 96, block=16)  # the rule's 64 x 32 tiles do not divide it
    check_forward(dev, qkv, want, block_mask=small)
    with pytest.raises(KaioValueError, match="do not divide the block_mask's blocks 16 x 16"):
        attention(*(dev.alloc_from(x) for x in qkv), block_mask=small, config=AttentionConfig(64, 32, 4, 1, 2))


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("name", ["causal", "document", "per_batch_and_head"])
def test_the_backward_walks_the_listed_blocks(dev, rng, name, deterministic):
    pytest.importorskip("torch")
    sq = sk = 100
    docs = np.repeat(np.arange(3), [30, 50, 20]).astype(np.int32)
    q, k, v = inputs(rng, h=2, hkv=1, sq=sq, sk=sk)
    do = rng.standard_normal(q.shape).astype(np.float16)
    per = name == "per_batch_and_head"
    mask = made(dev, name, 1 if per else None, 2 if per else None, sq, sk, docs)
    bq, bk, bv, bdo = (dev.alloc_from(x) for x in (q, k, v, do))
    o, lse = attention(bq, bk, bv, return_lse=True, block_mask=mask)
    got = attention_backward(bq, bk, bv, o, lse, bdo, block_mask=mask, deterministic=deterministic)
    m = numpy_mask(name, docs)
    hs = np.arange(2)[:, None, None]
    assert_grads_close(got, torch_reference_grads(q, k, v, do, mask=lambda i, j: m(0, hs, i, j)))


def key_bytes_loaded(dev, qkv, **kw):
    with dev.profiling():
        attention(*(dev.alloc_from(x) for x in qkv), **kw)
    rows = dev.last_launch_report.global_memory
    return sum(r.bytes for r in rows if "cp.async" in r.text)


def test_empty_blocks_are_never_loaded(dev, rng):
    sq = sk = 256
    qkv = inputs(rng, h=1, hkv=1, sq=sq, sk=sk)
    mask = made(dev, "sliding", None, None, sq, sk)
    walked = int((mask.to_dense() != EMPTY).sum())
    every = key_bytes_loaded(dev, qkv, mask_mod=sliding)  # no block mask: every block through the mask
    listed = key_bytes_loaded(dev, qkv, block_mask=mask)
    bq, bkv = mask.block
    q_bytes = math.ceil(sq / bq) * 2 * bq * 32 * 2  # each query block's Q tile, once per loop
    assert listed == walked * 2 * bkv * 32 * 2 + q_bytes  # K and V of each listed block
    assert listed < every


@pytest.mark.parametrize("kw, error, words", [
    ({"mask_mod": None}, KaioTypeError, "`mask_mod` is the function"),
    ({"B": 0}, KaioTypeError, "`B` must be a positive integer or None"),
    ({"Sq": -1}, KaioTypeError, "`Sq` must be an integer >= 0"),
    ({"block": 24}, KaioTypeError, "`block` is a power of two >= 16"),
    ({"block": (8, 16)}, KaioTypeError, "`block` is a power of two >= 16"),
    ({"mod_args": np.zeros(3, np.int32)}, KaioTypeError, "`mod_args` is a tuple"),
])  # fmt: skip
def test_bad_arguments_of_create_block_mask(dev, kw, error, words):
    args = {"mask_mod": causal, "B": None, "H": None, "Sq": 64, "Sk": 64} | {k: v for k, v in kw.items() if k != "block" and k != "mod_args"}
    extra = {k: v for k, v in kw.items() if k in ("block", "mod_args")}
    with pytest.raises(error, match=words):
        create_block_mask(args["mask_mod"], args["B"], args["H"], args["Sq"], args["Sk"], device=dev, **extra)


def test_a_mask_mod_of_the_wrong_arity_is_refused_by_create_block_mask(dev):
    with pytest.raises(KaioTypeError, match="must take 5 positional arguments"):
        create_block_mask(causal, None, None, 64, 64, mod_args=(np.zeros(64, np.int32),), device=dev)


@pytest.mark.parametrize("kw, words", [
    ({"causal": True}, "`causal` is not taken with it"),
    ({"window": (3, 3)}, "`window` is not taken with it"),
    ({"kv_lens": "lens"}, "`kv_lens` is not taken with it"),
    ({"mask_mod": sliding}, "is not the block mask's"),
    ({"mod_args": ("docs",)}, "`mod_args` with a block_mask are its own"),
    ({"block_mask": "not a mask"}, "`block_mask` is a BlockMask"),
    ({"block_mask": "other shape"}, "`block_mask` is made for (B, H, Sq, Sk) = (None, None, 64, 80)"),
])  # fmt: skip
def test_bad_uses_of_a_block_mask_are_refused_before_any_launch(dev, rng, kw, words):
    qkv = [dev.alloc_from(x) for x in inputs(rng, h=1, hkv=1, sq=64, sk=64)]
    mask = made(dev, "causal", None, None, 64, 64)
    kw = dict(kw)
    if kw.get("kv_lens") == "lens":
        kw["kv_lens"] = dev.alloc_from(np.array([64], np.int32))
    if kw.get("mod_args") == ("docs",):
        kw["mod_args"] = (dev.alloc_from(np.zeros(64, np.int32)),)
    if kw.get("block_mask") == "other shape":
        kw["block_mask"] = made(dev, "causal", None, None, 64, 80)
    out = dev.alloc_from(np.full((1, 1, 64, 32), np.nan, np.float16))
    with pytest.raises(KaioTypeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        attention(*qkv, out=out, **({"block_mask": mask} | kw))
    assert np.isnan(out.to_host()).all()


def torch_inputs(torch, h=2, hkv=1, sq=70, sk=70):
    return [torch.randn(1, n, s, 32, dtype=torch.float16, requires_grad=True) for n, s in ((h, sq), (hkv, sk), (hkv, sk))]


@pytest.mark.parametrize("name", ["causal", "document"])
def test_torch_autograd_through_a_block_mask(name):
    """torch.ops.kaio.attention carries the mask's lists and sizes, and saves them for the
    backward, which walks the same blocks: the gradients are the masked attention's."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(7)
    docs = np.repeat(np.arange(3), [25, 30, 15]).astype(np.int32)
    q, k, v = torch_inputs(torch)
    mod_args = (torch.from_numpy(docs),) if name == "document" else ()
    mask = create_block_mask(document if name == "document" else causal, None, None, 70, 70, mod_args=mod_args)
    out = attention(q, k, v, block_mask=mask)
    assert out.requires_grad
    do = torch.randn_like(out)
    out.backward(do)
    m = numpy_mask(name, docs)
    want = torch_reference_grads(*(x.detach().numpy() for x in (q, k, v, do)), mask=lambda i, j: m(0, 0, i, j))
    for x, w in zip((q, k, v), want, strict=True):
        g = x.grad.double().numpy()
        assert float(np.abs(g - w).max()) <= 3e-2 * max(1.0, float(np.abs(w).max()))


def test_the_torch_ops_walk_the_masks_lists_forward_and_backward():
    """A mask of causal's function with a sliding window's lists: what the kernels see is the
    function's mask on the listed blocks only, so both passes of the autograd graph must read
    the lists (a backward walking every block through the function alone gives causal's)."""
    torch = pytest.importorskip("torch")
    from dataclasses import replace

    torch.manual_seed(9)
    q, k, v = torch_inputs(torch, h=1, sq=128, sk=128)
    plain = create_block_mask(causal, None, None, 128, 128, block=32)
    band = create_block_mask(sliding, None, None, 128, 128, block=32)
    mixed = replace(plain, kv_lists=band.kv_lists, q_lists=band.q_lists, host_lists=band.host_lists, _on_torch={})
    out = attention(q, k, v, block_mask=mixed)
    do = torch.randn_like(out)
    out.backward(do)
    listed = band.to_dense()[0, 0] != EMPTY
    seen = lambda i, j: (j <= i) & listed[i // 32, j // 32]  # noqa: E731
    arrays = [x.detach().numpy() for x in (q, k, v)]
    want_out, _ = reference(*arrays, mask=lambda b, h, i, j: seen(i, j))
    assert np.abs(out.detach().double().numpy() - want_out).max() <= BOUND
    want = torch_reference_grads(*arrays, do.numpy(), mask=seen)
    for x, w in zip((q, k, v), want, strict=True):
        assert float(np.abs(x.grad.double().numpy() - w).max()) <= 3e-2 * max(1.0, float(np.abs(w).max()))


def test_torch_compile_opcheck_and_the_backward_op_with_a_block_mask():
    torch = pytest.importorskip("torch")
    from kaio.ops_library.attention_mods import mods_key

    torch.manual_seed(8)
    q, k, v = torch_inputs(torch, sq=40, sk=56)
    mask = create_block_mask(causal, None, None, 40, 56)
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, block_mask=mask), fullgraph=True, dynamic=True)
    traced = compiled(q, k, v)  # first: the mask's lists reach torch while tracing
    assert torch.equal(attention(q, k, v, block_mask=mask), traced)
    q, k, v = (x.detach() for x in (q, k, v))
    blocks = mask.for_torch(q).schema
    args = (q, k, v, False, None, None, None, 0.0, 0, -1, -1, 0.0, None, mods_key(None, causal), None, None, None, None, None, *blocks)
    torch.library.opcheck(torch.ops.kaio.attention.default, args, test_utils=("test_schema", "test_faketensor"))
    out, lse = torch.ops.kaio.attention(*args)
    do = torch.randn_like(out)
    grads = (q, k, v, out, lse, do, None, False, None, None, True, *args[7:])
    torch.library.opcheck(torch.ops.kaio.attention_backward.default, grads, test_utils=("test_schema", "test_faketensor"))
    # attention_backward with torch tensors goes through that op, and agrees with autograd's
    direct = attention_backward(q, k, v, out, lse, do, block_mask=mask, deterministic=True)
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    attention(qg, kg, vg, block_mask=mask).backward(do)
    for got, want in zip(direct, (qg.grad, kg.grad, vg.grad)):
        assert (got.double() - want.double()).abs().max() <= 1e-2 * max(want.abs().max().item(), 1.0)
    with pytest.raises(KaioTypeError, match=r"`block_mask` is made for \(B, H, Sq, Sk\) = \(None, None, 40, 56\)"):
        torch.ops.kaio.attention(q[:, :, :32].contiguous(), *args[1:])  # the fake and the op check the sizes


def test_a_block_mask_with_out_and_grad_is_refused_by_name():
    torch = pytest.importorskip("torch")
    q, k, v = torch_inputs(torch, h=1, sq=32, sk=32)
    mask = create_block_mask(causal, None, None, 32, 32)
    with pytest.raises(KaioTypeError, match="`out=` records no gradient"):
        attention(q, k, v, block_mask=mask, out=torch.empty(1, 1, 32, 32, dtype=torch.float16))


def test_the_backward_of_a_block_mask_with_a_softcap(dev, rng):
    """The dQ kernel's listed-block index and the softcap's tanh are two values of one trip."""
    pytest.importorskip("torch")
    import torch

    q, k, v = inputs(rng, h=1, hkv=1, sq=80, sk=80)
    do = rng.standard_normal(q.shape).astype(np.float16)
    mask = made(dev, "causal", None, None, 80, 80)
    bq, bk, bv, bdo = (dev.alloc_from(x) for x in (q, k, v, do))
    o, lse = attention(bq, bk, bv, return_lse=True, block_mask=mask, softcap=1.5)
    got = attention_backward(bq, bk, bv, o, lse, bdo, block_mask=mask, softcap=1.5, deterministic=True)
    want = torch_reference_grads(q, k, v, do, score=lambda s, *_: 1.5 * torch.tanh(s / 1.5), mask=lambda i, j: j <= i)
    assert_grads_close(got, want)
