"""The compile's target given once: ``kaio.compile(arch)`` sets the module's ``kaio.target``,
and every stage after it reads it there (``lower-to-ptx`` without an option, the printer,
``kaio-opt -t ptx``, ``load_ir``); a second, different arch anywhere is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import kaio
from kaio.dialects import stage_attrs
from kaio.errors import KaioCompileError
from kaio.prelude import Array, MutArray, f32, thread_idx_x, u32
from kaio.tools.kaio_opt import main as kaio_opt


@kaio.gpu_kernel(block_size=32)
def twice(x: Array[f32], y: MutArray[f32], n: u32):
    i = thread_idx_x()
    if i < n:
        y[i] = x[i] * 2.0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_arch_is_on_the_module_and_in_no_pass_option(arch: str):
    compiled = kaio.compile(twice, arch, dump_ir=lambda stage, text: None)
    assert compiled.stages["frontend"].startswith(f'builtin.module attributes {{kaio.target = "{arch}"}}')
    pipeline = str(twice.default_pipeline(arch))
    assert "arch" not in pipeline and arch not in pipeline
    assert f".target {arch}" in compiled.ptx


def test_a_bare_lower_to_ptx_follows_the_module_and_another_arch_is_refused():
    assert ".target sm_90" in kaio.compile(twice, "sm_90", pipeline="lower-to-ptx").ptx
    with pytest.raises(KaioCompileError, match="lowers for sm_90a but the compile is for sm_80"):
        kaio.compile(twice, "sm_80", pipeline="lower-to-ptx{arch=sm_90a}")


def test_a_stage_dumped_for_one_arch_is_not_lowered_for_another(tmp_path: Path):
    kaio.compile(twice, "sm_90a", dump_ir=tmp_path)
    (folder,) = tmp_path.iterdir()
    stage = (folder / "00-frontend.mlir").read_text()
    assert kaio.load_ir(stage, "sm_90a", pipeline="lower-to-ptx").ptx.count(".target sm_90a") == 1
    with pytest.raises(KaioCompileError, match=r"compiled for sm_90a \(its kaio.target\), not sm_80"):
        kaio.load_ir(stage, "sm_80", pipeline="lower-to-ptx")


def test_kaio_opt_lowers_and_prints_for_the_modules_target(tmp_path: Path, capsys):
    kaio.compile(twice, "sm_90a", dump_ir=tmp_path)
    (folder,) = tmp_path.iterdir()
    kaio_opt([str(folder / "00-frontend.mlir"), "-p", "canonicalize,cse,lower-to-ptx", "-t", "ptx"])
    assert ".target sm_90a" in capsys.readouterr().out


def test_the_target_contract():
    from xdsl.dialects.builtin import ModuleOp

    module = ModuleOp([])
    assert stage_attrs.module_target(module) is None
    stage_attrs.set_module_target(module, "sm_80")
    stage_attrs.set_module_target(module, "sm_80")  # again: the same fact
    stage_attrs.check_stage_attrs(module)
    with pytest.raises(Exception, match="compiled for sm_80"):
        stage_attrs.set_module_target(module, "sm_90a")
