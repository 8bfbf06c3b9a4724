"""PTX line info: one ``.file`` per Python file and a ``.loc`` before the instructions of each
statement (``nvcc -lineinfo`` style), which ptxas maps into the SASS line table; the disk cache
recompiles when a line moves; dumps carry MLIR ``loc(...)`` on every op and parse back."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest
from xdsl.parser import Parser

import kaio
from kaio.dialect_registry import kaio_context
from kaio.locations import print_with_locations
from kaio.targets.ptx import toolchain
from kaio.targets.ptx.printer import print_ptx

from ..conftest import line_of

SIMT = """
    import kaio
    from kaio.prelude import *

    @kaio.device
    def twice(v: f32) -> f32:
        return v + v

    @kaio.gpu_kernel(block_size=64)
    def shift(x: Array[f32], y: MutArray[f32], n: u32):
        i = thread_idx_x()
        if i < n:
            y[i] = twice(x[i + n])
"""

TILE = """
    import kaio
    import kaio.tile as kt
    from kaio.prelude import *

    @kaio.tile_kernel(num_warps=2)
    def tcopy(x: Array[f32], y: MutArray[f32], n: i32):
        offs = kt.arange(64)
        t = kt.load(x, offs + n)
        kt.store(y, offs, t * 2.0)
"""

_LOC = re.compile(r"^\t\.loc (\d+) (\d+) (\d+)(?:  // (.*))?$")


def located_instructions(ptx: str) -> list[tuple[tuple[str, int] | None, str]]:
    """((file, line) of the .loc in force, instruction text) for every instruction of the body."""
    files = {int(n): name for n, name in re.findall(r'^\.file (\d+) "(.*)"$', ptx, re.M)}
    out: list[tuple[tuple[str, int] | None, str]] = []
    line: tuple[str, int] | None = None
    body = ptx[ptx.index("{\n") :]
    for text in body.splitlines():
        if m := _LOC.match(text):
            line = (files[int(m.group(1))], int(m.group(2)))
        elif text.startswith("\t") and not text.startswith(("\t.reg", "\t//")) and text.strip():
            out.append((line, text.strip()))
    return out


def test_simt_ptx_names_the_file_and_the_line_of_each_instruction(kernel_file):
    mod = kernel_file(SIMT)
    path = mod.__file__
    ptx = kaio.compile(mod.shift, "sm_80").ptx
    assert ptx.count(".file ") == 1 and f'.file 1 "{path}"' in ptx
    assert ".section" not in ptx
    at = dict((text, line) for line, text in located_instructions(ptx))
    load = next(t for t in at if t.startswith("ld.global.f32"))
    store = next(t for t in at if t.startswith("st.global.f32"))
    compare = next(t for t in at if t.startswith("setp."))
    add = next(t for t in at if t.startswith("add.rn.f32"))
    assert at[load] == at[store] == (path, line_of(path, "y[i] = twice(x[i + n])"))
    assert at[compare] == (path, line_of(path, "if i < n:"))
    assert at[add] == (path, line_of(path, "return v + v"))  # the inlined device function's line
    # the column is the statement's (1-based), and the statement's text rides on its .loc
    row = line_of(path, "if i < n:")
    assert f"\t.loc 1 {row} 5  // if i < n:\n" in ptx


def test_tile_ptx_names_the_line_of_each_instruction(kernel_file):
    mod = kernel_file(TILE)
    ptx = kaio.compile(mod.tcopy, "sm_80").ptx
    at = {text: line for line, text in located_instructions(ptx)}
    load = next(t for t in at if "ld.global.f32" in t)
    store = next(t for t in at if "st.global.f32" in t)
    assert at[load] == (mod.__file__, line_of(mod.__file__, "t = kt.load(x, offs + n)"))
    assert at[store] == (mod.__file__, line_of(mod.__file__, "kt.store(y, offs, t * 2.0)"))


def test_comments_off_keeps_the_line_info(kernel_file):
    from kaio.pass_manager import run_pipeline

    mod = kernel_file(SIMT)
    module = mod.shift.build({}).module
    run_pipeline(module, mod.shift.default_pipeline("sm_80"))
    with_comments, without = print_ptx(module, "sm_80"), print_ptx(module, "sm_80", comments=False)
    assert "  // y[i] = twice(x[i + n])" in with_comments
    body = without[without.index("{\n") :]
    assert "//" not in body and "\t.loc 1 " in body
    assert located_instructions(without) == located_instructions(with_comments)


def _lineinfo_sass(ptx: str, arch: str) -> str:
    """nvdisasm's SASS of ``ptxas -lineinfo``'s cubin, annotated with the source lines."""
    ptxas, nvdisasm = toolchain.find_ptxas(), toolchain.find_nvdisasm()
    if ptxas is None or nvdisasm is None:
        pytest.skip("needs the nvidia-cuda-nvcc-cu12 and nvidia-cuda-nvdisasm wheels")
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        subprocess.run([str(ptxas), "-lineinfo", f"-arch={arch}", str(src), "-o", str(cubin)], check=True, capture_output=True)
        done = subprocess.run([str(nvdisasm), "-g", "-c", str(cubin)], check=True, capture_output=True, text=True)
    return done.stdout


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptxas_lineinfo_maps_the_sass_to_the_python_line(kernel_file, arch):
    mod = kernel_file(SIMT)
    sass = _lineinfo_sass(kaio.compile(mod.shift, arch).ptx, arch)
    row = line_of(mod.__file__, "y[i] = twice(x[i + n])")
    current = None
    lines_of_loads = []
    for text in sass.splitlines():
        if m := re.search(r'//## File "(.*)", line (\d+)', text):
            current = (m.group(1), int(m.group(2)))
        elif "LDG" in text:
            lines_of_loads.append(current)
    assert lines_of_loads == [(mod.__file__, row)]


def test_moving_a_device_function_recompiles_its_line_info(kernel_file, tmp_path, monkeypatch):
    """The kernel's file does not change; only the device function it calls moves down its own
    file: the cached PTX would name the old line."""
    helpers = tmp_path / "user_helpers.py"

    def compile_with_helper_at(gap: str) -> str:
        helpers.write_text(f"import kaio\nfrom kaio.prelude import *\n{gap}\n@kaio.device\ndef half(v: f32) -> f32:\n    return v * 0.5\n")
        spec = importlib.util.spec_from_file_location("user_helpers", helpers)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "user_helpers", module)
        spec.loader.exec_module(module)
        kernels = kernel_file("""
            import kaio
            from kaio.prelude import *
            from user_helpers import half

            @kaio.gpu_kernel(block_size=32)
            def scale(y: MutArray[f32]):
                y[thread_idx_x()] = half(y[thread_idx_x()])
        """)
        return kaio.compile(kernels.scale, "sm_80").ptx

    before = compile_with_helper_at("")
    after = compile_with_helper_at("\n\n")
    mul = [line for line, text in located_instructions(after) if text.startswith("mul.rn.f32")]
    assert mul == [(str(helpers), line_of(helpers, "return v * 0.5"))]
    assert after != before


def test_dumps_carry_locations_and_parse_back(kernel_file, tmp_path):
    mod = kernel_file(SIMT)
    kaio.compile(mod.shift, "sm_80", dump_ir=tmp_path / "dumps")
    stages = sorted(p for p in (tmp_path / "dumps").rglob("*.mlir"))
    assert len(stages) >= 3
    row = line_of(mod.__file__, "y[i] = twice(x[i + n])")
    for stage in stages:
        text = stage.read_text()
        assert f'loc("{mod.__file__}":{row}:9)' in text, stage.name
        module = Parser(kaio_context(), text).parse_module()
        assert print_with_locations(module) == text, stage.name
    frontend = stages[0].read_text()
    load = next(line for line in frontend.splitlines() if "kernel.load" in line)
    assert load.endswith(f'loc("{mod.__file__}":{row}:9)')
    func = next(line for line in frontend.splitlines() if "kernel.func" in line)
    assert f'loc("{mod.__file__}":{line_of(mod.__file__, "def shift")}:1)' in func
