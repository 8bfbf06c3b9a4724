"""``@kaio.builtin``: a kernel builtin defined outside kaio, compiled by its builder in SIMT
kernels and lifted element by element over tiles; its misuse is a compile error at the call."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest

import kaio

Load = Callable[..., ModuleType]

BUILTINS = """
from xdsl.dialects import arith
import kaio.tile as kt

@kaio.builtin("scaled_add(x, y, k)")
def scaled_add(call, x, y, k):
    a = call.scalar(x, "scaled_add's x")
    if not a.dtype.is_float:
        raise call.error(f"scaled_add takes floats, got {a.dtype.name}", "cast it: f32(x)")
    b = call.scalar(y, "scaled_add's y", a.dtype)
    factor = call.scalar(float(call.constant(k, "scaled_add's k")), "k", a.dtype)
    return call.result(arith.AddfOp(call.emit(arith.MulfOp(a.ssa, factor.ssa)), b.ssa), a.dtype)

@kaio.builtin("nothing(x)")
def nothing(call, x):
    return None
"""


def test_a_user_builtin_runs_in_simt_and_tile_kernels(load: Load) -> None:
    m = load(
        BUILTINS
        + """
@kaio.gpu_kernel(block_size=64)
def simt(x: Array[f32], y: MutArray[f32], n: u32):
    i = thread_idx_x()
    if i < n:
        y[i] = scaled_add(x[i], 1.0, 3)

@kaio.tile_kernel(num_warps=2)
def tiled(x: Array[f32], y: MutArray[f32], n: i32, BLOCK: constexpr):
    r = kt.arange(BLOCK)
    kt.store(y, r, scaled_add(kt.load(x, r, mask=r < n), 0.5, BLOCK), mask=r < n)
"""
    )
    dev = kaio.Device("sim")
    x = np.random.default_rng().standard_normal(64).astype(np.float32)
    y = dev.alloc_from(np.full(64, np.nan, np.float32))
    m.simt[1](dev.alloc_from(x), y, 64)
    np.testing.assert_allclose(y.to_host(), x * 3 + 1, rtol=1e-6)
    y = dev.alloc_from(np.full(64, np.nan, np.float32))
    m.tiled[1](dev.alloc_from(x), y, 64, BLOCK=64)
    np.testing.assert_allclose(y.to_host(), x * 64 + 0.5, rtol=1e-6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("scaled_add(x[0], 1.0)", r"`scaled_add\(x, y, k\)`: missing a required argument: 'k'"),
        ("scaled_add(n, 1, 2)", r"scaled_add takes floats, got u32"),
        ("scaled_add(x[0], 1.0, n)", r"scaled_add's k must be known at compile time"),
        ("nothing(x[0])", r"the builtin `nothing\(x\)` returned None"),
    ],
)
def test_misuse_is_a_compile_error_at_the_call(compile_error, call: str, message: str) -> None:
    err = compile_error(
        BUILTINS
        + f"""
@kaio.gpu_kernel(block_size=32)
def k(x: MutArray[f32], n: u32):
    x[0] = f32({call})
"""
    )
    assert err.line == BUILTINS.count("\n") + 4
    assert __import__("re").search(message, str(err)), str(err)


def test_a_user_builtin_is_a_marker_on_the_host() -> None:
    @kaio.builtin("host_only(x)")
    def host_only(call, x):
        return call.result(call.scalar(x, "x").ssa, call.scalar(x, "x").dtype)

    with pytest.raises(kaio.KaioError, match="can only be called inside"):
        host_only(1.0)
    with pytest.raises(kaio.KaioTypeError, match='read like "name\\(args\\)"'):
        kaio.builtin("no_parentheses")
    with pytest.raises(kaio.KaioTypeError, match="must take the BuiltinCall first"):
        kaio.builtin("f()")(lambda: None)
