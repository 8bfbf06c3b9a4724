"""What the tile stack emits: vector accesses where alignment allows, shuffle + shared-memory
reductions, and every stage dumped, re-parsed and re-run by kaio-opt."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f16, f32, i32


@kaio.tile_kernel(num_warps=4)
def copy_rows(x: Array[f16], out: MutArray[f16], rows: i32, cols: i32, R: kaio.constexpr = 16, C: kaio.constexpr = 128):
    r0 = i32(kt.program_id(0)) * R
    t = kt.load(x, (r0, 0), (R, C), (rows, cols))
    kt.store(out, (r0, 0), t * 2.0, (rows, cols))


@kaio.tile_kernel(num_warps=8)
def column_sums(x: Array[f32], out: MutArray[f32], rows: i32, cols: i32, R: kaio.constexpr = 256, C: kaio.constexpr = 32):
    t = kt.load(x, (0, 0), (R, C), (rows, cols))
    kt.store(out, (0,), kt.sum(t, 0), (cols,))


def ptx(kernel, **constexprs) -> str:  # type: ignore[no-untyped-def]
    return kaio.compile(kernel, "sm_80", **constexprs).ptx


def test_rows_of_halves_move_16_bytes_per_access_when_the_sizes_allow():
    text = ptx(copy_rows, __divisible__=(("cols", 16), ("rows", 16)))
    assert "ld.global.v4.b32" in text and "st.global.v4.b32" in text


def test_unproven_row_lengths_still_move_16_bytes_per_access():
    text = ptx(copy_rows)
    assert "ld.global.v4.b32" in text and "st.global.v4.b32" in text and "prmt.b32" in text  # realigned
    assert "ld.global.b16" in text and "st.global.b16" in text  # the ends of the rows


def test_the_launch_specializes_on_divisibility(tmp_path):
    dev = kaio.Device("sim")
    import numpy as np

    for cols in (128, 100):
        x = dev.alloc_from(np.ones((16, cols), np.float16))
        out = dev.alloc_from(np.zeros((16, cols), np.float16))
        copy_rows[1](x, out, 16, cols)
        assert (out.to_host() == 2).all()
    specs = copy_rows._launcher._specs
    texts = [s.compiled.ptx for s in specs.values()]
    assert len(texts) == 2 and sum("shfl.sync.up.b32" in t for t in texts) == 1  # realigned: 100 columns


def test_a_reduction_across_warps_uses_shuffles_then_shared_memory():
    text = ptx(column_sums)
    assert "shfl.sync.bfly.b32" in text and "bar.sync" in text and "st.shared.f32" in text


def run_tool(tool: str, *args: str) -> str:
    exe = shutil.which(tool, path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip(f"{tool} is not installed in this environment")
    proc = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_stage_of_a_tile_kernel_dumps_and_replays_through_kaio_opt(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIO_DUMP_IR", str(tmp_path))
    compiled = kaio.compile(column_sums, "sm_80")
    folder = tmp_path / f"column_sums.sm_80-{compiled.specialization.key}"  # R and C: one per specialization
    files = sorted(f for f in folder.iterdir() if f.name != "specialization.txt")
    names = [f.name.split("-", 1)[1].rsplit(".", 1)[0] for f in files]
    assert names == ["frontend", *kaio.Pipeline.parse(compiled.pipeline).names, "ptx"]
    assert names[1:4] == ["fuse-tile-maps", "tile-layout", "promote-to-shared"]
    for stage in files[:-1]:
        text = stage.read_text()
        assert run_tool("kaio-opt", str(stage), "--print-debuginfo").strip() == text.strip()
    # the frontend's IR, run through the same pipeline by kaio-opt, gives the same PTX
    pipeline = compiled.pipeline.replace(",lower-to-ptx{arch=\"sm_80\"}", ",lower-to-ptx")
    assert run_tool("kaio-opt", str(files[0]), "-p", pipeline, "-t", "ptx") == compiled.ptx


@kaio.tile_kernel(num_warps=4)
def scale_1d(x: Array[f16], out: MutArray[f16], n: i32, BLOCK: kaio.constexpr = 1024):
    off = i32(kt.program_id(0)) * BLOCK
    kt.store(out, (off,), kt.load(x, (off,), (BLOCK,), (n,)) * 2.0, (n,))


def test_a_bound_not_proven_divisible_gets_vectors_inside_it_and_elements_at_it(dev=None):
    text = ptx(scale_1d)  # n unknown: vectors where they fit, element accesses at the bound
    assert "ld.global.v4.b32" in text and "st.global.v4.b32" in text
    assert "ld.global.b16" in text and "st.global.b16" in text
    import numpy as np

    dev = kaio.Device("sim")
    for n in (1, 7, 1000, 4099):
        x = np.random.rand(n).astype(np.float16)
        out = dev.alloc_from(np.full(n, np.nan, np.float16))
        scale_1d[kaio.cdiv(n, 1024)](dev.alloc_from(x), out, n)
        np.testing.assert_array_equal(out.to_host(), x * np.float16(2))
