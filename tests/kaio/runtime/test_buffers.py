"""Buffers: allocation, host copies, views, deterministic freeing."""

from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import KaioError, KaioTypeError
from kaio.prelude import bf16, f16, i32, u8

DTYPES = [
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.float64,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_every_dtype(sim: kaio.Device, rng: np.random.Generator, dtype: type) -> None:
    host: np.ndarray = (rng.standard_normal((3, 5)) * 50).astype(dtype)
    buf = sim.alloc_from(host)
    assert buf.shape == (3, 5) and buf.dtype == np.dtype(dtype) and buf.nbytes == host.nbytes
    assert buf.device is sim and buf.size == 15 and buf.ndim == 2 and len(buf) == 3
    back = buf.to_host()
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back.view(np.uint8), host.view(np.uint8))


def test_zeros_empty_and_dtype_spellings(sim: kaio.Device) -> None:
    assert (sim.zeros((4, 4), "float32").to_host() == 0).all()
    assert sim.zeros(7, i32).dtype == np.int32
    assert sim.empty(3, bf16).dtype == np.dtype(ml_dtypes.bfloat16)
    assert sim.empty(3, f16).kaio_type is f16
    assert sim.empty(3, np.uint8).kaio_type is u8
    assert sim.zeros(5).dtype == np.float32
    with pytest.raises(KaioTypeError, match="not a kaio element type"):
        sim.zeros(3, np.complex64)
    with pytest.raises(KaioTypeError, match="non-negative ints"):
        sim.zeros(-1)


def test_copy_from_checks_shape_and_dtype(sim: kaio.Device, rng: np.random.Generator) -> None:
    buf = sim.zeros((2, 3), np.float32)
    data = rng.standard_normal((2, 3)).astype(np.float32)
    buf.copy_from(data)
    np.testing.assert_array_equal(buf.to_host(), data)
    with pytest.raises(
        KaioTypeError, match=r"the array is float64\[2, 3\], the buffer is float32\[2, 3\]"
    ):
        buf.copy_from(data.astype(np.float64))
    with pytest.raises(KaioTypeError, match=r"float32\[6\]"):
        buf.copy_from(data.reshape(6))
    other = sim.alloc_from(data * 2)
    buf.copy_from(other)
    np.testing.assert_array_equal(buf.to_host(), data * 2)
    buf.copy_from(kaio.Device("sim", arch="sm_90").alloc_from(data))  # across devices: via host
    np.testing.assert_array_equal(buf.to_host(), data)
    with pytest.raises(KaioTypeError, match="read-only"):
        buf.readonly().copy_from(data)


def test_non_contiguous_input_and_lists(sim: kaio.Device) -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(sim.alloc_from(a.T).to_host(), a.T)
    np.testing.assert_array_equal(sim.alloc_from([1.5, 2.5]).to_host(), [1.5, 2.5])


def test_readonly_view_and_reshape_share_memory(sim: kaio.Device) -> None:
    buf = sim.alloc_from(np.arange(6, dtype=np.float32))
    view = buf.readonly()
    assert view.is_readonly and not buf.is_readonly and view.ptr == buf.ptr
    grid = buf.reshape(2, 3)
    assert grid.shape == (2, 3) and grid.ptr == buf.ptr
    buf.copy_from(np.full(6, 7, np.float32))
    assert (view.to_host() == 7).all() and (grid.to_host() == 7).all()
    with pytest.raises(KaioTypeError, match="cannot reshape"):
        buf.reshape(4, 2)
    assert "read-only" in repr(view) and "f32[6]" in repr(buf)


def test_free_with_and_gc_release_memory(sim: kaio.Device) -> None:
    memory = sim.simulator.memory
    gc.collect()
    before = memory.bytes_allocated
    buf = sim.zeros(1000, np.float32)
    assert memory.bytes_allocated == before + 4000
    buf.free()
    assert memory.bytes_allocated == before and buf.is_freed
    buf.free()  # idempotent
    with pytest.raises(KaioError, match="freed buffer"):
        buf.to_host()
    with pytest.raises(KaioError, match="freed buffer"):
        _ = buf.ptr
    with sim.zeros(100, np.int32) as scoped:
        assert memory.bytes_allocated == before + 400
        view = scoped.readonly()
    assert memory.bytes_allocated == before and view.is_freed
    kept = sim.zeros(10, np.float32)
    view = kept.readonly()
    del kept
    gc.collect()
    assert memory.bytes_allocated == before + 40, "a live view keeps the memory"
    del view
    gc.collect()
    assert memory.bytes_allocated == before


def test_zero_size_buffers(sim: kaio.Device) -> None:
    empty = sim.zeros(0, np.float32)
    assert empty.nbytes == 0 and empty.ptr == 0 and empty.to_host().shape == (0,)
    empty.copy_from(np.zeros(0, np.float32))
    empty.free()


def test_alloc_from_a_buffer_copies(sim: kaio.Device) -> None:
    a = sim.alloc_from(np.arange(4, dtype=np.int64))
    b = sim.alloc_from(a)
    assert b.ptr != a.ptr
    a.copy_from(np.zeros(4, np.int64))
    np.testing.assert_array_equal(b.to_host(), np.arange(4))
