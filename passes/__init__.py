"""Passes, one file per pass (or per small family); each a frozen-dataclass ModulePass."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """kaio's passes by name, loaded lazily (the xDSL registry convention)."""

    def fuse_tile_maps() -> type[ModulePass]:
        from kaio.passes.fuse_tile_maps import FuseTileMapsPass

        return FuseTileMapsPass

    def tile_layout() -> type[ModulePass]:
        from kaio.passes.tile_layout import TileLayoutPass

        return TileLayoutPass

    def promote_to_shared() -> type[ModulePass]:
        from kaio.passes.promote_to_shared import PromoteToSharedPass

        return PromoteToSharedPass

    def pipeline_cp_async() -> type[ModulePass]:
        from kaio.passes.pipeline_cp_async import PipelineCpAsyncPass

        return PipelineCpAsyncPass

    def pipeline_tma() -> type[ModulePass]:
        from kaio.passes.pipeline_tma import PipelineTmaPass

        return PipelineTmaPass

    def store_tma() -> type[ModulePass]:
        from kaio.passes.store_tma import StoreTmaPass

        return StoreTmaPass

    def lower_to_mma_sync() -> type[ModulePass]:
        from kaio.passes.lower_to_mma_sync import LowerToMmaSyncPass

        return LowerToMmaSyncPass

    def lower_to_wgmma() -> type[ModulePass]:
        from kaio.passes.lower_to_wgmma import LowerToWgmmaPass

        return LowerToWgmmaPass

    def vectorize_loads() -> type[ModulePass]:
        from kaio.passes.vectorize_loads import VectorizeLoadsPass

        return VectorizeLoadsPass

    def fast_math() -> type[ModulePass]:
        from kaio.passes.fast_math import FastMathPass

        return FastMathPass

    def reuse_dead_shared() -> type[ModulePass]:
        from kaio.passes.reuse_dead_shared import ReuseDeadSharedPass

        return ReuseDeadSharedPass

    def lower_to_ptx() -> type[ModulePass]:
        from kaio.passes.lower_to_ptx import LowerToPtxPass

        return LowerToPtxPass

    def ptx_fold() -> type[ModulePass]:
        from kaio.passes.ptx_optimize import PtxFoldPass

        return PtxFoldPass

    def ptx_strength_reduce() -> type[ModulePass]:
        from kaio.passes.ptx_optimize import PtxStrengthReducePass

        return PtxStrengthReducePass

    def ptx_licm() -> type[ModulePass]:
        from kaio.passes.ptx_optimize import PtxLicmPass

        return PtxLicmPass

    def ptx_iv_reduce() -> type[ModulePass]:
        from kaio.passes.ptx_optimize import PtxIvReducePass

        return PtxIvReducePass

    def ptx_sync_cleanup() -> type[ModulePass]:
        from kaio.passes.ptx_optimize import PtxSyncCleanupPass

        return PtxSyncCleanupPass

    def ptx_optimize() -> type[ModulePass]:
        from kaio.passes.ptx_optimize import PtxOptimizePass

        return PtxOptimizePass

    return {
        "fuse-tile-maps": fuse_tile_maps,
        "tile-layout": tile_layout,
        "promote-to-shared": promote_to_shared,
        "pipeline-cp-async": pipeline_cp_async,
        "pipeline-tma": pipeline_tma,
        "store-tma": store_tma,
        "lower-to-mma-sync": lower_to_mma_sync,
        "lower-to-wgmma": lower_to_wgmma,
        "vectorize-loads": vectorize_loads,
        "fast-math": fast_math,
        "reuse-dead-shared": reuse_dead_shared,
        "lower-to-ptx": lower_to_ptx,
        "ptx-fold": ptx_fold,
        "ptx-strength-reduce": ptx_strength_reduce,
        "ptx-licm": ptx_licm,
        "ptx-iv-reduce": ptx_iv_reduce,
        "ptx-sync-cleanup": ptx_sync_cleanup,
        "ptx-optimize": ptx_optimize,
    }
