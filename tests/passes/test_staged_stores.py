"""Staged stores in any tile kernel: ``tile-layout`` converts a 16-bit mma accumulator tile to a
row-blocked layout before a store into a view proven 16-byte aligned; ``lower-to-ptx`` moves it
through shared memory that the K loop's operand ring no longer needs, and the store goes out as
``st.global.v4.b32``. Not where the alignment is unproven, nor for f32; a shared buffer still
live (a store inside the K loop) is not reused. Results against numpy, outputs poisoned."""

import re

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.compiled import ARG_FACTS
from kaio.dialect_registry import kaio_context
from kaio.dialects import tile
from kaio.dialects.tile_layout import BlockedLayout, MmaLayout, layout_of
from kaio.pipeline import Pipeline
from kaio.prelude import Array, MutArray, f16, f32, i32

ALIGNED = (("m", 16), ("n", 16), ("k", 16))


@kaio.tile_kernel(num_warps=4)
def dot_store(a: Array[f16], b: Array[f16], c: MutArray[f16], m: i32, n: i32, k: i32,
              BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 32):  # fmt: skip
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for k0 in range(0, k, BK):
        acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
    kt.store(c, (m0, n0), f16(acc), (m, n))


@kaio.tile_kernel(num_warps=4)
def running_sums(a: Array[f16], b: Array[f16], c: MutArray[f16], m: i32, n: i32, k: i32,
                 BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 32):  # fmt: skip
    """Stores the partial product after every K step (the last one stays): the store is in the
    K loop, where the operand ring is live."""
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for k0 in range(0, k, BK):
        acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
        kt.store(c, (m0, n0), f16(acc), (m, n))


def stores(ptx: str) -> set[str]:
    return set(re.findall(r"st\.global\.\S+", ptx))


def shared_bytes(compiled) -> int:  # type: ignore[no-untyped-def]
    static = sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", compiled.ptx))
    return static + compiled.dynamic_shared_bytes


def test_tile_layout_converts_the_stored_accumulator_to_rows_of_8_halves():
    def after_layout(divisible):  # type: ignore[no-untyped-def]
        stages = {}
        kaio.compile(dot_store, "sm_80", dump_ir=lambda stage, text: stages.__setitem__(stage, text), __divisible__=divisible)
        return next(text for stage, text in stages.items() if "tile-layout" in stage)

    staged = after_layout(ALIGNED)
    assert "tile.convert_layout" in staged and "#tile.mma<[2, 2]>> -> tensor<64x64xf16, #tile.blocked<[1, 8]" in staged
    assert "tile.convert_layout" not in after_layout(())  # n not known to be a multiple of 8


def test_the_layout_rule():
    from kaio.passes.tile_layout import staged_store_layout

    module = dot_store.build({ARG_FACTS: ALIGNED}).module  # type: ignore[attr-defined]
    for p in Pipeline.parse("fuse-tile-maps,tile-layout{staged_stores=false}").passes:
        p.apply(kaio_context(), module)
    (store,) = [o for o in module.walk() if isinstance(o, tile.StoreOp)]
    assert isinstance(layout_of(store.value.type), MmaLayout)
    staged = staged_store_layout(store, 4)
    assert isinstance(staged, BlockedLayout) and staged.params[0] == (1, 8)


def test_the_store_is_16_byte_vectors_through_the_dead_operand_ring():
    staged = kaio.compile(dot_store, "sm_80", __divisible__=ALIGNED)
    assert stores(staged.ptx) == {"st.global.v4.b32"}
    assert "ld.shared.v4.b32" in staged.ptx
    assert "membar.cta" not in staged.ptx  # the map reads no global memory: nothing to hold back
    ring = 3 * (64 * 32 + 32 * 64) * 2
    assert shared_bytes(staged) == ring  # the 64x64 staging tile (9 KiB) lives in the ring
    plain = kaio.compile(dot_store, "sm_80", __divisible__=())
    assert "st.global.v4.b32" not in plain.ptx and "ld.shared.v4.b32" not in plain.ptx


@kaio.tile_kernel(num_warps=4)
def dot_add_store(a: Array[f16], b: Array[f16], c: MutArray[f16], m: i32, n: i32, k: i32,
                  BM: kaio.constexpr = 64, BN: kaio.constexpr = 64, BK: kaio.constexpr = 32):  # fmt: skip
    """c += a @ b: the epilogue's map reads C."""
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for k0 in range(0, k, BK):
        acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
    kt.store(c, (m0, n0), f16(acc + f32(kt.load(c, (m0, n0), (BM, BN), (m, n)))), (m, n))


def test_only_a_streamed_map_that_reads_global_memory_fences_its_shared_writes():
    """membar.cta holds ptxas's hoisting of the map's global reads back (else they pile up in
    the K loop's tail and spill); it orders nothing the code needs, so a map without global
    reads is not fenced (see relayout.FENCE_BYTES)."""
    fused = kaio.compile(dot_add_store, "sm_80", __divisible__=ALIGNED)
    assert stores(fused.ptx) == {"st.global.v4.b32"}
    per_thread = 64 * 64 * 2 // 128  # bytes of the tile each thread writes to the staging tile
    assert fused.ptx.count("membar.cta") == per_thread // 64
    assert "membar.cta" not in kaio.compile(dot_store, "sm_80", __divisible__=ALIGNED).ptx


def test_a_store_inside_the_k_loop_does_not_reuse_the_live_ring():
    compiled = kaio.compile(running_sums, "sm_80", __divisible__=ALIGNED)
    assert stores(compiled.ptx) == {"st.global.v4.b32"}
    assert shared_bytes(compiled) == 3 * (64 * 32 + 32 * 64) * 2 + 64 * (64 + 8) * 2  # a scratch of its own


@pytest.mark.parametrize("kernel", [dot_store, running_sums], ids=["after-the-loop", "in-the-loop"])
@pytest.mark.parametrize(("m", "n", "k"), [(96, 128, 80), (70, 64, 33), (50, 70, 40)], ids=["aligned", "ragged-m", "unaligned-n"])
def test_results_match_numpy(dev, rng, kernel, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev.alloc_from(np.full((m, n), np.nan, np.float16))
    kernel[((m + 63) // 64, (n + 63) // 64)](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    got = c.to_host().astype(np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3


def test_a_buffer_touched_earlier_in_a_loop_around_the_op_is_live():
    """The ring's stages read before the store in the same K-loop iteration hold tiles the
    next iterations read: not dead at the store, though no later op in the body touches them."""
    from kaio.passes.to_ptx.shared_reuse import precedes

    module = running_sums.build({ARG_FACTS: ALIGNED}).module  # type: ignore[attr-defined]
    for p in Pipeline.parse("fuse-tile-maps,tile-layout,promote-to-shared,pipeline-cp-async{stages=3},lower-to-mma-sync").passes:
        p.apply(kaio_context(), module)
    (convert,) = [o for o in module.walk() if isinstance(o, tile.ConvertLayoutOp)]
    body = convert.parent_block()
    stages = [o for o in body.ops if o.name == "smem.stage" and o.is_before_in_block(convert)]
    assert stages and not any(precedes(s, convert) for s in stages)
