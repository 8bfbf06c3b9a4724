"""``cdiv``: ceiling division as a kernel builtin (``kaio.cdiv``, the prelude's ``cdiv``,
``kt.cdiv``) on the simulator against numpy, folded on constants, refused on floats and a
divisor that is not positive; and the same object on the host for grids."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest
from xdsl.dialects import arith

import kaio
import kaio.tile as kt

Load = Callable[..., ModuleType]
POISON = 0xDEAD


@pytest.fixture(scope="module")
def dev() -> kaio.Device:
    return kaio.Device("sim")


def test_simt_cdiv_of_runtime_values_matches_numpy(load: Load, dev: kaio.Device) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=64)
        def k(a: Array[u32], b: Array[u32], y: MutArray[u32], s: MutArray[i32], n: u32):
            i = thread_idx_x()
            if i < n:
                y[i] = kaio.cdiv(a[i], b[i])
                s[i] = cdiv(i32(a[i]), 7)
        """
    )
    rng = np.random.default_rng()
    n = 50
    a = rng.integers(0, 1 << 20, n, dtype=np.uint32)
    b = rng.integers(1, 1000, n, dtype=np.uint32)
    y = dev.alloc_from(np.full(n, POISON, np.uint32))
    s = dev.alloc_from(np.full(n, POISON, np.int32))
    m.k[1](dev.alloc_from(a), dev.alloc_from(b), y, s, n)
    np.testing.assert_array_equal(y.to_host(), -(-a.astype(np.int64) // b))
    np.testing.assert_array_equal(s.to_host(), -(-a.astype(np.int64) // 7))


def test_tile_cdiv_of_a_tile_and_of_constexprs(load: Load, dev: kaio.Device) -> None:
    m = load(
        """
        import kaio.tile as kt

        @kaio.tile_kernel(num_warps=1)
        def k(y: MutArray[i32], n: i32, BLOCK: constexpr, D: constexpr):
            r = kt.arange(BLOCK)
            kt.store(y, r, kt.cdiv(r, D) + kt.cdiv(n, BLOCK) * 1000, mask=r < n)
        """
    )
    y = dev.alloc_from(np.full(64, POISON, np.int32))
    m.k[1](y, 60, BLOCK=64, D=5)
    r = np.arange(64)
    want = np.where(r < 60, -(-r // 5) + 1000, POISON)
    np.testing.assert_array_equal(y.to_host(), want)


def test_constant_cdiv_folds(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[i32], BLOCK: constexpr):
            y[0] = cdiv(1000, BLOCK)
        """
    )
    ir = m.k.build({"BLOCK": 256})
    divisions = [op for op in ir.module.walk() if isinstance(op, (arith.DivUIOp, arith.FloorDivSIOp, arith.DivSIOp))]
    consts = [op.value.value.data for op in ir.module.walk() if isinstance(op, arith.ConstantOp)]
    assert not divisions and 4 in consts


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("cdiv(x[0], 2)", r"`cdiv` takes integers, got f32"),
        ("cdiv(n, 0)", r"`cdiv` divides by a positive integer, got 0"),
        ("cdiv(n, -4)", r"`cdiv` divides by a positive integer, got -4"),
        ("cdiv(n)", r"cdiv\(a, b\)"),
    ],
)
def test_bad_cdiv_is_a_compile_error_at_its_line(compile_error, expr: str, message: str) -> None:
    err = compile_error(
        f"""
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], n: u32):
            x[0] = f32({expr})
        """
    )
    assert err.line == 4
    assert __import__("re").search(message, str(err)), str(err)


def test_the_host_cdiv_is_the_builtin_and_sizes_grids() -> None:
    from kaio.runtime.grid import cdiv as grid_cdiv

    assert kaio.cdiv is kt.cdiv is grid_cdiv
    assert [kaio.cdiv(n, 128) for n in (0, 1, 128, 129, 1000)] == [0, 1, 1, 2, 8]
    assert "cdiv" in dir(kaio) and "compile" in dir(kaio) and "tile_kernel" in dir(kaio)
