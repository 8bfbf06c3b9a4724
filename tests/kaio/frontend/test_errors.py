"""Every kind of compile error: message, line, caret column and hint.

Each case is a module body. Line numbers count from the first line of that body (line 1 is the
decorator); columns are 0-based as in ``KaioCompileError.col``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import kaio

SIG = (
    "@kaio.gpu_kernel(block_size=32)\n"
    "def k(x: Array[f32], y: MutArray[f32], h: f16, n: u32, s: i32):\n"
)


def body(*lines: str) -> str:
    return SIG + "".join(f"    {ln}\n" for ln in lines)


# (case id, code, line, col, end_col, message part, hint part or None)
CASES: list[tuple[str, str, int, int, int | None, str, str | None]] = [
    (
        "float_mismatch",
        body("y[0] = x[0] + h"),
        3,
        11,
        19,
        "f32 and f16 are different types",
        "cast one side",
    ),
    (
        "signedness_mismatch",
        body("a = n + s"),
        3,
        8,
        13,
        "u32 and i32 are different types",
        "u32(i)",
    ),
    (
        "comparison_mismatch",
        body("if x[0] < h:", "    pass"),
        3,
        7,
        15,
        "comparison `<`: f32 and f16",
        "cast",
    ),
    (
        "int_true_division",
        body("a = s / 2"),
        3,
        8,
        13,
        "operator `/` does not apply to i32",
        "`//`",
    ),
    (
        "float_floor_division",
        body("a = x[0] // 2.0"),
        3,
        8,
        19,
        "operator `//` does not apply to f32",
        "floor(a / b)",
    ),
    (
        "bool_arithmetic",
        body("a = (s < 1) + (s > 2)"),
        3,
        8,
        25,
        "operator `+` does not apply to bool",
        "and`/`or",
    ),
    (
        "bitwise_on_float",
        body("a = x[0] & 1.0"),
        3,
        8,
        18,
        "operator `&` does not apply to f32",
        "integers",
    ),
    (
        "unsigned_negation",
        body("a = -n"),
        3,
        8,
        10,
        "unary `-` does not apply to unsigned u32",
        "0 - x",
    ),
    ("not_on_int", body("a = not s"), 3, 8, 13, "`not` needs a bool, got i32", "x == 0"),
    (
        "literal_out_of_range",
        body("a = n + 5000000000"),
        3,
        8,
        22,
        "int literal 5000000000 is out of range for u32",
        "wider type",
    ),
    (
        "float_literal_to_int",
        body("a = s + 0.5"),
        3,
        8,
        15,
        "float literal 0.5 cannot be used as i32",
        "truncates",
    ),
    ("float_literal_overflows_f16", body("a = h * 1e6"), 3, 8, 15, "out of range for f16", None),
    (
        "lone_literal_too_big",
        body("a = 3000000000", "for i in range(s):", "    a += 1"),
        4,
        4,
        None,
        "does not fit i32",
        "i64(3000000000)",
    ),
    (
        "write_to_array",
        body("x[0] = 1.0"),
        3,
        4,
        8,
        "cannot write to `x`: it is a read-only Array[f32]",
        "MutArray[f32]",
    ),
    (
        "augmented_write_to_array",
        body("x[0] += 1.0"),
        3,
        4,
        8,
        "read-only Array[f32]",
        "MutArray[f32]",
    ),
    ("index_scalar", body("a = n[0]"), 3, 8, 12, "cannot index a scalar (u32)", None),
    ("float_index", body("a = x[h]"), 3, 10, 11, "an index must be an integer, got f16", "u32(x)"),
    ("negative_index", body("y[-1] = 0.0"), 3, 6, 8, "negative index -1", "count from the end"),
    ("global_2d_index", body("a = x[n, n]"), 3, 10, 14, "global array `x` is 1-D", "index_2d"),
    (
        "store_wrong_type",
        body("y[0] = h"),
        3,
        4,
        8,
        "cannot store f16 into an element of type f32",
        "f32(v)",
    ),
    (
        "non_bool_if",
        body("if s:", "    pass"),
        3,
        7,
        8,
        "the condition of `if` must be a bool, got i32",
        "x != 0",
    ),
    (
        "non_bool_while",
        body("while n:", "    pass"),
        3,
        10,
        11,
        "the condition of `while` must be a bool, got u32",
        "x != 0",
    ),
    ("non_bool_ternary", body("a = 1 if h else 2"), 3, 13, 14, "must be a bool, got f16", None),
    (
        "non_bool_and",
        body("a = s and n"),
        3,
        8,
        9,
        "an operand of `and` must be a bool, got i32",
        None,
    ),
    (
        "maybe_undefined",
        body("if n > 0:", "    t = 1.0", "y[0] = t"),
        5,
        11,
        12,
        "`t` may be undefined here",
        "every path",
    ),
    (
        "undefined_after_loop",
        body("for i in range(s):", "    t = 1.0", "y[0] = t"),
        5,
        11,
        12,
        "`t` is assigned inside the loop",
        "every path",
    ),
    (
        "loop_variable_after_loop",
        body("for i in range(s):", "    pass", "a = i"),
        5,
        8,
        9,
        "loop variable `i` is not available",
        None,
    ),
    (
        "type_change",
        body("a = 1.0", "a = s"),
        4,
        4,
        5,
        "`a` changes type from float literal to i32",
        "keeps one type",
    ),
    (
        "type_change_in_loop",
        body("acc = 0.0", "for i in range(s):", "    acc = h"),
        5,
        8,
        11,
        "`acc` changes type from f32 to f16",
        "f16(0.0)",
    ),
    (
        "branch_types_differ",
        body("if n > 0:", "    v = h", "else:", "    v = x[0]", "y[0] = v"),
        3,
        4,
        None,
        "f16 and f32",
        "keeps one type",
    ),
    (
        "used_before_assignment",
        body("a = b", "b = 1"),
        3,
        8,
        9,
        "`b` is used before it is assigned",
        None,
    ),
    ("undefined_name", body("a = nope"), 3, 8, 12, "name `nope` is not defined", "defined above"),
    (
        "python_math",
        "import math\n" + body("a = math.sqrt(h)"),
        4,
        8,
        20,
        "cannot call Python function `sqrt`",
        "from kaio.prelude import sqrt",
    ),
    ("print", body("print(s)"), 3, 4, 12, "`print` is not supported", "MutArray"),
    ("len", body("a = len(x)"), 3, 8, 14, "`len` is not supported", "parameter"),
    (
        "python_float_cast",
        body("a = float(s)"),
        3,
        8,
        16,
        "`float(...)` is not a kaio type",
        "f32(x)",
    ),
    (
        "unknown_function",
        body("a = sorted(s)"),
        3,
        8,
        17,
        "Python builtin `sorted` is not supported",
        None,
    ),
    ("string", body("a = 'hi'"), 3, 8, 12, "strings are not supported", None),
    ("list", body("a = [1, 2]"), 3, 8, 14, "lists are not supported", "shared_mem"),
    (
        "comprehension",
        body("a = [i for i in range(3)]"),
        3,
        8,
        29,
        "comprehensions are not supported",
        "loop",
    ),
    ("lambda", body("f = lambda q: q"), 3, 8, 19, "lambdas are not supported", "@kaio.device"),
    ("walrus", body("if (a := s) > 0:", "    pass"), 3, 8, 14, "`:=` is not supported", None),
    ("slice", body("a = x[1:2]"), 3, 10, 13, "slices are not supported", None),
    (
        "is_comparison",
        body("a = s is n"),
        3,
        13,
        14,
        "`is`, `is not`, `in` and `not in` are not supported",
        "==",
    ),
    ("with", body("with s:", "    pass"), 3, 4, None, "`with` statements are not supported", None),
    (
        "try",
        body("try:", "    pass", "finally:", "    pass"),
        3,
        4,
        None,
        "`try` is not supported",
        "exceptions",
    ),
    ("raise", body("raise ValueError"), 3, 4, 20, "`raise` is not supported", None),
    ("assert", body("assert s > 0"), 3, 4, 16, "`assert` is not supported", "return early"),
    (
        "class",
        body("class C:", "    pass"),
        3,
        4,
        None,
        "class definitions are not supported",
        None,
    ),
    (
        "nested_def",
        body("def g():", "    pass"),
        3,
        4,
        None,
        "nested function definitions",
        "@kaio.device",
    ),
    ("import", body("import math"), 3, 4, 15, "imports are not allowed inside kernels", None),
    (
        "loop_else",
        body("for i in range(s):", "    pass", "else:", "    pass"),
        6,
        8,
        12,
        "`else` on a loop",
        None,
    ),
    (
        "iterate_array",
        body("for v in x:", "    pass"),
        3,
        13,
        14,
        "iterates over `range(...)`",
        "range(n)",
    ),
    (
        "range_mixed_types",
        body("for i in range(n, s):", "    pass"),
        3,
        13,
        24,
        "bounds of `range` have different types: i32 and u32",
        "cast",
    ),
    (
        "range_float",
        body("for i in range(1.5):", "    pass"),
        3,
        13,
        23,
        "`range` needs integers",
        None,
    ),
    (
        "range_zero_step",
        body("for i in range(0, s, 0):", "    pass"),
        3,
        13,
        27,
        "step of `range` must not be zero",
        None,
    ),
    (
        "static_range_runtime",
        body("for i in static_range(s):", "    pass"),
        3,
        13,
        28,
        "`static_range` needs compile-time integers",
        "range",
    ),
    (
        "static_range_outside_for",
        body("a = static_range(3)"),
        3,
        8,
        23,
        "can only be the iterable of a `for` loop",
        None,
    ),
    (
        "kernel_returns_value",
        body("return 1"),
        3,
        4,
        12,
        "a kernel cannot return a value",
        "MutArray",
    ),
    (
        "shared_runtime_size",
        body("t = shared_mem(f32, n)"),
        3,
        24,
        25,
        "shared_mem sizes must be positive compile-time integers",
        "constexpr",
    ),
    (
        "shared_too_big",
        body("t = shared_mem(f32, 20000)"),
        3,
        8,
        30,
        "more than the 49152",
        "smaller tiles",
    ),
    ("shared_bool", body("t = shared_mem(bool_, 4)"), 3, 19, 24, "shared memory of bool", "u8"),
    (
        "shared_index_count",
        body("t = shared_mem(f32, (4, 4))", "t[0] = 1.0"),
        4,
        6,
        7,
        "2-D shared buffer takes 2 indices, got 1",
        None,
    ),
    (
        "shared_const_out_of_bounds",
        body("t = shared_mem(f32, 8)", "t[8] = 1.0"),
        4,
        6,
        7,
        "index 8 is out of bounds",
        None,
    ),
    (
        "float_only_math",
        body("a = sqrt(s)"),
        3,
        8,
        15,
        "`sqrt` needs a float, got i32",
        "sqrt(f32(x))",
    ),
    (
        "atomic_cas_float",
        body("a = atomic_cas(y, 0, 1.0, 2.0)"),
        3,
        8,
        34,
        "atomic_cas works on integer arrays, not f32",
        "integer array",
    ),
    (
        "atomic_on_read_only",
        body("a = atomic_add(x, 0, 1.0)"),
        3,
        19,
        20,
        "atomic_add on `x`, a read-only Array[f32]",
        "MutArray",
    ),
    (
        "atomic_on_scalar",
        body("a = atomic_add(s, 0, 1)"),
        3,
        19,
        20,
        "works on a MutArray or a shared buffer, got i32",
        None,
    ),
    (
        "shuffle_width",
        body("a = shfl_sync_down(s, 1, width=3)"),
        3,
        8,
        37,
        "`width` must be a compile-time power of two",
        None,
    ),
    (
        "shuffle_bool",
        body("a = shfl_sync_idx(s > 0, 1)"),
        3,
        8,
        31,
        "works on 16-, 32- and 64-bit values, not bool",
        "i32(x)",
    ),
    ("builtin_arity", body("a = thread_idx_x(1)"), 3, 8, 23, "takes 0 argument(s), got 1", None),
    ("builtin_keyword", body("a = sqrt(q=h)"), 3, 8, 17, "unexpected keyword argument `q`", None),
    (
        "attribute_on_array",
        body("a = x.shape"),
        3,
        8,
        15,
        "`.shape` on a Array[f32] value is not supported",
        "parameters",
    ),
    ("assign_attribute", body("x.y = 1"), 3, 4, 7, "cannot assign to an attribute", None),
    (
        "int_power_negative",
        body("a = s ** -1"),
        3,
        8,
        15,
        "non-negative int literal exponent",
        "float type",
    ),
    (
        "mixed_runtime_power",
        body("a = s ** h"),
        3,
        8,
        14,
        "i32 and f16 are different types",
        "cast",
    ),
    (
        "unpack_mismatch",
        body("a, b = s, n, h"),
        3,
        4,
        8,
        "cannot unpack 3 value(s) into 2 names",
        None,
    ),
    (
        "annotated_type_mismatch",
        body("a: f32 = h"),
        3,
        13,
        14,
        "`a` is declared f32 but the value is f16",
        "f32(...)",
    ),
    ("division_by_zero_literal", body("a = s // 0"), 3, 8, 14, "integer division by zero", None),
    (
        "shift_out_of_range",
        body("a = s << 32"),
        3,
        8,
        15,
        "shift amount 32 is out of range for i32",
        None,
    ),
]


@pytest.mark.parametrize(
    ("code", "line", "col", "end_col", "message", "hint"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_compile_error(
    compile_error: Callable[[str], kaio.KaioCompileError],
    code: str,
    line: int,
    col: int,
    end_col: int | None,
    message: str,
    hint: str | None,
) -> None:
    err = compile_error(code)
    assert message in err.message
    assert (err.line, err.col) == (line, col), str(err)
    if end_col is not None:
        assert err.end_col == end_col, str(err)
    if hint is None:
        return
    assert err.hint is not None and hint in err.hint, str(err)
    text = str(err)
    assert f":{err.line + 2}:{col + 1}: error: " in text  # file:line:col, 1-based column
    assert err.source_line is not None and err.source_line.strip() in text
    caret_line = text.splitlines()[2]
    assert caret_line.strip().startswith("^") and caret_line.index("^") == col + 4


KERNEL_LEVEL_CASES: list[tuple[str, str, int, int, str, str | None]] = [
    (
        "bool_parameter",
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: Array[f32], flag: bool_):\n    pass\n",
        2,
        27,
        "bool kernel parameters are not supported",
        "constexpr",
    ),
    (
        "missing_annotation",
        "@kaio.gpu_kernel(block_size=32)\ndef k(x):\n    pass\n",
        2,
        6,
        "kernel parameter `x` needs a type annotation",
        "Array[f32]",
    ),
    (
        "unsupported_annotation",
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: int):\n    pass\n",
        2,
        9,
        "unsupported kernel parameter type",
        "kaio scalar type",
    ),
    (
        "block_size_too_big",
        "@kaio.gpu_kernel(block_size=(64, 32))\ndef k(x: Array[f32]):\n    pass\n",
        2,
        0,
        "invalid block_size (64, 32)",
        "1024",
    ),
    (
        "varargs",
        "@kaio.gpu_kernel(block_size=32)\ndef k(*xs):\n    pass\n",
        2,
        7,
        "`*args` / `**kwargs` parameters are not supported",
        None,
    ),
    (
        "bad_constexpr_default",
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: Array[f32], B: kaio.constexpr[u8] = 300):\n    pass\n",
        2,
        21,
        "out of range for u8",
        None,
    ),
    (
        "device_missing_return",
        "@kaio.device\ndef f(a: f32) -> f32:\n    if a > 0.0:\n        return a\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32]):\n    x[0] = f(x[0])\n",
        2,
        0,
        "may reach its end without returning a value",
        "return value",
    ),
    (
        "device_return_in_loop_without_type",
        "@kaio.device\ndef f(a: i32):\n    for i in range(a):\n        return i\n    return 0\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[i32]):\n    x[0] = f(3)\n",
        3,
        4,
        "returns from inside a loop needs a declared return type",
        "-> f32",
    ),
    (
        "device_argument_type",
        "@kaio.device\ndef f(a: f32) -> f32:\n    return a\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32], h: f16):\n    x[0] = f(h)\n",
        6,
        11,
        "argument `a` of `f`: expected f32, got f16",
        "cast",
    ),
    (
        "device_return_types_differ",
        "@kaio.device\ndef f(a: f32, h: f16):\n    if a > 0.0:\n        return a\n    return h\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32], h: f16):\n    x[0] = f(x[0], h)\n",
        5,
        11,
        "returns f16, but the function returned f32",
        "keeps one type",
    ),
    (
        "device_recursion",
        "@kaio.device\ndef f(a):\n    return f(a)\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32]):\n    x[0] = f(x[0])\n",
        3,
        11,
        "recursive call of device function `f`",
        "recursion",
    ),
    (
        "device_bad_call",
        "@kaio.device\ndef f(a):\n    return a\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32]):\n    x[0] = f(x[0], 2)\n",
        6,
        11,
        "bad call of `f`",
        None,
    ),
    (
        "device_syntax_checked_at_decoration",
        "@kaio.device\ndef f(a):\n    with a:\n        pass\n",
        3,
        4,
        "`with` statements are not supported",
        None,
    ),
    (
        "kernel_calls_kernel",
        "@kaio.gpu_kernel(block_size=32)\ndef g(x: MutArray[f32]):\n    pass\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32]):\n    g(x)\n",
        6,
        4,
        "a kernel cannot call the kernel `g`",
        "@kaio.device",
    ),
    (
        "plain_python_function",
        "def helper(v):\n    return v\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32]):\n    x[0] = helper(x[0])\n",
        5,
        11,
        "cannot call Python function `helper`",
        "@kaio.device",
    ),
    (
        "constexpr_without_default_still_checked",
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[f32], B: kaio.constexpr):\n"
        "    t = shared_mem(f32, B * 32)\n    x[0] = t[0] + B\n",
        4,
        11,
        "f32 and i32 are different types",
        "cast",
    ),
]


@pytest.mark.parametrize(
    ("code", "line", "col", "message", "hint"),
    [c[1:] for c in KERNEL_LEVEL_CASES],
    ids=[c[0] for c in KERNEL_LEVEL_CASES],
)
def test_declaration_and_device_errors(
    compile_error: Callable[[str], kaio.KaioCompileError],
    code: str,
    line: int,
    col: int,
    message: str,
    hint: str | None,
) -> None:
    err = compile_error(code)
    assert message in err.message, str(err)
    assert (err.line, err.col) == (line, col), str(err)
    if hint is not None:
        assert err.hint is not None and hint in err.hint, str(err)


def test_errors_point_into_the_device_functions_own_file(load, tmp_path) -> None:  # type: ignore[no-untyped-def]
    helpers = load("@kaio.device\ndef bad(v):\n    return v + 1.5\n", "helpers_mod")
    (tmp_path / "user_mod.py").write_text(
        "import kaio\nfrom kaio.prelude import *\nfrom helpers_mod import bad\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(x: MutArray[i32]):\n    x[0] = bad(x[0])\n"
    )
    import importlib.util
    import sys

    sys.modules["helpers_mod"] = helpers
    try:
        spec = importlib.util.spec_from_file_location("user_mod", tmp_path / "user_mod.py")
        assert spec is not None and spec.loader is not None
        with pytest.raises(kaio.KaioCompileError) as info:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    finally:
        del sys.modules["helpers_mod"]
    err = info.value
    assert err.filename is not None and err.filename.endswith("helpers_mod.py")
    assert err.line == 5 and "float literal 1.5 cannot be used as i32" in err.message


def test_no_python_exception_escapes_for_internal_errors(load, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kaio.frontend import operators

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(operators, "emit_binary", broken)
    with pytest.raises(kaio.KaioCompileError) as info:
        load(body("a = n + n"))
    err = info.value
    assert "internal compiler error (RuntimeError: boom)" in err.message
    assert err.line is not None and err.source_line is not None and "a = n + n" in err.source_line
    assert isinstance(err.__cause__, RuntimeError)
