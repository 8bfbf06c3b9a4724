"""Accesses whose alignment is not proven (a row length that is not a multiple of the vector, a
window starting at an odd column) still move 16 bytes at a time: a load reads the two aligned
chunks around each thread's 16 bytes and shifts them into place; a store writes the aligned
chunk below its bytes, completed with the previous lane's (a shuffle). Never a byte outside the
array (the simulator faults on any): element accesses at the ends of each row."""

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f16, f32, i32

from .conftest import poisoned


def window_kernel(T):  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def window(x: Array[T], out: MutArray[T], sums: MutArray[f32], rows: i32, cols: i32, ld: i32, shift: i32,
               C: kaio.constexpr = 128, R: kaio.constexpr = 1):  # fmt: skip
        r0 = i32(kt.program_id(0)) * R
        t = kt.load(x, (r0, shift), (R, C), (rows, shift + cols), strides=(ld, 1), other=7.0)
        kt.store(out, (r0, 0), t * 2.0 + 1.0, (rows, cols))
        kt.store(sums, (r0,), kt.sum(f32(t), 1), (rows,))  # `other` where the tile passes the row

    return window


KERNELS = {"f16": (window_kernel(f16), np.float16), "f32": (window_kernel(f32), np.float32)}


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("cols", [1, 7, 64, 1000, 4096 + 3])
def test_windows_at_any_column_read_right(dev, rng, dtype, cols):
    kernel, npt = KERNELS[dtype]
    rows = 3
    for shift in (0, 1, 3, 5):
        ld = shift + cols  # the window ends at the array's last element: an over-read faults
        x = rng.standard_normal((rows, ld)).astype(npt)
        out, sums = poisoned(dev, (rows, cols), npt), poisoned(dev, (rows,), np.float32)
        c = max(1 << max(cols - 1, 0).bit_length(), 8)
        kernel[rows](dev.alloc_from(x), out, sums, rows, cols, ld, shift, C=c)
        want = (x[:, shift:].astype(np.float32) * 2 + 1).astype(npt)
        np.testing.assert_array_equal(out.to_host(), want, err_msg=f"shift {shift}")
        np.testing.assert_allclose(sums.to_host(), x[:, shift:].astype(np.float64).sum(1) + 7 * (c - cols), rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_several_rows_per_program_each_with_its_own_offset(dev, rng, dtype):
    kernel, npt = KERNELS[dtype]
    rows, cols = 9, 37  # 8 lanes per row of 64 columns (f16): runs of lanes end at each row
    for shift in (0, 1, 2, 3):
        ld = shift + cols
        x = rng.standard_normal((rows, ld)).astype(npt)
        out, sums = poisoned(dev, (rows, cols), npt), poisoned(dev, (rows,), np.float32)
        kernel[kaio.cdiv(rows, 4)](dev.alloc_from(x), out, sums, rows, cols, ld, shift, C=64, R=4)
        np.testing.assert_allclose(sums.to_host(), x[:, shift:].astype(np.float64).sum(1) + 7 * (64 - cols), rtol=1e-4, atol=1e-2)
        want = (x[:, shift:].astype(np.float32) * 2 + 1).astype(npt)
        np.testing.assert_array_equal(out.to_host(), want, err_msg=f"shift {shift}")


def test_unproven_alignment_moves_16_bytes_and_shifts_them():
    text = kaio.compile(KERNELS["f16"][0], "sm_80", C=1024).ptx
    assert "ld.global.v4.b32" in text and "prmt.b32" in text  # halves: any even byte offset
    assert "st.global.v4.b32" in text and "shfl.sync.up.b32" in text
    assert "ld.global.b16" in text and "st.global.b16" in text  # the ends of a row
    text = kaio.compile(KERNELS["f32"][0], "sm_80", C=1024).ptx
    assert "ld.global.v4.b32" in text and "st.global.v4.b32" in text and "prmt" not in text  # whole words
