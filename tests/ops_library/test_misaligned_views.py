"""Arrays that start off a 16-byte boundary (torch views one element into their storage, or a
``__cuda_array_interface__`` into a kaio buffer): a tile kernel's launch specialises on each
array's base alignment, so attention's Q copy, its K/V cp.async or TMA loads, matmul's A/B/C
and a user kernel's synchronous tile copy move no more bytes per access than the address
proves. They give numpy's result on the simulator (which faults on any misaligned access);
the aligned specialisation keeps its 16-byte path; an oddly strided view is refused naming it.
Small shapes: the simulator is slow."""

import logging
import math

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import attention, matmul
from kaio.ops_library.attention import choose_config, configured_kernel
from kaio.prelude import Array, MutArray, f16, f32, i32

from .test_attention_sim import BOUND, reference

torch = pytest.importorskip("torch")

ARCHS = ["sm_80", "sm_90a"]


def offset_view(x: np.ndarray) -> "torch.Tensor":
    """``x`` as a torch tensor one element past the start of its storage (2 bytes for halves:
    never 4-, 8- or 16-byte aligned), whose first element is NaN."""
    storage = torch.full((x.size + 1,), math.nan, dtype=torch.from_numpy(x[:0]).dtype)
    view = storage[1:].view(*x.shape)
    view.copy_(torch.from_numpy(x))
    assert view.data_ptr() % 16 and view.storage_offset() * view.element_size() % 4
    return view


