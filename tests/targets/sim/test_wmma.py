"""wmma.load / wmma.mma / wmma.store, m16n16k16 with f16 inputs, in the forms nvcc emits for
``nvcuda::wmma``: row and col layouts, f16 and f32 accumulators, global, shared and generic
addresses, explicit and default strides. Each CTA (one warp) multiplies its own matrices, and the
result must equal the float64 product rounded once to the accumulator type. (These stopped at
"unknown instruction" before.)"""

from __future__ import annotations

import numpy as np
import pytest
from kaio.targets.sim import Simulator

from kaio.errors import KaioLaunchError, KaioSimError

from .conftest import HEADER, Device, check_ptx


def regs(prefix: str, first: int, count: int) -> str:
    return "{" + ", ".join(f"%{prefix}{first + i}" for i in range(count)) + "}"


def gemm_ptx(a_layout: str, b_layout: str, acc: str, stride: int | None, space: str) -> str:
    """D = A B + C for one 16x16x16 tile per CTA. ``space``: global, shared (C and D go through
    shared memory) or generic (no state space on the wmma instructions)."""
    sp = "" if space == "generic" else ".global"
    s = "" if stride is None else ", %r40"
    c_regs, c_prefix = (8, "f") if acc == "f32" else (4, "r")
    d_first = 20 if acc == "f32" else 30
    tile = 16 * (stride or 16)
    convert = "" if space == "generic" else "\n".join(f"\tcvta.to.global.u64 %rd{i}, %rd{i};" for i in range(1, 5))
    through_shared = ""
    store_space, store_addr = sp, "%rd4"
    if space == "shared":
        through_shared = (
            f"\twmma.store.d.sync.aligned.row.m16n16k16.shared.{acc} [tile], {regs(c_prefix, d_first, c_regs)}{s};\n"
            f"\twmma.load.c.sync.aligned.row.m16n16k16.shared.{acc} {regs(c_prefix, 1 if acc == 'f32' else 50, c_regs)}, [tile]{s};\n"
        )
        d_first = 1 if acc == "f32" else 50
    c_first = 1 if acc == "f32" else 17
    return HEADER + f"""
.visible .entry wmma_gemm(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
	.reg .b32 %r<60>;
	.reg .f32 %f<40>;
	.reg .b64 %rd<12>;
	.shared .align 32 .b8 tile[{tile * 4}];
	ld.param.u64 %rd1, [pa];
	ld.param.u64 %rd2, [pb];
	ld.param.u64 %rd3, [pc];
	ld.param.u64 %rd4, [pd];
{convert}
	mov.u32 %r40, {stride or 16};
	mov.u32 %r41, %ctaid.x;
	mul.wide.u32 %rd5, %r41, {tile * 2};
	add.s64 %rd1, %rd1, %rd5;
	add.s64 %rd2, %rd2, %rd5;
	mul.wide.u32 %rd6, %r41, {tile * (4 if acc == "f32" else 2)};
	add.s64 %rd3, %rd3, %rd6;
	add.s64 %rd4, %rd4, %rd6;
	wmma.load.a.sync.aligned.{a_layout}.m16n16k16{sp}.f16 {regs("r", 1, 8)}, [%rd1]{s};
	wmma.load.b.sync.aligned.{b_layout}.m16n16k16{sp}.f16 {regs("r", 9, 8)}, [%rd2]{s};
	wmma.load.c.sync.aligned.row.m16n16k16{sp}.{acc} {regs(c_prefix, c_first, c_regs)}, [%rd3]{s};
	wmma.mma.sync.aligned.{a_layout}.{b_layout}.m16n16k16.{acc}.{acc} {regs(c_prefix, d_first if space != 'shared' else (20 if acc == 'f32' else 30), c_regs)}, {regs("r", 1, 8)}, {regs("r", 9, 8)}, {regs(c_prefix, c_first, c_regs)};
{through_shared}	wmma.store.d.sync.aligned.row.m16n16k16{store_space}.{acc} [{store_addr}], {regs(c_prefix, d_first, c_regs)}{s};
	ret;
}}
"""


def _matrices(rng: np.random.Generator, ctas: int, stride: int) -> np.ndarray:
    """(ctas, 16, stride) f16 with small integers and halves: exact products, a real test of
    placement; the padding columns hold garbage that must not be read."""
    return (rng.integers(-8, 9, (ctas, 16, stride)) / 2).astype(np.float16)


CASES = [
    ("row", "col", "f32", 16, "global"),
    ("row", "row", "f32", None, "global"),
    ("col", "col", "f32", 24, "global"),
    ("col", "row", "f16", 16, "global"),
    ("row", "col", "f16", None, "global"),
    ("row", "col", "f32", 16, "shared"),
    ("row", "col", "f16", 24, "shared"),
    ("row", "col", "f32", 16, "generic"),
]


@pytest.mark.parametrize(("a_layout", "b_layout", "acc", "stride", "space"), CASES)
def test_wmma_gemm_matches_the_float64_product(rng, a_layout, b_layout, acc, stride, space):
    text = gemm_ptx(a_layout, b_layout, acc, stride, space)
    check_ptx(text)
    sim = Simulator(race_check=True)
    dev = Device(sim)
    ctas, width = 3, stride or 16
    a_mem, b_mem = _matrices(rng, ctas, width), _matrices(rng, ctas, width)
    acc_type = np.float32 if acc == "f32" else np.float16
    c_mem = (rng.integers(-64, 65, (ctas, 16, width)) / 4).astype(acc_type)
    # the logical matrices: memory read row by row (.row) or column by column (.col)
    a = a_mem[:, :, :16] if a_layout == "row" else a_mem[:, :, :16].transpose(0, 2, 1)
    b = b_mem[:, :, :16] if b_layout == "row" else b_mem[:, :, :16].transpose(0, 2, 1)
    want = (a.astype(np.float64) @ b.astype(np.float64) + c_mem[:, :, :16]).astype(acc_type)
    out = dev.empty((ctas, 16, width), acc_type)
    dev.launch(sim.load(text), "wmma_gemm", (ctas, 1, 1), (32, 1, 1), dev.array(a_mem), dev.array(b_mem), dev.array(c_mem), out)
    got = dev.read(out)
    np.testing.assert_array_equal(got[:, :, :16], want)
    if width > 16:
        assert np.isnan(got[:, :, 16:]).all(), "the store wrote the padding"


def test_wmma_on_part_of_a_warp_is_an_error():
    sim = Simulator()
    d = Device(sim)
    data = np.zeros((1, 16, 16), np.float16)
    text = gemm_ptx("row", "col", "f32", 16, "global")
    with pytest.raises(KaioSimError, match="needs all 32 lanes"):
        d.launch(sim.load(text), "wmma_gemm", (1, 1, 1), (16, 1, 1), d.array(data), d.array(data), d.array(data.astype(np.float32)), d.empty((1, 16, 16), np.float32))


def test_an_unsupported_wmma_shape_is_a_load_error():
    text = gemm_ptx("row", "col", "f32", 16, "global").replace("wmma.load.a.sync.aligned.row.m16n16k16", "wmma.load.a.sync.aligned.row.m32n8k16")
    with pytest.raises(KaioLaunchError, match="m16n16k16"):
        Simulator().load(text)
