"""@kaio.device helpers: inlining, parameters, returns anywhere."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from xdsl.dialects import arith, scf

import kaio
from kaio.dialects import kernel as kd

Load = Callable[..., ModuleType]


def walk(ir: Any) -> list[Any]:
    return list(ir.module.walk())


def names(ir: Any) -> list[str]:
    return [op.name for op in ir.module.walk()]


def test_helpers_inline_at_each_call_with_their_own_variables(load: Load) -> None:
    m = load(
        """
        @kaio.device
        def scale(v, s=2.0):
            t = v * s
            return t

        @kaio.device
        def twice(v: f32) -> f32:
            return scale(scale(v), s=0.5)

        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32]):
            t = x[0]
            x[1] = twice(t) + t
        """
    )
    ir = m.k.build()
    assert names(ir).count("arith.mulf") == 2
    add = next(op for op in walk(ir) if isinstance(op, arith.AddfOp))
    load_op = next(op for op in walk(ir) if isinstance(op, kd.LoadOp))
    assert add.rhs is load_op.results[0], "the helper's `t` did not clobber the kernel's `t`"
    locs = [op for op in walk(ir) if isinstance(op, kd.SourceLocOp)]
    # Markers name the statement each op comes from, in the helper's file and line.
    assert [op.text.data for op in locs] == [
        "t = x[0]",
        "t = v * s",
        "t = v * s",
        "x[1] = twice(t) + t",
    ]


def test_early_return_and_fallthrough_return(load: Load) -> None:
    m = load(
        """
        @kaio.device
        def relu(v):
            if v < 0.0:
                return 0.0
            return v

        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32]):
            x[0] = relu(x[0])
        """
    )
    ir = m.k.build()
    ops = walk(ir)
    select_or_if = [op for op in ops if isinstance(op, scf.IfOp | arith.SelectOp)]
    assert select_or_if, "the returned value depends on the branch taken"
    store = next(op for op in ops if isinstance(op, kd.StoreOp))
    assert store.value.owner is select_or_if[-1] and str(store.value.type) == "f32"


def test_return_inside_a_loop_with_a_declared_type(load: Load) -> None:
    m = load(
        """
        @kaio.device
        def find(x: Array[i32], n: i32, target: i32) -> i32:
            for i in range(n):
                if x[i] == target:
                    return i
            return -1

        @kaio.gpu_kernel(block_size=32)
        def k(x: Array[i32], out: MutArray[i32], n: i32):
            out[0] = find(x, n, 7)
        """
    )
    ir = m.k.build()
    loop = next(op for op in walk(ir) if isinstance(op, scf.WhileOp))
    assert [str(t) for t in loop.result_types] == ["i32", "i1", "i32"]  # i, returned, value


def test_void_helper_writes_through_a_mutable_array(load: Load) -> None:
    m = load(
        """
        @kaio.device
        def put(dst: MutArray[f32], i: u32, v: f32):
            if i == 0:
                return
            dst[i] = v

        @kaio.gpu_kernel(block_size=32)
        def k(y: MutArray[f32]):
            put(y, thread_idx_x(), 1.5)
        """
    )
    assert names(m.k.build()).count("kernel.store") == 1


def test_array_annotation_makes_a_read_only_view(
    compile_error: Callable[[str], kaio.KaioCompileError],
) -> None:
    err = compile_error(
        "@kaio.device\ndef put(dst: Array[f32]):\n    dst[0] = 1.0\n"
        "@kaio.gpu_kernel(block_size=32)\ndef k(y: MutArray[f32]):\n    put(y)\n"
    )
    assert "read-only Array[f32]" in err.message and err.line == 3


def test_helpers_fold_on_compile_time_arguments(load: Load) -> None:
    m = load(
        """
        @kaio.device
        def square(v):
            return v * v

        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[i32], N: kaio.constexpr = 3):
            t = shared_mem(i32, square(N))
            x[0] = t[square(2)]
        """
    )
    ir = m.k.build()
    assert not any(isinstance(op, arith.MuliOp) for op in walk(ir))
    alloc = next(op for op in walk(ir) if isinstance(op, kd.SharedAllocOp))
    assert alloc.result.type.get_shape() == (9,)


def test_device_function_on_the_host_raises(load: Load) -> None:
    m = load("@kaio.device\ndef f(v):\n    return v\n")
    with pytest.raises(kaio.KaioError, match="can only be called from a kernel"):
        m.f(1.0)
    assert "device function f" in repr(m.f) and m.f.__name__ == "f"


def test_builtins_resolve_by_identity_through_aliases_and_modules(load: Load) -> None:
    m = load(
        """
        import kaio.prelude as kp
        from kaio.prelude import sqrt as square_root

        @kaio.gpu_kernel(block_size=32)
        def k(x: MutArray[f32]):
            i = kp.thread_idx_x()
            x[i] = square_root(x[i]) + kp.exp(1.0) + max(x[0], 0.0) + abs(x[1])
        """
    )
    n = names(m.k.build())
    assert (
        "kernel.thread_id" in n and "math.sqrt" in n and "arith.maxnumf" in n and "math.absf" in n
    )
    assert "math.exp" not in n, "exp(1.0) folds at compile time"
