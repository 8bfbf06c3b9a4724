"""Malformed pipeline strings, bad pass options and unknown arches: each a kaio error naming the
column (or the option, or the arch), never xDSL's ``ArgSpecParseError`` (a BaseException) or a
bare ValueError. Rows: (pipeline string, column the caret points at or None, text the message
names)."""

from __future__ import annotations

import pytest

import kaio
from kaio.errors import KaioCompileError, KaioPipelineError, KaioTargetError
from kaio.pipeline import Pipeline, kernel_pipeline, tile_pipeline
from kaio.prelude import Array, MutArray, f32, thread_idx_x, u32

MALFORMED = [
    ("canonicalize,,cse", 14, "expected pass name"),
    ("lower-to-ptx{arch=", 19, "unknown argument value"),
    ("{}", 1, "expected pass name"),
    (",", 1, "expected pass name"),
    ("cse,", 4, "after this comma"),
    ("cse,,", 5, "expected pass name"),
    ("cse{", 5, "expected argument name"),
    ("cse}", 4, "expected a comma or pass arguments"),
    ("canonicalize cse", 13, "expected a comma or pass arguments"),
    ('cse{a="unterminated}', 7, "unknown token"),
    ("cse{=1}", 5, "expected argument name"),
    ("lower-to-ptx{arch=sm_80,}", None, "argument value"),
    ("lower-to-ptx{{arch=sm_80}}", 14, "expected argument name"),
    ("cse;canonicalize", 4, "unknown token"),
    ("lower-to-ptx{arch=sm_80 arch=sm_90}", 25, "'arch' is given twice"),
    ("no-such-pass", 1, "unknown pass 'no-such-pass'"),
    ("cse,canonicalise", 5, "did you mean 'canonicalize'"),
    ("pipeline-cp-async{nope=1}", 19, "has no option 'nope' (its options: stages)"),
    ("pipeline-cp-async{stages=x}", 1, "bad options"),
    ("pipeline-cp-async{stages=1.5}", 1, "bad options"),
    ("pipeline-tma{producer_registers}", 1, "bad options"),
    ("lower-to-ptx{arch=3}", 1, "bad options"),
    ("tile-layout{warps=a,b}", 1, "bad options"),
    ("pipeline-cp-async{stages=1000}", 1, "stages=1000 is out of range: at least 2, at most 8"),
    ("pipeline-cp-async{stages=1}", 1, "stages=1 is out of range: at least 2, at most 8"),
    ("pipeline-tma{stages=9}", 1, "stages=9 is out of range: at least 2, at most 8"),
    ("cse,lower-to-ptx{maxnreg=3}", 5, "maxnreg=3 is out of range"),
    ("lower-to-ptx{maxnreg=100000}", 1, "maxnreg=100000 is out of range"),
]


@pytest.mark.parametrize("spec, column, names", MALFORMED, ids=[row[0] for row in MALFORMED])
def test_a_malformed_pipeline_string_is_a_kaio_error_at_its_column(spec: str, column: int | None, names: str):
    with pytest.raises(KaioPipelineError) as info:
        Pipeline.parse(spec)
    error = info.value
    assert isinstance(error, ValueError) and isinstance(error, KaioCompileError)
    assert names in str(error)
    if column is not None:
        assert error.col == column - 1 and str(error).startswith(f"pipeline:1:{column}: error:")
        assert error.source_line == spec


@kaio.gpu_kernel(block_size=32)
def copy(x: Array[f32], y: MutArray[f32], n: u32):
    i = thread_idx_x()
    if i < n:
        y[i] = x[i]


@pytest.mark.parametrize("spec, column, names", MALFORMED[:6], ids=[row[0] for row in MALFORMED[:6]])
def test_kaio_compile_gives_the_same_error(spec: str, column: int | None, names: str):
    with pytest.raises(KaioPipelineError, match=names):
        kaio.compile(copy, "sm_80", pipeline=spec)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Pipeline.parse("lower-to-ptx{arch=sm_999}"),
        lambda: kernel_pipeline("sm_999"),
        lambda: tile_pipeline("sm_999"),
        lambda: copy.default_pipeline("sm_999"),
    ],
)
def test_an_unknown_arch_is_a_target_error(make):
    with pytest.raises(KaioTargetError, match="sm_999"):
        make()


@pytest.mark.parametrize(
    "pipeline, names",
    [
        (42, "got 42"),
        ([1, 2], r"pipeline\[0\] must be a ModulePass"),
        (b"cse", "got b'cse'"),
        (lambda arch: "cse", "a list of passes"),
    ],
)
def test_kaio_compile_refuses_what_is_no_pipeline(pipeline, names: str):
    with pytest.raises(KaioPipelineError, match=names):
        kaio.compile(copy, "sm_80", pipeline=pipeline)


@pytest.mark.parametrize(
    "returned, names",
    [
        (None, "got None"),
        (42, "got 42"),
        ("cse,,", "expected pass name"),
        (["cse"], r"\[0\] must be a ModulePass"),
    ],
)
def test_a_with_pipeline_callable_returning_junk_is_named(returned, names: str):
    with pytest.raises(KaioPipelineError, match=names) as info:
        kaio.compile(copy.with_pipeline(lambda arch: returned), "sm_80")
    if returned is None or returned == 42:
        assert "with_pipeline" in str(info.value)


def test_a_with_pipeline_callable_that_raises_is_named():
    def broken(arch: str):
        raise RuntimeError("no pipeline today")

    with pytest.raises(KaioCompileError, match="with_pipeline.*raised RuntimeError: no pipeline today"):
        kaio.compile(copy.with_pipeline(broken), "sm_80")
