"""kaio-opt and stock xdsl-opt see kaio's dialects, passes and ptx target; dumps round-trip."""

import shutil
import subprocess
import sys

import pytest
from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, f32, i64

import kaio
from kaio.dialects import kernel as k


def saxpy_module() -> ModuleOp:
    func = k.KernelFuncOp("saxpy", [k.ArrayType(f32, False), k.ArrayType(f32, True), f32], ["x", "y", "a"], (128, 1, 1))
    b = Builder(InsertPoint.at_end(func.body.block))
    x, y, a = func.body.block.args
    i = b.insert(arith.ExtUIOp(b.insert(k.ThreadIdOp("x")).result, i64)).result
    v = b.insert(arith.MulfOp(a, b.insert(k.LoadOp(x, [i])).result)).result
    b.insert(k.StoreOp(b.insert(arith.AddfOp(v, b.insert(k.LoadOp(y, [i])).result)).result, y, [i]))
    b.insert(k.ReturnOp())
    return ModuleOp([func])


def run_tool(tool: str, *args: str, stdin: str | None = None) -> str:
    exe = shutil.which(tool, path=str(__import__("pathlib").Path(sys.executable).parent))
    if exe is None:
        pytest.skip(f"{tool} is not installed in this environment")
    proc = subprocess.run([exe, *args], input=stdin, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_dumped_stages_round_trip_through_kaio_opt(tmp_path):
    compiled = kaio.compile(saxpy_module(), "sm_80", dump_ir=tmp_path)
    files = sorted((tmp_path / "saxpy.sm_80").glob("[0-9]*"))  # the stages, not specialization.txt
    assert [f.name for f in files] == [
        "00-frontend.mlir",
        "01-canonicalize.mlir",
        "02-cse.mlir",
        "03-vectorize-loads.mlir",
        "04-lower-to-ptx.mlir",
        "05-ptx-optimize.mlir",
        "06-ptx.ptx",
    ]
    for stage in files[:-1]:
        text = stage.read_text()
        # dumps carry each op's loc(...): kaio-opt prints them back with --print-debuginfo
        assert run_tool("kaio-opt", str(stage), "--print-debuginfo").strip() == text.strip()
    # the last IR stage, printed by the ptx target, is the compiled PTX
    assert run_tool("kaio-opt", str(files[5]), "-t", "ptx{arch=sm_80}") == compiled.ptx
    # and the cse stage, lowered by kaio-opt, gives the same PTX
    rest = "vectorize-loads,lower-to-ptx,ptx-optimize"
    assert run_tool("kaio-opt", str(files[2]), "-p", rest, "-t", "ptx") == compiled.ptx


def test_stock_xdsl_opt_sees_kaio():
    text = str(saxpy_module())
    out = run_tool("xdsl-opt", "-p", "lower-to-ptx{arch=sm_90}", "-t", "ptx{arch=sm_90}", stdin=text)
    assert ".target sm_90" in out and "ld.global.f32" in out


def test_stages_are_produced_on_demand():
    compiled = kaio.compile(saxpy_module(), "sm_80")
    assert compiled._stages is None
    assert list(compiled.stages) == [
        "frontend", "canonicalize", "cse", "vectorize-loads", "lower-to-ptx", kaio.pipeline.SCALAR_STAGE, "ptx",
    ]  # fmt: skip
    assert compiled.stages["ptx"] == compiled.ptx
    assert compiled.ir.startswith("builtin.module")


def test_pipeline_prints_and_parses_back():
    p = kaio.Pipeline.parse("canonicalize,cse,lower-to-ptx{arch=sm_90}")
    assert kaio.Pipeline.parse(str(p)) == p
    assert str(p.without("cse")) == 'canonicalize,lower-to-ptx{arch="sm_90"}'
    with pytest.raises(ValueError, match="unknown pass .no-such-pass."):
        kaio.Pipeline.parse("no-such-pass")


def test_a_tile_stage_run_through_kaio_opt_keeps_the_kernels_ring_depth_and_cap(tmp_path):
    """The kernel's num_stages and maxnreg are on the printed module (kaio.launch), so the rest
    of the default pipeline, run by kaio-opt on a dumped stage, makes the same ring and PTX."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples"))
    from tile_matmul_bias_gelu import matmul_bias_gelu_kernel

    from kaio import dtypes

    kernel = matmul_bias_gelu_kernel(dtypes.f32).with_options(num_stages=2, maxnreg=96)
    compiled = kaio.compile(kernel, "sm_80")
    stage = tmp_path / "03-promote-to-shared.mlir"
    stage.write_text(compiled.stages["promote-to-shared"])
    assert "smem.buffer<2x64x32x" in run_tool("kaio-opt", str(stage), "-p", "pipeline-cp-async")
    names = [p.name for p in kernel.default_pipeline("sm_80").passes]
    rest = ",".join(names[names.index("promote-to-shared") + 1 :])
    ptx = run_tool("kaio-opt", str(stage), "-p", rest, "-t", "ptx")
    assert ".maxnreg 96" in ptx and ptx == compiled.ptx
