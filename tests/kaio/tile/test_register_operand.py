"""A dot operand computed in registers feeds the tensor cores from registers: a chained matmul
``(a @ b) @ c`` whose intermediate, cast to f16/bf16, stays in the accumulator layout and becomes
the second dot's A fragments (``mma.pack_a``), with no shared-memory round trip. Checked on the
simulator against numpy (fresh random inputs, poisoned outputs), and in the IR of each stage."""

from functools import cache

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.locations import print_with_locations
import kaio.tile as kt
from kaio import dtypes
from kaio.prelude import Array, MutArray, f32, i32

from .conftest import poisoned

TYPES = {"f16": (dtypes.f16, np.float16), "bf16": (dtypes.bf16, ml_dtypes.bfloat16)}


@cache
def chained_kernel(T):  # noqa: N803
    @kaio.tile_kernel(num_warps=4, num_stages=2)
    def chained(a: Array[T], b: Array[T], c: Array[T], out: MutArray[f32], m: i32, k: i32, n: i32, p: i32,
                BM: kaio.constexpr = 64, BK: kaio.constexpr = 32, BN: kaio.constexpr = 32,
                BP: kaio.constexpr = 32):  # fmt: skip
        """out = T(a @ b) @ c for one BM-row block: a (m, k), b (k, n <= BN), c (n, p <= BP)."""
        m0 = i32(kt.program_id(0)) * BM
        x = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, BK):
            x = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, 0), (BK, BN), (k, n)), x)
        y = kt.dot(T(x), kt.load(c, (0, 0), (BN, BP), (n, p)), kt.zeros((BM, BP), f32))
        kt.store(out, (m0, 0), y, (m, p))

    return chained


def run(dev, rng, dtype, m, k, n, p, **blocks):
    t, host = TYPES[dtype]
    a = rng.standard_normal((m, k)).astype(host)
    b = rng.standard_normal((k, n)).astype(host)
    c = rng.standard_normal((n, p)).astype(host)
    out = poisoned(dev, (m, p), np.float32)
    bm = blocks.get("BM", 64)
    chained_kernel(t)[(kaio.cdiv(m, bm),)](dev.alloc_from(a), dev.alloc_from(b), dev.alloc_from(c), out, m, k, n, p,
                                            **blocks)  # fmt: skip
    x = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).astype(host)  # the kernel's cast
    want = x.astype(np.float64) @ c.astype(np.float64)
    got = out.to_host().astype(np.float64)
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    assert not np.isnan(got).any()
    return err


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize(
    "m, k, n, p, blocks",
    [
        (64, 64, 32, 32, {}),  # warps [4, 1]: the intermediate stays in registers
        (100, 45, 20, 30, {}),  # ragged: masked loads, zero padding
        (32, 32, 64, 16, {"BM": 32, "BN": 64, "BP": 16}),  # a 32x64 tile splits its columns over warps: staged
    ],
    ids=["registers", "ragged", "staged"],
)
def test_chained_matmul_matches_numpy(dev, rng, dtype, m, k, n, p, blocks):
    err = run(dev, rng, dtype, m, k, n, p, **blocks)
    assert err < 1e-2, err


def stages_of(dtype: str, **blocks) -> dict[str, str]:
    return kaio.compile(chained_kernel(TYPES[dtype][0]), "sm_80", **blocks).stages


@pytest.mark.parametrize("dtype", list(TYPES))
def test_the_intermediate_never_touches_shared_memory(dtype):
    stages = stages_of(dtype)
    assert "smem.store" not in stages["promote-to-shared"]
    assert stages["promote-to-shared"].count("smem.alloc") == 3  # a, b and c tiles only
    mma_ir = stages["lower-to-mma-sync"]
    # the second dot: 16 rows per warp x 32 k columns = 2 A fragments, packed, not loaded
    assert mma_ir.count("mma.pack_a") == 2
    assert mma_ir.count("mma.load_a") == 2  # the first dot's A (BK = 32: two 16-deep steps)
    spec = TYPES[dtype][0].name
    assert "mov.b32" in stages["ptx"] and f"m16n8k16.row.col.f32.{spec}.{spec}.f32" in stages["ptx"]


def test_an_intermediate_whose_warps_split_its_columns_is_staged():
    stages = stages_of("f16", BM=32, BN=64, BP=16)
    assert "smem.store" in stages["promote-to-shared"]
    assert "mma.pack_a" not in stages["lower-to-mma-sync"]


def test_pack_a_round_trips_through_text_and_verifies_its_block():
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import VerifyException

    from kaio.dialect_registry import kaio_context

    text = stages_of("bf16")["lower-to-mma-sync"]
    assert print_with_locations(Parser(kaio_context(), text).parse_module()) == text
    bad = text.replace("{row = 0 : i64, col = 1 : i64}", "{row = 0 : i64, col = 2 : i64}", 1)  # K = 32: blocks 0, 1
    assert bad != text
    with pytest.raises(VerifyException, match=r"block \(0, 2\) is outside a warp's 16x32 rows"):
        Parser(kaio_context(), bad).parse_module().verify()
