"""Loop values that adapt like literals, `**` with a runtime integer exponent, and tuple returns
from device functions (each an error before)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest

import kaio


def test_a_literal_range_variable_adapts_to_the_type_it_meets(load: Callable[..., ModuleType], dev: kaio.Device) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], y: MutArray[u32], z: MutArray[u8], n: u32):
            t = thread_idx_x()
            acc = u32(0)
            for kk in range(8):
                acc += kk + t              # i32 loop value meets u32
                if kk * 2 + t < n:         # a derived loop value, compared with u32
                    y[t] = kk * 4 + t
            s = 0.0
            for j in range(1, 5):
                s += j * x[t]              # meets f32
            x[t] = s
            y[t] = y[t] + acc
            for b in range(250, 256):
                z[t] = b                   # stored into a u8 array
        """
    )
    x, y, z = dev.alloc_from(np.ones(32, np.float32)), dev.zeros(32, np.uint32), dev.zeros(32, np.uint8)
    m.k.launch(dev, x, y, z, 10, grid=1)
    t = np.arange(32)
    last = np.where(t < 10, 4 * np.minimum((9 - t) // 2, 7) + t, 0)
    np.testing.assert_array_equal(y.to_host(), last + 28 + 8 * t)
    np.testing.assert_array_equal(x.to_host(), np.full(32, 10.0))
    np.testing.assert_array_equal(z.to_host(), np.full(32, 255))


@pytest.mark.parametrize(
    ("loop", "use", "message"),
    [
        ("range(-1, 8)", "v = k + thread_idx_x()", "ranges over -1 .. 7, which u32 cannot hold"),
        ("range(0, 300)", "v = k + u8(1)", "which u8 cannot hold"),
        ("range(0, 3000)", "v = f16(1.0) * k", "which f16 cannot hold"),
        ("range(n)", "v = k + thread_idx_x()", "i32 and u32 are different types"),
    ],
)
def test_a_loop_value_adapts_only_where_every_value_fits(compile_error, loop: str, use: str, message: str) -> None:
    err = compile_error(
        f"""
        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[u32], n: i32):
            for k in {loop}:
                {use}
        """
    )
    assert message in err.message


def test_integer_power_with_a_runtime_exponent(load: Callable[..., ModuleType], dev: kaio.Device) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=64)
        def k(b: Array[i32], e: Array[i32], out: MutArray[i32], ub: Array[u8], ue: Array[u8], uo: MutArray[u8]):
            t = thread_idx_x()
            out[t] = b[t] ** e[t]
            uo[t] = ub[t] ** ue[t]
        """
    )
    rng = np.random.default_rng(7)
    b = rng.integers(-4, 5, 64).astype(np.int32)
    e = rng.integers(-3, 40, 64).astype(np.int32)
    b[:4], e[:4] = [1, -1, 0, 3], [-5, -3, -2, 0]
    ub, ue = rng.integers(0, 256, 64).astype(np.uint8), rng.integers(0, 256, 64).astype(np.uint8)
    out, uo = dev.zeros(64, np.int32), dev.zeros(64, np.uint8)
    m.k.launch(dev, dev.alloc_from(b), dev.alloc_from(e), out, dev.alloc_from(ub), dev.alloc_from(ue), uo, grid=1)

    def ref(x: int, n: int, bits: int, signed: bool) -> int:
        if n < 0:
            return x**-n if x in (1, -1) else 0
        r = pow(x, n, 1 << bits)
        return r - (1 << bits) if signed and r >= 1 << (bits - 1) else r

    assert out.to_host().tolist() == [ref(int(x), int(n), 32, True) for x, n in zip(b, e)]
    assert uo.to_host().tolist() == [ref(int(x), int(n), 8, False) for x, n in zip(ub, ue)]


def test_device_functions_return_tuples(load: Callable[..., ModuleType], dev: kaio.Device) -> None:
    m = load(
        """
        @kaio.device
        def divmod_(a: i32, b: i32):
            return a // b, a % b

        @kaio.device
        def first_negative(x: Array[f32], n: u32) -> tuple[u32, f32]:
            for i in range(n):
                if x[i] < 0.0:
                    return i, x[i]       # from inside a loop: the annotation types the slots
            return n, 0.0

        @kaio.device
        def ordered(a: f32, b: f32):
            if a < b:
                return a, b
            return b, a

        @kaio.gpu_kernel(block_size=32)
        def k(x: Array[f32], q: MutArray[i32], r: MutArray[i32], w: MutArray[f32], lo: MutArray[f32]):
            t = i32(thread_idx_x())
            a, b = divmod_(t * 7 - 50, 6)
            q[t] = a
            r[t] = b
            where, value = first_negative(x, 32)
            small, big = ordered(x[t], value)
            w[t] = f32(where) + value
            lo[t] = small
        """
    )
    x = np.arange(32, dtype=np.float32)
    x[5] = -2.0
    q, r, w, lo = dev.zeros(32, np.int32), dev.zeros(32, np.int32), dev.zeros(32), dev.zeros(32)
    m.k.launch(dev, dev.alloc_from(x), q, r, w, lo, grid=1)
    v = np.arange(32) * 7 - 50
    np.testing.assert_array_equal(q.to_host(), np.trunc(v / 6).astype(np.int32))
    np.testing.assert_array_equal(r.to_host(), np.fmod(v, 6))
    np.testing.assert_array_equal(w.to_host(), np.full(32, 3.0))
    np.testing.assert_array_equal(lo.to_host(), np.minimum(x, -2.0))


def test_returns_of_different_lengths_are_an_error(compile_error) -> None:
    err = compile_error(
        """
        @kaio.device
        def f(a: i32):
            if a > 0:
                return a, a
            return a

        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[i32]):
            y[0] = f(y[1])
        """
    )
    assert "returns one value here but 2 values elsewhere" in err.message
