"""Compile-time values: constexpr parameters, globals and closures, specialization, source keys."""

from __future__ import annotations

import importlib.util
import linecache
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy
import pytest
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import MemRefType

import kaio
from kaio.dialects import kernel as kd
from kaio.frontend import ParamKind

Load = Callable[..., ModuleType]


def shared_shapes(ir: Any) -> list[tuple[int, ...]]:
    return [
        op.result.type.get_shape()
        for op in ir.module.walk()
        if isinstance(op, kd.SharedAllocOp) and isinstance(op.result.type, MemRefType)
    ]


def test_constexpr_specialization_changes_the_ir(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=128)
        def k(x: MutArray[f32], BLOCK: kaio.constexpr = 128, UNROLL: kaio.constexpr[i32] = 2):
            tile = shared_mem(f32, BLOCK * 2)
            for j in static_range(UNROLL):
                tile[j] = x[j]
            x[0] = tile[UNROLL - 1]
        """
    )
    default, other = m.k.build(), m.k.build({"BLOCK": 64, "UNROLL": 4})
    assert shared_shapes(default) == [(256,)] and shared_shapes(other) == [(128,)]

    def count(ir: Any) -> int:
        return sum(isinstance(op, kd.LoadOp) for op in ir.module.walk())

    assert count(default) == 3 and count(other) == 5
    assert default.constexprs == {"BLOCK": 128, "UNROLL": 2}
    assert other.constexprs == {"BLOCK": 64, "UNROLL": 4}
    assert str(default.module) != str(other.module)
    assert default.shared_bytes == 1024 and other.shared_bytes == 512


def test_params_and_runtime_params(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=(8, 4))
        def k(x: Array[f16], BLOCK: kaio.constexpr, y: MutArray[u8], n: i64, S: kaio.constexpr[f32] = 1.5):
            pass
        """
    )
    k = m.k
    assert k.name == "k" and k.block_size == (8, 4, 1) and k.__name__ == "k"
    assert [(p.name, p.kind) for p in k.params] == [
        ("x", ParamKind.ARRAY), ("BLOCK", ParamKind.CONSTEXPR), ("y", ParamKind.ARRAY),
        ("n", ParamKind.SCALAR), ("S", ParamKind.CONSTEXPR),
    ]  # fmt: skip
    assert [repr(p.type) for p in k.params] == ["Array[f16]", "None", "MutArray[u8]", "i64", "f32"]
    assert not k.params[1].has_default and k.params[4].default == 1.5
    assert [repr(p) for p in k.runtime_params] == ["x: Array[f16]", "y: MutArray[u8]", "n: i64"]
    ir = k.build({"BLOCK": 3})
    assert [s.data for s in ir.func.param_names] == ["x", "y", "n"]
    assert ir.params == k.runtime_params and ir.block_size == (8, 4, 1)
    assert ir.constexprs == {"BLOCK": 3, "S": 1.5}


