"""The tile stack, one pass at a time on the matmul tile kernel: IR in, IR out, each stage
valid on its own and printable/parsable."""

import pytest
from xdsl.dialects import scf

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f16, f32, i32
from xdsl.dialects.builtin import ModuleOp

from kaio import dtypes
from kaio.dialect_registry import kaio_context
from kaio.dialects.tile_layout import BlockedLayout, MmaLayout, layout_of
from kaio.errors import KaioCompileError
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.pipeline import Pipeline


def matmul_module(t=dtypes.f16, out=dtypes.f32, block=(128, 128, 32), divisible=(("m", 16), ("n", 16), ("k", 16))) -> ModuleOp:
    spec = MatmulKernel(t, out, (16, 16, 16), MatmulConfig(block=block), divisible=divisible)
    return spec.build({}).module


def run(module: ModuleOp, spec: str) -> ModuleOp:
    for p in Pipeline.parse(spec).passes:
        p.apply(kaio_context(), module)
        module.verify()
    return module


def names(module: ModuleOp) -> list[str]:
    return [op.name for op in module.walk()]


def ops_named(module: ModuleOp, name: str) -> list:
    return [o for o in module.walk() if o.name == name]


def test_fuse_tile_maps_makes_one_epilogue():
    before = names(matmul_module())
    after = names(run(matmul_module(), "fuse-tile-maps"))
    assert before.count("tile.map") > after.count("tile.map") == 1


def test_tile_layout_puts_the_accumulator_in_the_mma_layout_without_conversions():
    m = run(matmul_module(divisible=()), "fuse-tile-maps,tile-layout")
    (dot,) = ops_named(m, "tile.dot")
    assert layout_of(dot.result.type) == MmaLayout([2, 2])
    loads = [layout_of(o.result.type) for o in ops_named(m, "tile.load")]
    assert isinstance(loads[0], BlockedLayout) and isinstance(loads[1], BlockedLayout), loads
    # the C load of the epilogue is made straight in the accumulator's layout: nothing converts
    assert "tile.convert_layout" not in names(m)
    views = ops_named(m, "tile.view")
    assert all(v.align.value.data == 1 for v in views)  # nothing proves m, n, k multiples yet


def test_launch_facts_make_views_vectorise():
    spec = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), MatmulConfig(), divisible=(("k", 16), ("n", 8)))
    m = run(spec.build({}).module, "tile-layout")
    a_view, b_view = ops_named(m, "tile.view")[:2]
    assert a_view.align.value.data == 8 and b_view.align.value.data == 8


def test_tile_layout_rejects_warps_that_do_not_fit():
    with pytest.raises(KaioCompileError, match="do not fit"):
        run(matmul_module(block=(32, 32, 32)), "tile-layout{warps=4,4}")


def test_promote_to_shared_copies_then_synchronizes():
    m = run(matmul_module(), "tile-layout,promote-to-shared{layout=pad}")
    loop = next(o for o in m.walk() if isinstance(o, scf.ForOp))
    body = [o.name for o in loop.body.block.ops]
    dot = body.index("tile.dot")
    assert [n for n in body[:dot] if n in ("smem.copy", "kernel.barrier", "tile.load")] == [
        "smem.copy", "smem.copy", "kernel.barrier",
    ]  # fmt: skip
    assert body[dot + 1] == "kernel.barrier"
    allocs = ops_named(m, "smem.alloc")
    assert {str(a.result.type) for a in allocs} == {
        "!smem.buffer<128x32xf16, #smem.layout<pad 8>>",
        "!smem.buffer<32x128xf16, #smem.layout<pad 8>>",
    }


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipeline_cp_async_rings_and_prologue(stages):
    m = run(matmul_module(), f"tile-layout,promote-to-shared,pipeline-cp-async{{stages={stages}}}")
    ops = names(m)
    assert "smem.copy" not in ops
    # (stages - 1) groups in the prologue, one per iteration
    assert ops.count("cpasync.commit") == stages
    assert ops.count("cpasync.copy") == 2 * stages
    waits = [o.pending.value.data for o in ops_named(m, "cpasync.wait")]
    assert waits == [stages - 2, 0]
    assert {o.result.type.stages for o in ops_named(m, "smem.alloc")} == {stages}
    loop = next(o for o in m.walk() if isinstance(o, scf.ForOp))
    assert len(loop.iter_args) == 3  # accumulator, read stage, write stage
    # the copy barriers gave way to the ring's one barrier per iteration
    assert [o.name for o in loop.body.block.ops].count("kernel.barrier") == 1


def test_pipeline_needs_two_stages():
    with pytest.raises(KaioCompileError, match="at least 2"):
        run(matmul_module(), "tile-layout,promote-to-shared,pipeline-cp-async{stages=1}")


def test_lower_to_mma_sync_unrolls_fragments():
    m = run(matmul_module(), "tile-layout,promote-to-shared,pipeline-cp-async,lower-to-mma-sync")
    ops = names(m)
    # warp tile 64x64, BK=32: 2 k-steps x (4 A loads, 4 B pair loads, 4x8 mma)
    assert ops.count("mma.load_a") == 8 and ops.count("mma.load_b") == 8
    assert ops.count("mma.mma") == 64
    assert ops.count("mma.split") == 1 and ops.count("mma.join") == 1
    assert "tile.dot" not in ops


