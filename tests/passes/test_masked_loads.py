"""Masked tile loads as nvcc and Triton write them: the destination registers set to ``other``,
then the load guarded by the mask writes over them (``ptx.ld_into``), so no select follows the
load and masked-off lanes never touch memory."""

from __future__ import annotations

import re

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp, f32, i1, i32, i64
from xdsl.utils.exceptions import VerifyException

import kaio
import kaio.tile as kt
from kaio.dialects import ptx
from kaio.prelude import Array, MutArray, f16, i32 as I32
from kaio.targets.ptx import sass


def _names(values: list) -> dict:
    return {v: f"%v{i}" for i, v in enumerate(values)}


def test_ld_into_prints_a_guarded_vector_load_into_its_registers():
    addr, p = ptx.RegOp(i64), ptx.RegOp(i1)
    a, b = ptx.RegOp(f32), ptx.RegOp(f32)
    load = ptx.LdIntoOp("global.v2.f32", [addr.result, a.result, b.result], guard=p.result, offset=8)
    ModuleOp([addr, p, a, b, load]).verify()
    names = _names([addr.result, p.result, a.result, b.result])
    assert load.ptx(names.__getitem__, names.__getitem__) == "@%v1 ld.global.v2.f32 {%v2, %v3}, [%v0+8];"
    assert not load.results


def test_ld_into_refuses_a_wrong_count_width_or_destination():
    for spec, dst, match in (
        ("global.v2.f32", ptx.RegOp(f32), "writes 2 registers"),
        ("global.f32", ptx.RegOp(i64), "bit"),
        ("global.b32", ptx.ConstOp(1, i32), r"ptx\.reg"),
    ):
        addr = ptx.RegOp(i64)
        with pytest.raises(VerifyException, match=match):
            ModuleOp([addr, dst, ptx.LdIntoOp(spec, [addr.result, dst.result])]).verify()


@kaio.tile_kernel(num_warps=4)
def scaled_rows(x: Array[f16], out: MutArray[f16], rows: I32, cols: I32, out_rows: I32,
                R: kaio.constexpr = 2, C: kaio.constexpr = 256):  # fmt: skip
    r0 = I32(kt.program_id(0)) * R
    t = kt.load(x, (r0, 0), (R, C), (rows, cols), other=-2.0)
    kt.store(out, (r0, 0), t * 3.0, (out_rows, C))  # the whole tile: masked-off elements show


def _ptx() -> str:
    return kaio.compile(scaled_rows, "sm_80", __divisible__=(("cols", 16), ("rows", 16))).ptx


def test_a_masked_vector_load_writes_registers_preset_to_other_and_no_select_follows():
    text = _ptx()
    loads = re.findall(r"@%p\d+ ld\.global\.v\d\.b32 \{([^}]*)\}", text)
    assert loads
    for dsts in loads:
        for d in dsts.split(", "):  # each destination is set (to the packed `other` pair) before the load
            assert re.search(rf"mov\.b32 {d}, %r\d+;", text)
    assert "selp" not in text


def test_ptxas_zeroes_or_moves_instead_of_selecting_after_the_load():
    if not sass.tools_available():
        pytest.skip("ptxas/cuobjdump wheels not installed")
    report = sass.analyze(_ptx(), "sm_80")["scaled_rows"]
    assert report.spill_bytes == 0
    assert not [i for i in report.instructions if i.opcode.startswith("SEL")]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_masked_off_elements_read_other_and_inside_ones_the_array(arch, rng):
    dev = kaio.Device("sim", arch=arch)
    rows, cols = 3, 160  # the last row block half empty, the columns end inside a thread's vector run
    x = rng.standard_normal((rows, cols)).astype(np.float16)
    out = dev.alloc_from(np.full((4, 256), np.nan, np.float16))
    scaled_rows[2](dev.alloc_from(x), out, rows, cols, 4)
    want = np.full((4, 256), -6.0, np.float32)
    want[:rows, :cols] = x.astype(np.float32) * 3
    np.testing.assert_allclose(out.to_host().astype(np.float32), want, rtol=1e-3)
