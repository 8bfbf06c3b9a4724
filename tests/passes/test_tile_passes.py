"""The tile stack, one pass at a time on the matmul tile kernel: IR in, IR out, each stage
valid on its own and printable/parsable."""

import pytest
from xdsl.dialects import scf
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

