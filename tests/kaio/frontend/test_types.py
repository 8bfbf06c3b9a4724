"""Strict types: literal adaptation, casts, signedness-driven ops, compile-time folding."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import arith

import kaio
from kaio import dtypes
from kaio.dialects import kernel as kd

Load = Callable[..., ModuleType]

INT_TYPES = [t for t in dtypes.ALL_TYPES if t.is_int]
FLOAT_TYPES = [t for t in dtypes.ALL_TYPES if t.is_float and not t.is_fp8]  # fp8 has no arithmetic: test_fp8.py
NUMERIC = INT_TYPES + FLOAT_TYPES


def body_ops(ir: Any) -> list[Any]:
    """The ops a kernel body computes (no markers, constants, stores or the return)."""
    skip = (kd.SourceLocOp, arith.ConstantOp, kd.StoreOp, kd.ReturnOp, kd.KernelFuncOp)
    return [op for op in ir.module.walk() if op.parent_op() is ir.func and not isinstance(op, skip)]


@pytest.fixture(scope="module")
def literal_kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One kernel per numeric type T: ``y[0] = x + V`` with ``x: T`` and a constexpr ``V``."""
    import importlib.util

    code = "import kaio\nfrom kaio.prelude import *\n"
    for t in NUMERIC:
        code += (
            f"@kaio.gpu_kernel(block_size=32)\n"
            f"def add_{t.name}(y: MutArray[{t.name}], x: {t.name}, V: kaio.constexpr = 0):\n"
            f"    y[0] = x + V\n"
        )
    path = tmp_path_factory.mktemp("lit") / "literal_kernels.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("literal_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {t.name: getattr(module, f"add_{t.name}") for t in NUMERIC}


def added_constant(ir: Any) -> Any:
    add = next(op for op in ir.module.walk() if isinstance(op, arith.AddiOp | arith.AddfOp))
    return add.rhs.owner.value


@settings(max_examples=60, deadline=None)
@given(t=st.sampled_from(INT_TYPES), value=st.integers(-(2**65), 2**65))
def test_int_literal_adapts_to_int_types_in_range(
    literal_kernels: dict[str, Any], t: Any, value: int
) -> None:
    lo, hi = (
        (0, 2**t.bits - 1) if t.kind == "uint" else (-(2 ** (t.bits - 1)), 2 ** (t.bits - 1) - 1)
    )
    kernel = literal_kernels[t.name]
    if lo <= value <= hi:
        attr = added_constant(kernel.build({"V": value}))
        assert attr.value.data % 2**t.bits == value % 2**t.bits  # the same bits, signless
    else:
        with pytest.raises(kaio.KaioCompileError, match=f"out of range for {t.name}"):
            kernel.build({"V": value})


@settings(max_examples=40, deadline=None)
@given(
    t=st.sampled_from(FLOAT_TYPES), value=st.floats(allow_nan=False, allow_infinity=False, width=64)
)
def test_float_literal_adapts_to_float_types_rounded(
    literal_kernels: dict[str, Any], t: Any, value: float
) -> None:
    kernel = literal_kernels[t.name]
    with np.errstate(over="ignore"):
        expected = float(t.np_dtype.type(value))
    if math.isinf(expected):
        with pytest.raises(kaio.KaioCompileError, match=f"out of range for {t.name}"):
            kernel.build({"V": value})
    else:
        assert added_constant(kernel.build({"V": value})).value.data == expected


@settings(max_examples=20, deadline=None)
@given(t=st.sampled_from(INT_TYPES), value=st.floats(allow_nan=False, allow_infinity=False))
def test_float_literal_never_adapts_to_int_types(
    literal_kernels: dict[str, Any], t: Any, value: float
) -> None:
    with pytest.raises(kaio.KaioCompileError, match=f"cannot be used as {t.name}"):
        literal_kernels[t.name].build({"V": value})


@settings(max_examples=20, deadline=None)
@given(t=st.sampled_from(FLOAT_TYPES), value=st.integers(-(2**20), 2**20))
def test_int_literal_adapts_to_float_types(
    literal_kernels: dict[str, Any], t: Any, value: int
) -> None:
    with np.errstate(over="ignore"):
        expected = float(t.np_dtype.type(value))
    if math.isinf(expected):  # beyond f16's 65504
        with pytest.raises(kaio.KaioCompileError, match=f"out of range for {t.name}"):
            literal_kernels[t.name].build({"V": value})
        return
    assert added_constant(literal_kernels[t.name].build({"V": value})).value.data == expected