def test_a_warp_owning_8_columns_loads_single_b_fragments():
    m = run(matmul_module(block=(32, 16, 32)), "tile-layout{warps=2,2},promote-to-shared,lower-to-mma-sync")
    loads = ops_named(m, "mma.load_b")
    assert loads and all(len(o.results) == 1 for o in loads)  # ldmatrix.x2: one 16x8 fragment
    run(m, "lower-to-ptx")
    assert "ldmatrix sync.aligned.m8n8.x2" in str(m)


def test_lower_to_mma_sync_explains_missing_shared_stage():
    with pytest.raises(KaioCompileError, match="promote-to-shared"):
        run(matmul_module(), "tile-layout,lower-to-mma-sync")


def test_f32_dots_stay_for_the_fma_rule():
    m = run(matmul_module(dtypes.f32, block=(64, 64, 16)), "tile-layout,promote-to-shared,lower-to-mma-sync")
    (dot,) = ops_named(m, "tile.dot")
    assert isinstance(layout_of(dot.result.type), BlockedLayout)
    run(m, "lower-to-ptx")
    assert "tile.dot" not in names(m)


def test_every_stage_round_trips_through_text():
    from xdsl.parser import Parser

    m = matmul_module()
    for spec in ["fuse-tile-maps", "tile-layout", "promote-to-shared", "pipeline-cp-async", "lower-to-mma-sync", "lower-to-ptx"]:
        run(m, spec)
        text = str(m)
        assert str(Parser(kaio_context(), text).parse_module()) == text



def test_pipeline_cp_async_reads_a_table_entry_for_a_trip_only_if_it_runs():
    """The ring's prologue and its copy ahead compute the copies' addresses for trips that may
    not run; a scalar load among them (a page table) is read then only inside ``scf.if``, so
    a table of exactly the loop's entries (or none) is never read past its end: the simulator
    faults on such a read."""
    import numpy as np

    import kaio
    import kaio.tile as kt
    from kaio.prelude import Array, MutArray, f16, f32, i32

    @kaio.tile_kernel(num_warps=1, num_stages=2)
    def paged_products(a: Array[f16], pages: Array[f16], table: Array[i32], out: MutArray[f32], n: i32,
                       B: kaio.constexpr = 16):  # fmt: skip
        at = kt.load(a, (0, 0), (B, B), (B, B))
        acc = kt.zeros((B, B), f32)
        for j in range(0, n * B, B):
            row = table[j // B] * B
            acc = kt.dot(at, kt.load(pages, (row, 0), (B, B), (row + n * B - j, B)), acc)
        kt.store(out, (0, 0), acc, (B, B))

    rng = np.random.default_rng()
    a = rng.standard_normal((16, 16)).astype(np.float16)
    pages = rng.standard_normal((5 * 16, 16)).astype(np.float16)
    dev = kaio.Device("sim")
    for table in (np.array([3, 0, 4], np.int32), np.zeros(0, np.int32)):
        out = dev.alloc_from(np.full((16, 16), np.nan, np.float32))
        paged_products.launch(dev, dev.alloc_from(a), dev.alloc_from(pages), dev.alloc_from(table), out, len(table), grid=(1,))
        want = sum((a.astype(np.float64) @ pages[p * 16 : p * 16 + 16].astype(np.float64) for p in table), np.zeros((16, 16)))
        np.testing.assert_allclose(out.to_host(), want, atol=1e-3, rtol=1e-3)
    stage = kaio.compile(paged_products, "sm_80").stages["pipeline-cp-async"]
    assert stage.count("kernel.load") == 3  # the loop's own, and the guarded ones of the prologue and the copy ahead
    assert stage.count("scf.if") == 2


@kaio.device
def page_of(table, j: i32, first: i32) -> i32:  # type: ignore[no-untyped-def]
    if j >= first:
        return table[j]
    return table[0]


@kaio.tile_kernel(num_warps=1, num_stages=2)
def branchy_paged_products(a: Array[f16], pages: Array[f16], table: Array[i32], out: MutArray[f32], n: i32,
                           B: kaio.constexpr = 16):  # fmt: skip
    at = kt.load(a, (0, 0), (B, B), (B, B))
    acc = kt.zeros((B, B), f32)
    for j in range(0, n):
        row = page_of(table, j, 0) * B
        acc = kt.dot(at, kt.load(pages, (row, 0), (B, B), (row + B, B)), acc)
    kt.store(out, (0, 0), acc, (B, B))


def test_pipeline_cp_async_clones_what_a_device_functions_branches_read():
    """A copy's address from a device function with an early return is an ``scf.if`` whose
    branches read values of the body (another ``scf.if``'s result): the ring's clones for the
    prologue and the trip ahead need those too (they once yielded the loop body's own value,
    an internal error), and the table loads inside run only for trips that run."""
    import numpy as np

    import kaio

    rng = np.random.default_rng()
    a = rng.standard_normal((16, 16)).astype(np.float16)
    pages = rng.standard_normal((5 * 16, 16)).astype(np.float16)
    dev = kaio.Device("sim")
    for table in (np.array([3, 0, 4], np.int32), np.zeros(0, np.int32)):
        out = dev.alloc_from(np.full((16, 16), np.nan, np.float32))
        branchy_paged_products.launch(dev, dev.alloc_from(a), dev.alloc_from(pages), dev.alloc_from(table), out, len(table), grid=(1,))
        want = sum((a.astype(np.float64) @ pages[p * 16 : p * 16 + 16].astype(np.float64) for p in table), np.zeros((16, 16)))
        np.testing.assert_allclose(out.to_host(), want, atol=1e-3, rtol=1e-3)
