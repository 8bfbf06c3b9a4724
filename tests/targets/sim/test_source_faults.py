"""Simulator faults name the Python line: the PTX's ``.file``/``.loc`` line info reaches every
decoded instruction, and a fault says ``from file:line: source text`` beside the PTX line."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
from kaio.errors import KaioMemoryError, KaioSimError
from kaio.targets.sim import Simulator

from ..conftest import line_of
from .conftest import HEADER, check_ptx

SIMT = """
    import kaio
    from kaio.prelude import *

    @kaio.gpu_kernel(block_size=64)
    def shift(x: Array[f32], y: MutArray[f32], n: u32):
        i = thread_idx_x()
        y[i] = x[i + n]
"""

TILE = """
    import kaio
    import kaio.tile as kt
    from kaio.prelude import *

    @kaio.tile_kernel(num_warps=2)
    def tile_shift(x: Array[f32], y: MutArray[f32], n: i32):
        offs = kt.arange(64)
        t = kt.load(x, offs + n)
        kt.store(y, offs, t * 2.0)
"""


@pytest.mark.parametrize(("source", "name", "statement"), [
    (SIMT, "shift", "y[i] = x[i + n]"),
    (TILE, "tile_shift", "t = kt.load(x, offs + n)"),
])  # fmt: skip
def test_out_of_bounds_read_names_the_python_line(kernel_file, rng, source, name, statement):
    mod = kernel_file(source)
    dev = kaio.Device("sim")
    x = dev.alloc_from(rng.standard_normal(64).astype(np.float32))
    y = dev.alloc_from(np.full(64, np.nan, np.float32))
    with pytest.raises(KaioMemoryError) as info:
        getattr(mod, name)[1](x, y, 3)  # threads 61..63 read past the end of x
    err = info.value
    row = line_of(mod.__file__, statement)
    assert (err.source_file, err.source_line, err.source_text) == (mod.__file__, row, statement)
    assert err.ptx_text is not None and "ld.global.f32" in err.ptx_text
    message = str(err)
    assert f"at PTX line {err.ptx_line} ({err.ptx_text})" in message
    assert message.endswith(f"\n  from {mod.__file__}:{row}: {statement}")


def _trap_module(source_file: str, line: int) -> str:
    """A kernel that traps on its second instruction, its .file table written after it (where
    nvcc and LLVM put it)."""
    return HEADER + f"""
.visible .entry trapper(.param .u64 out)
{{
	.reg .b32 %r<2>;
	.loc 1 {line - 1} 0
	mov.u32 %r1, %tid.x;
	.loc 1 {line} 5
	trap;
}}
.file 1 "{source_file}"
"""


def test_a_trap_names_the_python_line_from_any_ptx_with_line_info(tmp_path):
    source = tmp_path / "kernel_source.py"
    source.write_text("a = 1\nb = 2\nboom()  # the trapping line\n")
    ptx = _trap_module(str(source), 3)
    check_ptx(ptx)
    sim = Simulator()
    module = sim.load(ptx)
    assert [str(op.source) for op in module.entries["trapper"].ops] == [f"{source}:2", f"{source}:3", f"{source}:3"]
    with pytest.raises(KaioSimError) as info:
        module.launch("trapper", (1, 1, 1), (1, 1, 1), [bytes(8)])
    err = info.value
    assert (err.source_file, err.source_line, err.source_text) == (str(source), 3, "boom()  # the trapping line")
    assert str(err).endswith(f"\n  from {source}:3: boom()  # the trapping line")


def test_ptx_without_line_info_names_only_the_ptx_line():
    ptx = HEADER + ".visible .entry trapper(.param .u64 out)\n{\n\ttrap;\n}\n"
    module = Simulator().load(ptx)
    with pytest.raises(KaioSimError) as info:
        module.launch("trapper", (1, 1, 1), (1, 1, 1), [bytes(8)])
    assert info.value.source_file is None and info.value.source_line is None
    assert "\n  from " not in str(info.value) and "PTX line 6" in str(info.value)


def test_a_missing_source_file_still_names_its_line():
    module = Simulator().load(_trap_module("gone/kernel_source.py", 3))
    with pytest.raises(KaioSimError) as info:
        module.launch("trapper", (1, 1, 1), (1, 1, 1), [bytes(8)])
    assert info.value.source_text is None
    assert str(info.value).endswith("\n  from gone/kernel_source.py:3")


@pytest.mark.parametrize("directive", [".loc 1", ".loc x 2 3", '.file 1', ".file 1 2", ".loc 1 y 0"])
def test_malformed_line_info_is_a_load_error(directive):
    from kaio.errors import KaioLaunchError

    ptx = HEADER + f".visible .entry k()\n{{\n\t{directive}\n\tret;\n}}\n"
    with pytest.raises(KaioLaunchError, match="PTX syntax error at line 6"):
        Simulator().load(ptx)