def _cast_expectation(s: Any, t: Any) -> list[str]:
    if s is t:
        return []
    if s.is_fp8 and not t.is_float:  # fp8 converts to and from floats only: by f32
        return ["arith.extf", *_cast_expectation(dtypes.f32, t)]
    if t.is_fp8 and not s.is_float:
        return [*_cast_expectation(s, dtypes.f32), "arith.truncf"]
    if t.is_bool:
        return ["arith.cmpf"] if s.is_float else ["arith.cmpi"]
    if s.is_bool:
        return ["arith.select"] if t.is_float else ["arith.extui"]
    if s.is_float and t.is_float:
        if s.bits == t.bits:
            return ["arith.extf", "arith.truncf"]
        return ["arith.extf"] if t.bits > s.bits else ["arith.truncf"]
    if s.is_int and t.is_float:
        return ["arith.sitofp"] if s.kind == "int" else ["arith.uitofp"]
    if s.is_float and t.is_int:
        return ["arith.fptosi"] if t.kind == "int" else ["arith.fptoui"]
    if s.bits == t.bits:
        return []
    if t.bits < s.bits:
        return ["arith.trunci"]
    return ["arith.extsi"] if s.kind == "int" else ["arith.extui"]


def test_every_cast_picks_the_op_by_both_types(load: Load) -> None:
    code = ""
    pairs = [(s, t) for s in dtypes.ALL_TYPES for t in dtypes.ALL_TYPES]
    for s, t in pairs:
        tn = "bool_" if t.is_bool else t.name
        if s.is_bool:  # bool is not a parameter type: make one from a comparison
            code += (
                f"@kaio.gpu_kernel(block_size=32)\ndef c_bool_{t.name}(v: i32):\n"
                f"    b = v > 0\n    r = {tn}(b)\n"
            )
        else:
            code += f"@kaio.gpu_kernel(block_size=32)\ndef c_{s.name}_{t.name}(v: {s.name}):\n    r = {tn}(v)\n"
    m = load(code)
    for s, t in pairs:
        ir = getattr(m, f"c_{s.name}_{t.name}").build()
        got = [op.name for op in body_ops(ir)]
        if s.is_bool:
            got = got[1:]  # the comparison that made the bool
        assert got == _cast_expectation(s, t), f"{s.name} -> {t.name}"
        if got and got[-1] != "arith.cmpi" and got[-1] != "arith.cmpf":
            assert body_ops(ir)[-1].results[0].type == t.ir_type


SIGNED_OPS = {"//": "arith.divsi", "%": "arith.remsi", ">>": "arith.shrsi", "<": "arith.cmpi"}
UNSIGNED_OPS = {"//": "arith.divui", "%": "arith.remui", ">>": "arith.shrui", "<": "arith.cmpi"}


@pytest.mark.parametrize("t", INT_TYPES, ids=lambda t: t.name)
def test_signedness_picks_division_remainder_shift_and_compare(load: Load, t: Any) -> None:
    m = load(
        f"""
        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[{t.name}], a: {t.name}, b: {t.name}):
            y[0] = a // b
            y[1] = a % b
            y[2] = a >> 1
            y[3] = {t.name}(a < b)
        """
    )
    names = [op.name for op in body_ops(m.k.build())]
    expected = SIGNED_OPS if t.kind == "int" else UNSIGNED_OPS
    for op in expected.values():
        assert op in names
    cmp = next(op for op in m.k.build().module.walk() if isinstance(op, arith.CmpiOp))
    assert cmp.predicate.value.data == (2 if t.kind == "int" else 6)  # slt / ult


