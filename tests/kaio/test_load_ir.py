"""``kaio.load_ir``: a dumped stage, edited, runs on the simulator with the kernel's
parameters; bad input is a kaio error naming what is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio import Array, MutArray
from kaio.dtypes import f32, i32
from kaio.errors import KaioCompileError, KaioTargetError, KaioTypeError
from kaio.prelude import block_dim_x, block_idx_x, thread_idx_x, u32

TWO = "2.000000e+00 : f32"
THREE = "3.000000e+00 : f32"


@kaio.gpu_kernel(block_size=64)
def doubled(x: Array[f32], out: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        out[i] = x[i] * 2.0


@kaio.tile_kernel(num_warps=2)
def doubled_tiles(x: Array[f32], out: MutArray[f32], n: i32, B: kaio.constexpr = 128):
    off = i32(kt.program_id(0)) * B
    kt.store(out, (off,), kt.load(x, (off,), (B,), (n,)) * 2.0, (n,))


@pytest.fixture
def dev() -> kaio.Device:
    return kaio.Device("sim")


def dump(kernel, tmp_path: Path) -> tuple[kaio.compiled.CompiledKernel, Path]:
    compiled = kaio.compile(kernel, "sm_80", dump_ir=tmp_path)
    (folder,) = tmp_path.iterdir()
    return compiled, folder


def stage_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.mlir"))


def run(kernel, dev, rng, n: int = 200, block: int = 64) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal(n).astype(np.float32)
    out = dev.alloc_from(np.full(n, np.nan, np.float32))
    kernel[(n + block - 1) // block](dev.alloc_from(x), out, n)
    return x, out.to_host()


def without_line_info(ptx: str) -> list[str]:
    """The instructions: .file/.loc and comments name the source, which a parsed stage
    carries only as far as its loc(...) annotations do."""
    return [line for line in ptx.splitlines() if not re.match(r"\s*(\.file|\.loc|//)", line) and line.strip()]


@pytest.mark.parametrize("kernel, block", [(doubled, 64), (doubled_tiles, 128)], ids=["simt", "tile"])
def test_every_dumped_stage_edited_runs_with_the_edit(kernel, block, dev, rng, tmp_path):
    compiled, folder = dump(kernel, tmp_path)
    files = stage_files(folder)
    assert len(files) >= 5 and files[0].name == "00-frontend.mlir"
    edited_somewhere = False
    for stage in files:
        text = stage.read_text()
        loaded = kaio.load_ir(stage)
        assert without_line_info(loaded.ptx) == without_line_info(compiled.ptx), stage.name
        if TWO not in text:
            continue  # the constant may have become a splat or an immediate by this stage
        stage.write_text(text.replace(TWO, THREE))
        x, got = run(kaio.load_ir(stage), dev, rng, block=block)
        np.testing.assert_allclose(got, x * 3.0, rtol=1e-6, err_msg=stage.name)
        edited_somewhere = True
    assert edited_somewhere
    x, got = run(kernel, dev, rng, block=block)  # the kernel itself is untouched
    np.testing.assert_allclose(got, x * 2.0, rtol=1e-6)


def test_the_last_ir_stage_is_ptx_and_takes_its_parameters_from_the_folder(dev, rng, tmp_path):
    _, folder = dump(doubled, tmp_path)
    (last,) = folder.glob("*-lower-to-ptx.mlir")
    text = last.read_text()
    assert "kernel.func" not in text and "ptx.entry" in text
    loaded = kaio.load_ir(last)
    assert [repr(p) for p in loaded.compiled.params] == ["x: Array[f32]", "out: MutArray[f32]", "n: u32"]
    x, got = run(loaded, dev, rng)
    np.testing.assert_allclose(got, x * 2.0, rtol=1e-6)
    with pytest.raises(KaioTypeError, match="out"):  # argument checks as for the kernel
        loaded[1](dev.alloc_from(x), dev.alloc_from(x.astype(np.float16)), 200)
    # copied out of its folder, nothing says what its parameters are
    with pytest.raises(KaioCompileError, match="specialization.txt"):
        kaio.load_ir(text)


def test_text_runs_the_whole_pipeline_or_the_passes_given(dev, rng, tmp_path):
    _, folder = dump(doubled, tmp_path)
    frontend = (folder / "00-frontend.mlir").read_text().replace(TWO, THREE)
    x, got = run(kaio.load_ir(frontend, "sm_80"), dev, rng)
    np.testing.assert_allclose(got, x * 3.0, rtol=1e-6)
    x, got = run(kaio.load_ir(frontend, "sm_80", pipeline="lower-to-ptx"), dev, rng)
    np.testing.assert_allclose(got, x * 3.0, rtol=1e-6)
    cse = (folder / "02-cse.mlir").read_text()
    x, got = run(kaio.load_ir(cse, stage="cse"), dev, rng)
    np.testing.assert_allclose(got, x * 2.0, rtol=1e-6)


def test_unparsable_ir_names_the_line(tmp_path):
    _, folder = dump(doubled, tmp_path)
    stage = folder / "02-cse.mlir"
    lines = stage.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "arith.mulf" in line)
    lines[at] = lines[at].replace("arith.mulf", "arith.mulff")
    stage.write_text("\n".join(lines))
    with pytest.raises(KaioCompileError) as info:
        kaio.load_ir(stage)
    assert info.value.line == at + 1 and info.value.filename == str(stage)
    assert "arith.mulff" in str(info.value) and "not registered" in str(info.value)


def test_ill_typed_ir_is_refused(tmp_path):
    _, folder = dump(doubled, tmp_path)
    text = (folder / "02-cse.mlir").read_text()
    assert TWO in text
    with pytest.raises(KaioCompileError, match="load_ir") as info:  # an f32 multiply reading an i32
        kaio.load_ir(text.replace(TWO, "2 : i32"))
    assert info.value.line is not None and "i32" in str(info.value)


def test_wrong_arch_unknown_stage_and_other_files_are_kaio_errors(tmp_path):
    _, folder = dump(doubled, tmp_path)
    stage = folder / "02-cse.mlir"
    with pytest.raises(KaioCompileError, match="dumped for sm_80, not sm_90"):
        kaio.load_ir(stage, "sm_90")
    with pytest.raises(KaioTargetError, match="sm_999"):
        kaio.load_ir(stage, "sm_999")
    renamed = folder / "02-no-such-pass.mlir"
    renamed.write_text(stage.read_text())
    with pytest.raises(KaioCompileError, match="unknown stage 'no-such-pass'.*frontend, canonicalize, cse"):
        kaio.load_ir(renamed)
    with pytest.raises(KaioCompileError, match="unknown stage 'tile-layout'"):
        kaio.load_ir(stage, stage="tile-layout")
    with pytest.raises(KaioCompileError, match="PTX text"):
        kaio.load_ir(next(folder.glob("*.ptx")))
    with pytest.raises(KaioCompileError, match="not a file"):
        kaio.load_ir(tmp_path / "missing.mlir")
    with pytest.raises(KaioTypeError, match="source"):
        kaio.load_ir(3)  # type: ignore[arg-type]
    (folder / "specialization.txt").write_text("kernel: doubled\narch sm_80\n")
    with pytest.raises(KaioCompileError, match=r"specialization.txt:2: expected `field: value`"):
        kaio.load_ir(stage)
