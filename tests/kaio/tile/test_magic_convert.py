"""Bit fields of words to f16/bf16 two lanes at a time by the magic-bias trick
(``passes/to_ptx/magic_convert.py``): bit-identical to ``cvt.rn`` (numpy's rounding of the exact
integer), with no ``cvt`` from an integer where the offset is proven small, and the plain
conversion kept where it is not."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.passes.to_ptx import half_pairs, magic_convert
from kaio.prelude import Array, MutArray, bf16, f16, i32

from .conftest import poisoned

TYPES = {"f16": (f16, np.float16), "bf16": (bf16, ml_dtypes.bfloat16)}
BLOCK = 512


def make_kernel(T):  # noqa: N803
    """Each output one kind of field (a fresh kernel: no compile cache shared between tests)."""

    @kaio.tile_kernel(num_warps=2)
    def fields(w: Array[i32], zw: Array[i32], o0: MutArray[T], o1: MutArray[T], o2: MutArray[T], o3: MutArray[T],
               o4: MutArray[T], o5: MutArray[T], o6: MutArray[T], o7: MutArray[T], n: i32):  # fmt: skip
        s = i32(kt.program_id(0)) * BLOCK
        x = kt.load(w, (s,), (BLOCK,), (n,))
        zs = kt.load(zw, (s,), (BLOCK,), (n,))
        zero = (zs & 15) + 1  # GPTQ's zero point: in [1, 16]
        kt.store(o0, (s,), T(((x >> 4) & 15) - zero), (n,))  # a nibble in its byte, less a zero point
        kt.store(o1, (s,), T((x >> 28) & 15), (n,))  # the top nibble (an arithmetic shift)
        kt.store(o2, (s,), T(((x >> 6) & 15) - 8), (n,))  # across two bytes; a constant offset
        kt.store(o3, (s,), T((x & 255) - 128), (n,))  # a byte (f16 only: wider than bf16's mantissa)
        kt.store(o4, (s,), T(((x >> 13) & 7) + zero), (n,))  # an added offset
        kt.store(o5, (s,), T(((x >> 9) & 1023) - 512), (n,))  # 10 bits (f16 only)
        kt.store(o6, (s,), T(((x >> 20) & 15) - zs), (n,))  # an offset nothing bounds: the plain cvt
        kt.store(o7, (s,), T((x >> 24) & 15) * T(zero), (n,))  # the field feeds packed arithmetic

    return fields


def reference(x: np.ndarray, zs: np.ndarray, dtype) -> list[np.ndarray]:
    x = x.astype(np.int64)
    zero = (zs.astype(np.int64) & 15) + 1
    ints = [((x >> 4) & 15) - zero, (x >> 28) & 15, ((x >> 6) & 15) - 8, (x & 255) - 128,
            ((x >> 13) & 7) + zero, ((x >> 9) & 1023) - 512, ((x >> 20) & 15) - zs.astype(np.int64)]  # fmt: skip
    # every field is exact in f32 (the unbounded one too), so one cast is the one rounding of
    # the exact integer
    out = [v.astype(np.float32).astype(dtype) for v in ints]
    out.append((((x >> 24) & 15).astype(np.float32).astype(dtype) * zero.astype(np.float32).astype(dtype)).astype(dtype))
    return out


def run(dev, kernel, x, zs, dtype):
    n = x.size
    outs = [poisoned(dev, (n,), dtype) for _ in range(8)]
    kernel[kaio.cdiv(n, BLOCK)](dev.alloc_from(x), dev.alloc_from(zs), *outs, n)
    return [o.to_host() for o in outs]


def inputs(rng, n):
    x = rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64).astype(np.int32)
    x[:16] = [0, -1, 0x0F0F0F0F, -0x0F0F0F10, 0x7FFFFFFF, -(1 << 31), 0x12345678, -0x12345678] * 2  # edge words
    zs = rng.integers(-(1 << 15), 1 << 15, n).astype(np.int32)  # f16's range holds every difference
    zs[:4] = [0, 15, -1, (1 << 15) - 1]
    return x, zs


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_fields_convert_exactly_without_cvt(monkeypatch, rng, arch, dtype):
    monkeypatch.setenv("KAIO_CACHE", "0")
    T, npt = TYPES[dtype]
    n = 1024 - 7  # a ragged end too
    x, zs = inputs(rng, n)
    kernel = make_kernel(T)
    text = kaio.compile(kernel, arch, __divisible__=(("n", 1),)).ptx
    magic = 0x64006400 if dtype == "f16" else 0x43004300
    assert f", {magic};" in text or f", {magic}," in text, "the magic exponent ORed in by a lop3"
    # a packed fma by 2^-s, or (fields shifted to bit 0) an add; bf16 adds by fma before sm_90
    assert "prmt.b32" in text and (f"fma.rn.{dtype}x2" in text or f"add.rn.{dtype}x2" in text)
    # the plain conversions left: the unbounded offset's field, and (bf16) the fields wider than
    # its mantissa; each zero point's own conversion, once per lane (ptxas merges the repeats)
    got = run(kaio.Device("sim", arch=arch), kernel, x, zs, npt)
    for i, (g, want) in enumerate(zip(got, reference(x, zs, npt), strict=True)):
        assert (g.view(np.uint16) == want.view(np.uint16)).all(), (i, np.flatnonzero(g.view(np.uint16) != want.view(np.uint16))[:5])


def test_the_conversions_replaced_per_field(monkeypatch):
    """Which fields take the trick: only where it is exact."""
    monkeypatch.setenv("KAIO_CACHE", "0")
    counts = {}
    for dtype in ("f16", "bf16"):
        text = kaio.compile(make_kernel(TYPES[dtype][0]), "sm_90a", __divisible__=(("n", 1),)).ptx
        counts[dtype] = text.count(f"cvt.rn.{dtype}.s32")
    monkeypatch.setattr(half_pairs, "ENABLED", False)
    plain = kaio.compile(make_kernel(f16), "sm_90a", __divisible__=(("n", 1),)).ptx.count("cvt.rn.f16.s32")
    # per register pair: the plain lowering converts 9 values per lane (8 fields, the zero point
    # of o7); with the trick, f16 keeps o6's two lanes and the zero points' (per lane, for
    # o0, o4 and o7); bf16 also keeps o3's and o5's
    assert counts["f16"] < plain / 2
    assert counts["bf16"] > counts["f16"]


def test_a_wrong_bias_is_caught(monkeypatch, rng):
    """Planted bug: the magic number's value one off (1025 for 0x6400's 1024) shows in the values."""
    monkeypatch.setenv("KAIO_CACHE", "0")
    monkeypatch.setitem(magic_convert._MAGIC, magic_convert.f16, (0x6400, 1025, 10, 2048))
    x, zs = inputs(rng, 512)
    got = run(kaio.Device("sim"), make_kernel(f16), x, zs, np.float16)
    same = [(g.view(np.uint16) == w.view(np.uint16)).all() for g, w in zip(got, reference(x, zs, np.float16), strict=True)]
    assert not same[2] and not same[3], same  # the fields at bit 0 of their lanes: the bias itself
