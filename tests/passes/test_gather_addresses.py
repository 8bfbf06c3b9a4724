"""Gathers and scatters (``kt.load``/``kt.store`` with an index tile) address ``x + c`` as
element x's address plus c elements as the instruction's immediate offset, so the fields of one
block at known distances share one 64-bit address; masked gathers preset their register to
``other`` and load over it, with no select after the load."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f32, i32, static_range
from kaio.targets.ptx import sass


@kaio.tile_kernel(num_warps=1)
def block_fields(x: Array[f32], starts: Array[i32], out: MutArray[f32], n: i32, B: kaio.constexpr = 32):
    rows = kt.arange(B)
    live = rows < n
    at = kt.load(starts, rows, live)  # each row's first element: may be -1, read as at + 1 ...
    total = kt.load(x, at + 1, live, other=100.0) + kt.load(x, at + 2, live, other=10.0)
    total = total + 3.0 * kt.load(x, at + 1 + 2, live, other=1.0)
    kt.store(out, rows * 2, total, live)  # a scatter, to even elements
    kt.store(out, rows * 2 + 1, kt.load(x, at + 4, live, other=0.5), live)  # and at an immediate


def _ptx() -> str:
    return kaio.compile(block_fields, "sm_80").ptx


def test_the_constant_terms_become_immediate_offsets_of_one_address():
    text = _ptx()
    loads = re.findall(r"ld\.global\.f32 %f\d+, \[(%rd\d+)(\+\d+)?\];", text)
    assert sorted(imm for _, imm in loads if imm) == ["+12", "+16", "+4", "+8"]
    # at + 1, at + 2, at + 3 and at + 4 from at's address (signed: at may be below 0); at is a
    # masked load's register, so ptx-fold leaves the repeats to ptxas (the SASS test below)
    indices = {re.search(rf"mad\.wide\.s32 {re.escape(base)}, (%r\d+), 4,", text).group(1) for base, imm in loads if imm}
    assert len(indices) == 1
    assert re.search(r"st\.global\.f32 \[%rd\d+\+4\]", text)  # rows * 2 + 1: the store's offset
    assert "selp" not in text  # masked gathers load over their preset register


def test_ptxas_builds_one_address_for_the_block():
    if not sass.tools_available():
        pytest.skip("ptxas/cuobjdump wheels not installed")
    report = sass.analyze(_ptx(), "sm_80")["block_fields"]
    loads = [i for i in report.instructions if i.opcode.startswith("LDG")]
    assert len(loads) == 5  # starts, then the four fields
    assert not [i for i in report.instructions if i.opcode.startswith("SEL")]
    assert len({re.sub(r"\+0x\w+", "", i.operands.split(",")[-1]) for i in loads[1:]}) == 1


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_an_index_below_zero_plus_a_constant_reads_the_element_it_names(arch, rng):
    dev = kaio.Device("sim", arch=arch)
    n = 27  # the last rows masked off: they read `other`, and write nothing
    x = rng.standard_normal(200).astype(np.float32)
    starts = rng.integers(-1, 190, 32).astype(np.int32)
    starts[:3] = -1, 0, 195  # at + 1 == 0 (at below zero), and the last elements of x
    out = dev.alloc_from(np.full(64, np.nan, np.float32))
    block_fields[1](dev.alloc_from(x), dev.alloc_from(starts), out, n)
    s = starts[:n].astype(np.int64)
    want = np.full(64, np.nan, np.float32)
    want[0 : 2 * n : 2] = x[s + 1] + x[s + 2] + 3 * x[s + 3]
    want[1 : 2 * n : 2] = x[s + 4]
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-6)


@kaio.tile_kernel(num_warps=1)
def strided_columns(x: Array[f32], out: MutArray[f32], k: i32, R: kaio.constexpr = 8, C: kaio.constexpr = 4):
    rows, cols = kt.expand_dims(kt.arange(R), 1), kt.expand_dims(kt.arange(C), 0)
    total = kt.zeros((R, C), f32)
    for j in static_range(4):
        total = total + (j + 1.0) * kt.load(x, rows * k + (4 * cols + j))  # the constant inside a summand
    kt.store(out, (0, 0), total, (R, C))


def test_a_constant_inside_either_summand_becomes_the_offset(rng):
    """``row * k + (4 c + j)``: j is taken out of the inner sum, so the four columns j of a row
    share one address (the sum of the other terms, the same for every j) at offsets 4 j bytes."""
    text = kaio.compile(strided_columns, "sm_80").ptx
    imms = re.findall(r"ld\.global(?:\.nc)?\.f32 %f\d+, \[%rd\d+(\+\d+)?\];", text)
    assert sorted(set(imms)) == ["", "+12", "+4", "+8"]
    dev = kaio.Device("sim")
    k = 16
    xs = rng.standard_normal(8 * k).astype(np.float32)
    out = dev.alloc_from(np.full((8, 4), np.nan, np.float32))
    strided_columns[1](dev.alloc_from(xs), out, k)
    m = xs.reshape(8, k)
    want = sum((j + 1.0) * m[:, 4 * np.arange(4) + j] for j in range(4))
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-6)