def test_float_operators(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[f32], a: f32, b: f32):
            y[0] = a % b
            y[1] = -a
            y[2] = f32(a != b and a < b)
        """
    )
    ir = m.k.build()
    names = [op.name for op in body_ops(ir)]
    assert names[:4] == ["arith.divf", "math.trunc", "arith.mulf", "arith.subf"]  # C fmod
    assert "arith.negf" in names
    predicates = [
        op.predicate.value.data for op in ir.module.walk() if isinstance(op, arith.CmpfOp)
    ]
    assert predicates == [13, 4]  # une, olt: `!=` is true for NaN, orderings are ordered


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("x ** 2", ["arith.mulf"]),
        ("x ** 3", ["arith.mulf", "arith.mulf"]),
        ("x ** 8", ["arith.mulf", "arith.mulf", "arith.mulf"]),
        ("x ** 0", []),
        ("x ** 0.5", ["math.sqrt"]),
        ("x ** -0.5", ["math.rsqrt"]),
        ("x ** -1", ["arith.divf"]),
        ("x ** 2.0", ["arith.mulf"]),
        ("x ** 1.7", ["math.log2", "arith.mulf", "math.exp2"]),
        ("x ** y", ["math.log2", "arith.mulf", "math.exp2"]),
        ("2.0 ** y", ["arith.mulf", "math.exp2"]),
    ],
)
def test_power(load: Load, expr: str, expected: list[str]) -> None:
    m = load(
        f"""
        @kaio.gpu_kernel(block_size=32)
        def k(out: MutArray[f32], x: f32, y: f32):
            out[0] = {expr}
        """
    )
    assert [op.name for op in body_ops(m.k.build())] == expected


def test_integer_power_is_repeated_multiplication(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(out: MutArray[u32], x: u32):
            out[0] = x ** 5
        """
    )
    assert [op.name for op in body_ops(m.k.build())] == ["arith.muli"] * 3


def test_bitwise_on_ints_and_bools(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(out: MutArray[i32], a: i32, b: i32):
            out[0] = (a & b) | (a ^ ~b) | (a << 2)
            out[1] = i32((a > 0) & (b > 0) | (a < b) ^ (b < a))
        """
    )
    names = [op.name for op in body_ops(m.k.build())]
    assert names.count("arith.andi") == 2 and names.count("arith.ori") == 3
    assert names.count("arith.xori") == 3 and "arith.shli" in names


@settings(max_examples=80, deadline=None)
@given(
    a=st.integers(-(2**31), 2**31 - 1), b=st.integers(-(2**31), 2**31 - 1).filter(lambda v: v != 0)
)
def test_compile_time_division_truncates_like_the_runtime_op(
    literal_kernels: dict[str, Any], a: int, b: int
) -> None:
    from kaio.frontend.typerules import fold_binary
    from kaio.frontend.values import Const

    q = fold_binary("//", Const(a, dtypes.i32), Const(b, dtypes.i32), dtypes.i32).value
    r = fold_binary("%", Const(a, dtypes.i32), Const(b, dtypes.i32), dtypes.i32).value
    exact = math.trunc(Fraction(a, b))
    wrapped = (exact + 2**31) % 2**32 - 2**31  # INT_MIN // -1 wraps, as in PTX
    assert q == wrapped
    assert r == a - b * exact


def test_constexpr_typed_values_are_strict(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(out: MutArray[u32], n: u32, B: kaio.constexpr[u32] = 4, C: kaio.constexpr[i32] = 4):
            out[0] = n * B
            out[1] = n * u32(C)
        """
    )
    m.k.build()
    with pytest.raises(kaio.KaioTypeError, match="out of range for u32"):
        m.k.build({"B": -1})


def test_typed_constexpr_mismatch_is_a_type_error(
    compile_error: Callable[[str], kaio.KaioCompileError],
) -> None:
    err = compile_error(
        "@kaio.gpu_kernel(block_size=32)\n"
        "def k(out: MutArray[u32], n: u32, C: kaio.constexpr[i32] = 4):\n"
        "    out[0] = n * C\n"
    )
    assert "u32 and i32 are different types" in err.message and err.line == 3


def test_numpy_scalar_globals_are_typed_constants(load: Load) -> None:
    m = load(
        """
        import numpy as np
        SCALE = np.float16(0.5)

        @kaio.gpu_kernel(block_size=32)
        def k(out: MutArray[f16], x: f16):
            out[0] = x * SCALE
        """
    )
    mul = next(op for op in m.k.build().module.walk() if isinstance(op, arith.MulfOp))
    assert mul.rhs.owner.value.value.data == 0.5
