"""Default pipelines are deferred: a :class:`kaio.pipeline.Pipeline` known by its string, parsed
(exactly as ``Pipeline.parse``) when its passes are first needed, so the disk cache is keyed from
the text alone."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from kaio import cache as disk_cache
from kaio.errors import KaioPipelineError
from kaio.pipeline import Pipeline, kernel_pipeline, tile_pipeline


@dataclass(frozen=True)
class MarkerPass(ModulePass):
    """A user pass that changes nothing: its file is what the key must see."""

    name = "deferred-key-marker"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pass


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_deferred_pipeline_is_the_parsed_one(arch):
    for deferred in (kernel_pipeline(arch), tile_pipeline(arch, 4, maxnreg=128)):
        text = deferred.key_text
        assert "passes" not in vars(deferred) and deferred.pass_names == Pipeline.parse(text).names
        assert deferred == Pipeline.parse(text) and str(deferred) == str(Pipeline.parse(text))
        assert "passes" in vars(deferred) and deferred.key_text == text  # parsed once, key kept


def test_a_deferred_pipeline_s_errors_are_parse_s_at_first_use():
    bad = Pipeline.deferred("fuse-tile-maps,pipeline-cp-async{stages=99}")
    with pytest.raises(KaioPipelineError, match="stages"):
        bad.passes  # noqa: B018
    with pytest.raises(KaioPipelineError, match="unknown pass 'no-such-pass'"):
        Pipeline.deferred("cse,no-such-pass").names  # noqa: B018
    with pytest.raises(KaioPipelineError, match="must be a str"):
        Pipeline.deferred(3)  # type: ignore[arg-type]


def test_editing_a_deferred_pipeline_parses_it():
    edited = tile_pipeline("sm_80").without("cse")
    assert "cse" not in edited.names and edited.key_text == str(edited)


def test_the_key_names_a_user_pass_of_a_deferred_pipeline_by_its_module():
    from kaio.pass_registry import register_pass

    register_pass(MarkerPass)
    text = "deferred-key-marker,canonicalize,cse,vectorize-loads,lower-to-ptx"
    deferred, parsed = Pipeline.deferred(text), Pipeline.parse(text)
    # the fingerprint of the unparsed pipeline is the parsed one's: the user pass's file counts
    assert disk_cache.extensions_fingerprint(deferred) == disk_cache.extensions_fingerprint(parsed)
    assert disk_cache.extensions_fingerprint(deferred) != disk_cache.extensions_fingerprint(kernel_pipeline("sm_80"))
    assert "passes" not in vars(deferred)
