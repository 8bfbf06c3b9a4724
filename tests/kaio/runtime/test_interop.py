"""Interop: __cuda_array_interface__ objects as kernel arguments, DLPack in and out."""

from __future__ import annotations

import gc
import math
import struct
import sys
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from acceptance_kernels import saxpy, vector_add

import kaio
from kaio import KaioTypeError
from kaio.runtime import dlpack
from kaio.runtime.args import bf16_bits


class FakeCuPyArray:
    """What CuPy/Numba/PyTorch expose: just the interface dict, over memory someone else owns."""

    def __init__(
        self,
        ptr: int,
        shape: tuple[int, ...],
        typestr: str,
        *,
        readonly: bool = False,
        strides: tuple[int, ...] | None = None,
        version: int = 3,
        stream: int | None = None,
    ) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, readonly),
            "strides": strides,
            "version": version,
            "stream": stream,
        }


def raw_sim_array(sim: kaio.Device, data: np.ndarray) -> int:
    """An allocation made directly in the simulator's memory, not through kaio.Buffer."""
    memory = sim.simulator.memory
    ptr = memory.alloc(data.nbytes)
    memory.write(ptr, data)
    return int(ptr)


def test_a_cuda_array_interface_object_over_simulator_memory_is_accepted(
    sim: kaio.Device, rng: np.random.Generator
) -> None:
    n = 300
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    memory = sim.simulator.memory
    pa, pb = raw_sim_array(sim, a), raw_sim_array(sim, b)
    pc = raw_sim_array(sim, np.full(n, np.nan, np.float32))
    fa, fb = (
        FakeCuPyArray(pa, (n,), "<f4", readonly=True),
        FakeCuPyArray(pb, (n,), "<f4", version=2),
    )
    fc = FakeCuPyArray(pc, (n,), "<f4", strides=(4,))
    vector_add[kaio.cdiv(n, 256)](fa, fb, fc, n)  # no kaio Buffer: the default device runs it
    out = memory.read(pc, 4 * n).view(np.float32)
    np.testing.assert_array_equal(out, a + b)
    for p in (pa, pb, pc):
        memory.free(p)


def test_cai_objects_are_checked(sim: kaio.Device) -> None:
    y = sim.zeros(64, np.float32)
    ptr = raw_sim_array(sim, np.zeros(64, np.float32))
    x = sim.zeros(64, np.float32)

    def refused(obj: Any, pattern: str, as_output: bool = False) -> None:
        with pytest.raises(KaioTypeError, match=pattern):
            if as_output:
                saxpy.launch(sim, x, obj, 2.0, 64, grid=1)
            else:
                saxpy.launch(sim, obj, y, 2.0, 64, grid=1)

    refused(
        FakeCuPyArray(ptr, (64,), "<f4", readonly=True),
        r"`y: MutArray\[f32\]`: the array is read-only",
        True,
    )
    refused(FakeCuPyArray(ptr, (64,), "<f8"), r"got a float64 array .*expected f32")
    refused(FakeCuPyArray(ptr, (8, 8), "<f4", strides=(4, 32)), r"not C-contiguous")
    refused(FakeCuPyArray(ptr, (64,), "<c8"), r"typestr '<c8' is not a kaio type")
    refused(FakeCuPyArray(ptr, (64,), "<f4", version=1), r"version 1 is not supported")
    refused(FakeCuPyArray(ptr + 64 * 4, (64,), "<f4"), r"is not simulator memory")
    refused(FakeCuPyArray(ptr, (65,), "<f4"), r"\+260 bytes\) is not simulator memory")
    refused(FakeCuPyArray(0x1234, (64,), "<f4"), r"pointer 0x1234")
    # A C-contiguous 2-D view with explicit strides is fine, and so is a unit dimension's stride.
    saxpy.launch(
        sim, FakeCuPyArray(ptr, (8, 1, 8), "<f4", strides=(32, 999, 4)), y, 2.0, 64, grid=1
    )
    sim.simulator.memory.free(ptr)


def test_kaio_buffers_expose_the_interface(sim: kaio.Device) -> None:
    buf = sim.zeros((2, 3), np.int16)
    cai = buf.__cuda_array_interface__
    assert cai == {
        "shape": (2, 3),
        "typestr": "<i2",
        "data": (buf.ptr, False),
        "strides": None,
        "version": 3,
        "stream": None,
    }
    assert buf.readonly().__cuda_array_interface__["data"] == (buf.ptr, True)
    # A kaio buffer wrapped as a foreign object is accepted, and keeps its read-only flag.
    x = sim.alloc_from(np.arange(64, dtype=np.float32))
    y = sim.zeros(64, np.float32)
    saxpy[1](FakeCuPyArray(**_cai_kwargs(x.readonly())), y, 1.0, 64)
    np.testing.assert_array_equal(y.to_host(), np.arange(64, dtype=np.float32))


def _cai_kwargs(buf: kaio.Buffer) -> dict[str, Any]:
    cai = buf.__cuda_array_interface__
    return {
        "ptr": cai["data"][0],
        "shape": cai["shape"],
        "typestr": cai["typestr"],
        "readonly": cai["data"][1],
    }


# --- DLPack --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.int64])
def test_numpy_round_trip_through_dlpack(
    sim: kaio.Device, rng: np.random.Generator, dtype: type
) -> None:
    host: np.ndarray = (rng.standard_normal((4, 6)) * 20).astype(dtype)
    buf = sim.alloc_from(_DLPackOnly(host))  # a producer numpy reads only through DLPack
    assert buf.__dlpack_device__() == (dlpack.KDL_CPU, 0)
    back = np.from_dlpack(buf)
    np.testing.assert_array_equal(back, host)
    assert back.dtype == host.dtype and back.shape == host.shape
    assert not np.shares_memory(back, host)