def test_build_argument_errors(load: Load) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], B: kaio.constexpr, C: kaio.constexpr[u8] = 1):
            x[0] = f32(B) + f32(C)
        """
    )
    with pytest.raises(kaio.KaioTypeError, match="no value for constexpr `B`"):
        m.k.build()
    with pytest.raises(kaio.KaioTypeError, match="has no constexpr parameter `Z`"):
        m.k.build({"B": 1, "Z": 2})
    with pytest.raises(kaio.KaioTypeError, match="must be an int, float or bool"):
        m.k.build({"B": [1]})
    with pytest.raises(kaio.KaioTypeError, match="out of range for u8"):
        m.k.build({"B": 1, "C": 256})
    assert m.k.build({"B": numpy.int32(7)}).constexprs == {"B": 7, "C": 1}


def test_decoration_checks_kernels_with_unknown_constexprs(
    load: Load, compile_error: Callable[[str], kaio.KaioCompileError]
) -> None:
    m = load(
        """
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32], BLOCK: kaio.constexpr, FLAG: kaio.constexpr[bool_]):
            t = shared_mem(f32, BLOCK * 4)
            if FLAG:
                t[0] = 1.0
            for j in static_range(BLOCK):
                x[j] = t[j]
        """
    )
    ir = m.k.build({"BLOCK": 2, "FLAG": True})
    assert shared_shapes(ir) == [(8,)]
    assert not any(isinstance(op, scf.IfOp) for op in ir.module.walk())
    err = compile_error(
        "@kaio.gpu_kernel(block_size=32)\n"
        "def k(x: MutArray[f32], BLOCK: kaio.constexpr):\n"
        "    x[0] = BLOCK + 1.0\n"
    )
    assert "i32 and float literal" in err.message or "cannot be used as i32" in err.message
    assert err.line == 3


def test_module_globals_and_closure_values_are_constants(load: Load) -> None:
    m = load(
        """
        import types
        SCALE = 3
        CFG = types.SimpleNamespace(OFFSET=7)

        def make(factor):
            @kaio.gpu_kernel(block_size=32)
            def k(x: MutArray[i32]):
                x[0] = x[0] * SCALE + CFG.OFFSET + factor
            return k

        k5 = make(5)
        """
    )
    ir = m.k5.build()
    consts = sorted(
        op.value.value.data for op in ir.module.walk() if isinstance(op, arith.ConstantOp)
    )
    assert consts == [0, 3, 5, 7]  # the index 0, SCALE, factor, CFG.OFFSET


def _write_module(path: Path, name: str, code: str) -> ModuleType:
    path.write_text(code)
    linecache.checkcache(str(path))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_source_key_follows_device_helpers_and_global_values(tmp_path: Path) -> None:
    sys.path.insert(0, str(tmp_path))
    try:
        helper_v1 = "import kaio\n@kaio.device\ndef act(v):\n    return v * 2.0\n"
        helper_v2 = "import kaio\n@kaio.device\ndef act(v):\n    return v * 3.0\n"
        kernel_code = (
            "import kaio\nfrom kaio.prelude import *\nimport kaio_helpers_mod as hm\nLIMIT = {limit}\n"
            "@kaio.device\ndef outer(v):\n    return hm.act(v) + 1.0\n"
            "@kaio.gpu_kernel(block_size=32)\n"
            "def k(x: MutArray[f32]):\n    x[0] = outer(x[0]) + f32(LIMIT)\n"
        )
        _write_module(tmp_path / "kaio_helpers_mod.py", "kaio_helpers_mod", helper_v1)
        m1 = _write_module(
            tmp_path / "kaio_kernel_mod.py", "kaio_kernel_mod", kernel_code.format(limit=4)
        )
        key1 = m1.k.source_key()
        assert key1 == m1.k.source_key(), "stable"

        _write_module(tmp_path / "kaio_helpers_mod.py", "kaio_helpers_mod", helper_v2)
        m2 = _write_module(
            tmp_path / "kaio_kernel_mod.py", "kaio_kernel_mod", kernel_code.format(limit=4)
        )
        key2 = m2.k.source_key()
        assert key2 != key1, "a transitively called helper's source changed"

        m3 = _write_module(
            tmp_path / "kaio_kernel_mod.py", "kaio_kernel_mod", kernel_code.format(limit=5)
        )
        assert m3.k.source_key() != key2, "a global constant the kernel reads changed"

        m3.LIMIT = 4  # the key reads the value at call time, like the build does
        assert m3.k.source_key() == key2
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("kaio_helpers_mod", "kaio_kernel_mod"):
            sys.modules.pop(name, None)


def test_source_key_ignores_unrelated_module_changes(load: Load) -> None:
    a = load(
        """
        OTHER = 1
        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32]):
            x[0] = 1.0
        """
    )
    key = a.k.source_key()
    a.OTHER = 2
    assert a.k.source_key() == key
