"""One typed options record and one builder make every default pipeline
(``kaio.pipeline_options``), and the launch options a pipeline used to repeat live on the module
once (``kaio.launch``): the ring passes and ``lower-to-ptx`` read them there unless the pipeline
gives them the option, which overrides the module's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import kaio
from kaio import dtypes
from kaio.dialects import stage_attrs
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.attention import AttentionConfig
from kaio.ops_library.matmul_config import SIMT_CONFIGS, TENSOR_CORE_CONFIGS, WGMMA_CONFIGS
from kaio.pipeline import Pipeline, TilePipelineOptions, build_pipeline, kernel_pipeline, tile_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from tile_matmul_bias_gelu import matmul_bias_gelu_kernel

KERNEL = matmul_bias_gelu_kernel(dtypes.f32)  # 64x64x32 tiles: A's ring is smem.buffer<Nx64x32x...>


def ring_depths(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"smem\.buffer<(\d+)x64x32x", text)}


def every_default_pipeline() -> list[tuple[str, Pipeline]]:
    made = []
    for arch in ("sm_80", "sm_90a"):
        made += [(f"tile kernel {arch}", KERNEL.default_pipeline(arch)), (f"kernel {arch}", kernel_pipeline(arch))]
        made += [(f"{c.key()} {arch}", c.pipeline(arch)) for c in TENSOR_CORE_CONFIGS + WGMMA_CONFIGS + SIMT_CONFIGS]
        made += [(f"attention {arch}", AttentionConfig(64, 32, 4, 1, 2).pipeline(arch))]
    return made


def test_default_pipelines_repeat_no_launch_option_and_print_as_pipeline_strings():
    for what, pipeline in every_default_pipeline():
        text = str(pipeline)
        assert "stages=" not in text and "maxnreg=" not in text and "arch=" not in text, what
        assert Pipeline.parse(text) == pipeline, what


def test_the_wrappers_are_the_builder():
    assert kernel_pipeline("sm_80") == build_pipeline("sm_80")
    assert tile_pipeline("sm_90a") == build_pipeline("sm_90a", TilePipelineOptions()) == KERNEL.default_pipeline("sm_90a")
    config = WGMMA_CONFIGS[0]
    assert config.pipeline("sm_90a") == build_pipeline("sm_90a", config.pipeline_options())


def test_overrides_are_written_as_pass_options():
    assert str(tile_pipeline("sm_80", 3)) == (
        'fuse-tile-maps,tile-layout{mma=true warps=0,0 wgmma=false staged_stores=true},'
        'promote-to-shared{layout="swizzle"},pipeline-cp-async{stages=3},lower-to-mma-sync,canonicalize,cse,'
        'lower-to-ptx,ptx-optimize{strength_reduce=true licm=true iv_reduce=true fold=true sync_cleanup=true}'
    )  # what every tile kernel's default pipeline printed before the module carried its stages
    hopper = str(tile_pipeline("sm_90a", 4, maxnreg=128))
    assert "pipeline-tma{stages=4 " in hopper and "pipeline-cp-async{stages=4}" in hopper
    assert "lower-to-ptx{maxnreg=128}" in hopper
    assert "pipeline-cp-async" not in str(tile_pipeline("sm_80", 1))  # 0 or 1: no ring passes
    specialised = str(build_pipeline("sm_90a", TilePipelineOptions(warps=(8, 1), warp_specialize=True, maxnreg=168)))
    assert "pipeline-tma{warp_specialize=true maxnreg=168 " in specialised  # the budget starts from the cap


@pytest.mark.parametrize("field, value, error", [
    ("layout", "zigzag", KaioValueError), ("layout", 3, KaioTypeError),
    ("warps", (3, 1), KaioValueError), ("warps", (32, 2), KaioValueError), ("warps", (2,), KaioTypeError),
    ("stages", 9, KaioValueError), ("stages", -1, KaioValueError), ("stages", 2.0, KaioTypeError),
    ("maxnreg", 8, KaioValueError), ("maxnreg", 256, KaioValueError), ("maxnreg", True, KaioTypeError),
    ("tma", "yes", KaioTypeError), ("wgmma", 1, KaioTypeError), ("fast_math", None, KaioTypeError),
])  # fmt: skip
def test_every_option_is_checked_where_the_options_are_made(field, value, error):
    with pytest.raises(error, match=f"TilePipelineOptions: `{field}`"):
        TilePipelineOptions(**{field: value})


def test_options_are_frozen_and_hashable():
    options = TilePipelineOptions(warps=[2, 2])  # type: ignore[arg-type]
    assert options.warps == (2, 2) and hash(options) == hash(TilePipelineOptions(warps=(2, 2)))
    with pytest.raises(AttributeError):
        options.stages = 2  # type: ignore[misc]


def test_the_module_carries_the_launch_options_once():
    compiled = kaio.compile(KERNEL.with_options(num_stages=2, maxnreg=96), "sm_80")
    assert "kaio.launch = {num_stages = 2 : i64, maxnreg = 96 : i64}" in compiled.stages["frontend"]
    assert "stages=" not in compiled.pipeline and "maxnreg=" not in compiled.pipeline
    assert ring_depths(compiled.stages["pipeline-cp-async"]) == {2} and ".maxnreg 96" in compiled.ptx


def test_a_pass_option_overrides_the_module():
    two = KERNEL.with_options(num_stages=2)
    pipeline = str(two.default_pipeline("sm_80")).replace("pipeline-cp-async", "pipeline-cp-async{stages=4}")
    compiled = kaio.compile(two, "sm_80", pipeline=pipeline)
    assert ring_depths(compiled.stages["pipeline-cp-async"]) == {4}


def test_a_kernel_without_a_ring_runs_the_ring_passes_as_nothing():
    none = KERNEL.with_options(num_stages=0)
    default = kaio.compile(none, "sm_90a")
    assert "pipeline-cp-async" in default.pipeline and "cp.async.wait_group" not in default.ptx
    without = none.default_pipeline("sm_90a").without("pipeline-cp-async").without("pipeline-tma")
    assert kaio.compile(none, "sm_90a", pipeline=without).ptx == default.ptx


def test_a_module_without_launch_options_gets_the_old_default_depth():
    module = KERNEL.build({}).module
    assert stage_attrs.LAUNCH_ATTR in module.attributes
    del module.attributes[stage_attrs.LAUNCH_ATTR]  # a hand-written module, or a dump from before kaio.launch
    compiled = kaio.compile(module, "sm_80", pipeline=tile_pipeline("sm_80"))
    assert ring_depths(compiled.stages["pipeline-cp-async"]) == {3}


def test_a_dumped_stage_reloaded_keeps_the_kernels_depth_and_cap():
    compiled = kaio.compile(KERNEL.with_options(num_stages=2, maxnreg=96), "sm_80")
    loaded = kaio.load_ir(compiled.stages["promote-to-shared"], "sm_80", stage="promote-to-shared")
    assert loaded.ptx == compiled.ptx


@pytest.mark.parametrize("value, message", [
    ({"num_stages": 9}, "num_stages is 0..8, not 9"),
    ({"num_stages": 2, "maxnreg": 8}, "maxnreg is 24..255, not 8"),
    ({"num_warps": 4}, "holds num_stages, maxnreg, not num_warps"),
])  # fmt: skip
def test_the_launch_contract_is_verified(value, message):
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64
    from xdsl.utils.exceptions import VerifyException

    module = ModuleOp([])
    module.attributes[stage_attrs.LAUNCH_ATTR] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in value.items()})
    with pytest.raises(VerifyException, match=message):
        stage_attrs.check_stage_attrs(module)
    with pytest.raises(VerifyException, match="kaio.launch sits on builtin.module"):
        stage_attrs.LAUNCH.check(KERNEL.build({}).func, module.attributes[stage_attrs.LAUNCH_ATTR])


def test_the_cache_key_still_tells_launch_options_apart():
    """The default pipeline's text no longer names the depth or the cap: the kernel's source key
    does (a matmul config's maxnreg reaches it through the configured kernel)."""
    from dataclasses import replace

    from kaio.cache import compile_key
    from kaio.ops_library.matmul_kernel import MatmulKernel

    def key(kernel):  # type: ignore[no-untyped-def]
        return compile_key(kernel, "sm_80", kernel.default_pipeline("sm_80"), {})

    keys = {key(KERNEL), key(KERNEL.with_options(num_stages=2)), key(KERNEL.with_options(maxnreg=96))}
    config = TENSOR_CORE_CONFIGS[0]
    keys |= {key(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), c)) for c in (config, replace(config, maxnreg=128))}
    assert len(keys) == 5
