"""The matmul stack, one pass at a time: IR in, IR out, each stage valid on its own."""

import pytest
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp

from kaio import dtypes
from kaio.compiler import kaio_context
from kaio.errors import KaioCompileError
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.pipeline import Pipeline


def matmul_module(t=dtypes.f16, out=dtypes.f32, align=(8, 8, 2)) -> ModuleOp:
    return MatmulKernel(t, out, align, MatmulConfig()).build({}).module


def run(module: ModuleOp, spec: str) -> ModuleOp:
    for p in Pipeline.parse(spec).passes:
        p.apply(kaio_context(), module)
        module.verify()
    return module


def names(module: ModuleOp) -> list[str]:
    return [op.name for op in module.walk()]


def test_tile_matmul_builds_grouped_ctas_warps_and_k_loop():
    m = run(matmul_module(), "tile-matmul{block=128,64,32 warps=2,2 group=4}")
    ops = names(m)
    assert "kernel.matmul" not in ops
    assert ops.count("tile.view") == 3 and ops.count("tile.mma") == 1 and ops.count("tile.store") == 1
    func = next(o for o in m.walk() if o.name == "kernel.func")
    assert func.block_shape == (128, 1, 1)
    acc = next(o for o in m.walk() if o.name == "tile.zero").result.type
    assert acc.dims == (64, 32)


def test_tile_matmul_rejects_uneven_warps():
    with pytest.raises(KaioCompileError, match="evenly split"):
        run(matmul_module(), "tile-matmul{block=128,128,32 warps=3,2}")


def test_promote_to_shared_copies_then_synchronizes():
    m = run(matmul_module(), "tile-matmul,promote-to-shared{layout=pad}")
    loop = next(o for o in m.walk() if isinstance(o, scf.ForOp))
    body = [o.name for o in loop.body.block.ops]
    mma = body.index("tile.mma")
    assert body[mma - 3 : mma] == ["smem.copy", "smem.copy", "kernel.barrier"]
    assert body[mma + 1] == "kernel.barrier"
    allocs = [o for o in m.walk() if o.name == "smem.alloc"]
    assert {str(a.result.type) for a in allocs} == {
        "!smem.buffer<128x32xf16, #smem.layout<pad 8>>",
        "!smem.buffer<32x128xf16, #smem.layout<pad 8>>",
    }


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipeline_cp_async_rings_and_prologue(stages):
    m = run(matmul_module(), f"tile-matmul,promote-to-shared,pipeline-cp-async{{stages={stages}}}")
    ops = names(m)
    assert "smem.copy" not in ops
    # (stages - 1) groups in the prologue, one per iteration
    assert ops.count("cpasync.commit") == stages
    assert ops.count("cpasync.copy") == 2 * stages
    waits = [o.pending.value.data for o in m.walk() if o.name == "cpasync.wait"]
    assert waits == [stages - 2, 0]
    rings = {o.result.type.stages for o in m.walk() if o.name == "smem.alloc"}
    assert rings == {stages}
    loop = next(o for o in m.walk() if isinstance(o, scf.ForOp))
    assert len(loop.iter_args) == 3  # accumulator, read stage, write stage


def test_pipeline_needs_two_stages():
    with pytest.raises(KaioCompileError, match="at least 2"):
        run(matmul_module(), "tile-matmul,promote-to-shared,pipeline-cp-async{stages=1}")


def test_lower_to_mma_sync_unrolls_fragments():
    m = run(matmul_module(), "tile-matmul,promote-to-shared,pipeline-cp-async,lower-to-mma-sync")
    ops = names(m)
    # warp tile 64x64, BK=32: 2 k-steps x (4 A loads, 4 B pair loads, 4x8 mma)
    assert ops.count("mma.load_a") == 8 and ops.count("mma.load_b") == 8
    assert ops.count("mma.mma") == 64 and ops.count("mma.store") == 32
    assert "tile.mma" not in ops and "tile.acc" not in str(m)
    loop = next(o for o in m.walk() if isinstance(o, scf.ForOp))
    assert len(loop.iter_args) == 32 + 2


def test_lower_to_mma_sync_explains_missing_shared_stage():
    with pytest.raises(KaioCompileError, match="promote-to-shared"):
        run(matmul_module(), "tile-matmul,lower-to-mma-sync")


def test_lower_to_mma_sync_refuses_f32():
    with pytest.raises(KaioCompileError, match="SIMT"):
        run(matmul_module(dtypes.f32), "tile-matmul,promote-to-shared,lower-to-mma-sync")


def test_every_stage_round_trips_through_text():
    from xdsl.parser import Parser

    m = matmul_module()
    for spec in ["tile-matmul", "promote-to-shared", "pipeline-cp-async", "lower-to-mma-sync", "lower-to-ptx"]:
        run(m, spec)
        text = str(m)
        assert str(Parser(kaio_context(), text).parse_module()) == text