def test_simulator_export_is_a_copy_and_keeps_read_only(sim: kaio.Device) -> None:
    buf = sim.alloc_from(np.arange(5, dtype=np.float32))
    snapshot = np.from_dlpack(buf)
    buf.copy_from(np.zeros(5, np.float32))
    np.testing.assert_array_equal(snapshot, np.arange(5))  # a snapshot, by design (see buffer.py)
    assert not np.from_dlpack(buf.readonly()).flags.writeable
    with pytest.raises(BufferError, match="host copy"):
        buf.__dlpack__(copy=False)
    with pytest.raises(BufferError, match="export to"):
        buf.__dlpack__(dl_device=(dlpack.KDL_CUDA, 0))
    bf = sim.alloc_from(np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16))
    view = dlpack.consume(bf.__dlpack__(max_version=(1, 0)))  # numpy cannot import bf16; we can
    assert view.dtype == np.dtype(ml_dtypes.bfloat16) and view.shape == (2,)
    assert ctypes_read(view.ptr, 4) == np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16).tobytes()
    view.release()


def ctypes_read(ptr: int, n: int) -> bytes:
    import ctypes

    return ctypes.string_at(ptr, n)


class _DLPackOnly:
    """A host array visible only through the DLPack protocol (like a CPU tensor of some library)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()


def test_host_dlpack_as_kernel_argument_gets_a_hint(sim: kaio.Device) -> None:
    y = sim.zeros(4, np.float32)
    with pytest.raises(KaioTypeError, match=r"host memory \(DLPack device kDLCPU\).*alloc_from"):
        saxpy[1](_DLPackOnly(np.ones(4, np.float32)), y, 1.0, 4)


def test_consuming_a_capsule_reads_the_dltensor() -> None:
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    for array, readonly in ((base, False), (base[:, ::2], False), (_readonly(base), True)):
        view = dlpack.consume(dlpack.request(array, None))
        assert view.ptr == array.ctypes.data and view.shape == array.shape
        assert view.dtype == np.int32 and view.device == (dlpack.KDL_CPU, 0)
        assert view.readonly is readonly
        assert view.c_contiguous is array.flags.c_contiguous
        view.release()
        view.release()  # idempotent
    with pytest.raises(BufferError, match="not an unconsumed DLPack capsule"):
        capsule = base.__dlpack__()
        dlpack.consume(capsule)
        dlpack.consume(capsule)


def _readonly(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.flags.writeable = False
    return b


@pytest.mark.parametrize("versioned", [False, True])
def test_export_is_zero_copy_and_released_by_the_consumer(versioned: bool) -> None:
    """The export path GPU buffers use, pointed at host memory so numpy can consume it here."""
    owner = np.arange(12, dtype=np.float32).reshape(3, 4)

    class Producer:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (dlpack.KDL_CPU, 0)

        def __dlpack__(self, **kwargs: Any) -> Any:
            return dlpack.export(
                owner.ctypes.data,
                owner.shape,
                owner.dtype,
                (dlpack.KDL_CPU, 0),
                owner,
                versioned=versioned,
            )

    before, refs = dlpack.live_exports(), sys.getrefcount(owner)
    out = np.from_dlpack(Producer())
    assert np.shares_memory(out, owner) and dlpack.live_exports() == before + 1
    assert sys.getrefcount(owner) == refs + 1, "the owner stays alive while exported"
    np.testing.assert_array_equal(out, owner)
    del out
    gc.collect()
    assert dlpack.live_exports() == before and sys.getrefcount(owner) == refs
    capsule = Producer().__dlpack__()  # never consumed: the capsule's destructor releases it
    assert dlpack.live_exports() == before + 1
    del capsule
    gc.collect()
    assert dlpack.live_exports() == before


def _exact_bf16(value: float) -> float:
    """Round to bfloat16 by exact rational arithmetic: the reference for bf16_bits."""
    if value == 0 or not math.isfinite(value):
        return value
    x = Fraction(value)
    e = math.floor(math.log2(abs(value)))
    while Fraction(2) ** e > abs(x):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(x):
        e += 1
    quantum = Fraction(2) ** (max(e, -126) - 7)
    q = x / quantum
    n = math.floor(q)
    if q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2):
        n += 1
    return float(n * quantum)


def test_bf16_scalars_round_once(rng: np.random.Generator) -> None:
    values = list(rng.standard_normal(300) * 10.0 ** rng.integers(-40, 38, 300))
    values += [1.0 + 2**-8, 1.0 + 2**-8 + 2**-40, 3.0 * 2**-135, -0.0, float("inf"), 1e-45]
    for v in values:
        bits = bf16_bits(v)
        got = float(np.array([bits], dtype=np.uint16).view(ml_dtypes.bfloat16)[0])
        assert got == _exact_bf16(v) and math.copysign(1, got) == math.copysign(1, v), v
    assert bf16_bits(float("nan")) & 0x7FC0 == 0x7FC0
    # The double-rounding case ml_dtypes gets wrong: just above a tie, seen through float32.
    above_tie = 1.0 + 2**-8 + 2**-30  # float32(above_tie) is the tie itself, which rounds down
    assert struct.pack("<f", above_tie) == struct.pack("<f", 1.0 + 2**-8)
    assert bf16_bits(above_tie) == 0x3F81