def device(arch: str) -> kaio.Device:
    return kaio.Device("sim", arch=arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("misaligned, causal", [("q", False), ("k", True), ("v", False), ("qkv", False), ("qkvo", True)])
def test_attention_on_views_off_a_16_byte_boundary(poison, rng, arch, misaligned, causal):
    b, h, sq, sk, d = 1, 2, 33, 40, 64
    arrays = {name: rng.standard_normal((b, h, s, d)).astype(np.float16) for name, s in (("q", sq), ("k", sk), ("v", sk))}
    args = [offset_view(x) if name in misaligned else torch.from_numpy(x) for name, x in arrays.items()]
    out = offset_view(np.full((b, h, sq, d), np.nan, np.float16)) if "o" in misaligned else None
    got = attention(*args, causal=causal, out=out, device=device(arch))
    want, _ = reference(*arrays.values(), causal)
    if out is not None:  # written in place, and not one byte before it
        assert got is out and torch.isnan(out._base[0])  # the storage's first element, poisoned
    got = got.double().numpy()
    assert not np.isnan(got).any()
    assert np.abs(got - want).max() <= BOUND


def _attention_compile(arch: str, facts: tuple[tuple[str, int], ...]):
    config = choose_config(64, 64)
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": 64, "CAUSAL": False, "HAS_LENS": False}
    return kaio.compile(configured_kernel(dtypes.f16, config), arch, __divisible__=(("D", 16), ("DV", 16), *facts), **meta)


def test_aligned_attention_keeps_its_16_byte_path_and_misaligned_q_narrows():
    aligned = _attention_compile("sm_80", ())
    assert "ld.global.v4" in aligned.ptx  # Q, synchronously
    assert "cp.async.cg.shared.global" in aligned.ptx and ", 16," in aligned.ptx  # K, V: 16-byte cp.async
    assert {p.name: p.align for p in aligned.params if p.is_array}.items() >= {"q": 16, "k": 16, "v": 16}.items()
    narrowed = _attention_compile("sm_80", (("q", 2),))
    assert {p.name: p.align for p in narrowed.params if p.is_array}.items() >= {"q": 2, "k": 16, "v": 16}.items()
    assert narrowed.ptx.count("ld.global.v4") < aligned.ptx.count("ld.global.v4")
    assert "ld.global.b16" in narrowed.ptx and "ld.global.b16" not in aligned.ptx


def test_misaligned_keys_fall_back_from_tma_to_cp_async_with_a_note(caplog):
    aligned = _attention_compile("sm_90a", ())
    assert {t.array for t in aligned.tensor_maps} == {"k", "v", "o"}
    assert {p.name: p.align for p in aligned.params if p.is_array}["k"] == 16  # a map's base, checked at launch
    with caplog.at_level(logging.DEBUG, logger="kaio.passes"):
        narrowed = _attention_compile("sm_90a", (("k", 4),))
    assert {t.array for t in narrowed.tensor_maps} == {"o"}  # the K loop keeps cp.async, V's too
    assert "cp.async.ca.shared.global" in narrowed.ptx  # K: 4-byte cp.async, its proven alignment
    assert "cp.async.cg.shared.global" in narrowed.ptx  # V: 16 bytes
    assert any("pipeline-tma" in r.message and "(4 bytes" in r.message for r in caplog.records)


@pytest.mark.parametrize("misaligned", ["a", "b", "out", "abc"])
def test_matmul_on_sm90a_with_views_off_a_16_byte_boundary(rng, misaligned):
    m, n, k = 40, 48, 72
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    poisoned = np.full((m, n), np.nan, np.float16)
    ta, tb = (offset_view(x) if name in misaligned else torch.from_numpy(x) for name, x in (("a", a), ("b", b)))
    out = offset_view(poisoned) if misaligned in ("out", "abc") else torch.from_numpy(poisoned)
    matmul(ta, tb, out, device=device("sm_90a"))
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = out.double().numpy()
    assert not np.isnan(got).any()
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-2


@kaio.tile_kernel(num_warps=1, num_stages=0)
def tile_product(a: Array[f16], b: Array[f16], c: MutArray[f32], n: i32):
    """One 32 x 32 product: with no cp.async ring, both operands reach shared memory through
    the synchronous tile copy (smem.copy)."""
    at = kt.load(a, (0, 0), (32, 32), (n, n))
    bt = kt.load(b, (0, 0), (32, 32), (n, n))
    kt.store(c, (0, 0), kt.dot(at, bt, kt.zeros((32, 32), f32)), (n, n))


def test_user_tile_copy_of_a_misaligned_view(rng):
    n = 32
    a, b = (rng.standard_normal((n, n)).astype(np.float16) for _ in range(2))
    want = a.astype(np.float64) @ b.astype(np.float64)
    dev = device("sm_80")
    out = torch.full((n, n), math.nan)
    tile_product.launch(dev, offset_view(a), torch.from_numpy(b), out, n, grid=(1,))
    assert np.abs(out.double().numpy() - want).max() <= 1e-3
    # the same array through __cuda_array_interface__, two bytes into a kaio buffer
    buffer = dev.alloc_from(np.concatenate([np.zeros(1, np.float16), a.ravel()]))
    out.fill_(math.nan)
    tile_product.launch(dev, _Interface(buffer, 2, (n, n)), torch.from_numpy(b), out, n, grid=(1,))
    assert np.abs(out.double().numpy() - want).max() <= 1e-3


def test_aligned_tile_copy_records_the_alignment_the_launch_checks():
    """The 16-byte copy of the aligned specialisation is declared (kaio.align), so an address
    the launch could not inspect is refused naming the parameter instead of faulting."""
    aligned = kaio.compile(tile_product, "sm_80", __divisible__=(("n", 16),))
    assert "ld.global.v4" in aligned.ptx
    assert {p.name: p.align for p in aligned.params if p.is_array}["a"] == 16
    narrowed = kaio.compile(tile_product, "sm_80", __divisible__=(("n", 16), ("a", 2)))
    assert {p.name: p.align for p in narrowed.params if p.is_array}["a"] == 2


def test_a_disk_cache_hit_keeps_the_alignment_the_launch_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE_DIR", str(tmp_path))
    from kaio import cache

    compiled = kaio.compile(tile_product, "sm_80", __divisible__=(("n", 8),))
    hit = cache.load(compiled.cache_key)
    assert hit is not None and hit.params == compiled.params and hit.params[0].align == 16


def test_a_user_promise_never_widens_what_the_launch_proved():
    @kaio.tile_kernel(num_warps=1, num_stages=0)
    def promised(a: Array[f16], b: Array[f16], c: MutArray[f32], n: i32):
        a = kt.multiple_of(a, 16)
        at = kt.load(a, (0, 0), (32, 32), (n, n))
        bt = kt.load(b, (0, 0), (32, 32), (n, n))
        kt.store(c, (0, 0), kt.dot(at, bt, kt.zeros((32, 32), f32)), (n, n))

    narrowed = kaio.compile(promised, "sm_80", __divisible__=(("n", 16), ("a", 2)))
    assert {p.name: p.align for p in narrowed.params if p.is_array}["a"] == 2


def test_oddly_strided_views_are_refused_naming_them():
    dev = device("sm_80")
    q = torch.randn(1, 16, 2, 64).half().transpose(1, 2)  # (b, h, s, d) over (b, s, h, d) storage
    k = torch.randn(1, 2, 16, 64).half()
    with pytest.raises(KaioTypeError, match="`q` is not contiguous"):
        attention(q, k, k, device=dev)
    with pytest.raises(KaioTypeError, match="`a` is not contiguous"):
        matmul(torch.randn(32, 64).half().t(), torch.randn(32, 16).half(), device=dev)


class _Interface:
    """A device array given only by ``__cuda_array_interface__`` (as CuPy or Numba hand one)."""

    def __init__(self, buffer, offset: int, shape: tuple[int, ...]):
        interface = dict(buffer.__cuda_array_interface__)
        interface["data"] = (buffer.ptr + offset, False)
        interface["shape"] = shape
        self.__cuda_array_interface__ = interface
