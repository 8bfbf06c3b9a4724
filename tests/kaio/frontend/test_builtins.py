"""Every builtin of kaio.prelude compiles to the op it documents."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from xdsl.dialects import arith

import kaio
import kaio.prelude as kp
from kaio.dialects import kernel as kd

Load = Callable[..., ModuleType]


def walk(ir: Any) -> list[Any]:
    return list(ir.module.walk())


def kernel_with(load: Load, params: str, *lines: str) -> Any:
    code = (
        "@kaio.gpu_kernel(block_size=64)\ndef k("
        + params
        + "):\n"
        + "".join(f"    {ln}\n" for ln in lines)
    )
    return load(code).k.build()


@pytest.mark.parametrize(
    ("builtin", "op_type", "dim"),
    [
        (f"{kind}_{d}", cls, d)
        for kind, cls in (
            ("thread_idx", kd.ThreadIdOp),
            ("block_idx", kd.BlockIdOp),
            ("block_dim", kd.BlockDimOp),
            ("grid_dim", kd.GridDimOp),
        )
        for d in "xyz"
    ]
    + [("lane_id", kd.LaneIdOp, None), ("warp_id", kd.WarpIdOp, None)],
)
def test_simt_indices_are_u32(load: Load, builtin: str, op_type: type, dim: str | None) -> None:
    ir = kernel_with(load, "out: MutArray[u32]", f"out[0] = {builtin}() + u32(1)")
    op = next(o for o in walk(ir) if isinstance(o, op_type))
    if dim is not None:
        assert op.dim.data == kd.Dim(dim)
    assert any(isinstance(o, arith.AddiOp) for o in walk(ir))  # typed u32: adds a u32


@pytest.mark.parametrize("mode", ["down", "up", "bfly", "idx"])
def test_shuffles(load: Load, mode: str) -> None:
    ir = kernel_with(
        load, "out: MutArray[f32], m: u32",
        f"out[0] = shfl_sync_{mode}(out[0], 3, width=16, mask=m)",
    )  # fmt: skip
    op = next(o for o in walk(ir) if isinstance(o, kd.ShuffleOp))
    assert op.mode.data == kd.ShuffleMode(mode) and op.width.value.data == 16
    assert str(op.value.type) == "f32" and op.mask.type.width.data == 32


def test_shuffle_default_mask_is_all_lanes(load: Load) -> None:
    ir = kernel_with(load, "out: MutArray[i64]", "out[0] = shfl_sync_bfly(out[0], 1)")
    op = next(o for o in walk(ir) if isinstance(o, kd.ShuffleOp))
    assert op.mask.owner.value.value.data == -1 and op.width.value.data == 32  # 0xFFFFFFFF


@pytest.mark.parametrize(
    ("t", "combines"),
    [
        ("f32", ("addf", "maxf", "minf")),
        ("i32", ("addi", "maxs", "mins")),
        ("u32", ("addi", "maxu", "minu")),
        ("f16", ("addf", "maxf", "minf")),
    ],
)
@pytest.mark.parametrize("scope", ["warp", "block"])
def test_reductions_pick_the_combine_by_type(
    load: Load, t: str, combines: tuple[str, ...], scope: str
) -> None:
    ir = kernel_with(
        load, f"out: MutArray[{t}]",
        f"out[0] = {scope}_reduce_sum(out[0])",
        f"out[1] = {scope}_reduce_max(out[1])",
        f"out[2] = {scope}_reduce_min(out[2])",
    )  # fmt: skip
    op_type = kd.WarpReduceOp if scope == "warp" else kd.BlockReduceOp
    assert tuple(o.combine.data.value for o in walk(ir) if isinstance(o, op_type)) == combines


def test_atomics_on_global_and_shared_memory(load: Load) -> None:
    ir = kernel_with(
        load, "g: MutArray[i32], u: MutArray[u32], f: MutArray[f32]",
        "s = shared_mem(u32, (4, 8))",
        "a = atomic_add(g, 1, 2)",
        "b = atomic_min(g, 1, a)",
        "c = atomic_max(u, 2, u32(3))",
        "d = atomic_exch(f, 0, 1.5)",
        "e = atomic_cas(g, 3, 0, b)",
        "h = atomic_max(s, (1, 2), c)",
        "g[0] = e",
        "u[0] = h",
        "f[0] = d + atomic_add(f, 5, 2.0)",
    )  # fmt: skip
    rmw = [o for o in walk(ir) if isinstance(o, kd.AtomicRMWOp)]
    assert [o.combine.data.value for o in rmw] == ["addi", "mins", "maxu", "exch", "maxu", "addf"]
    cas = [o for o in walk(ir) if isinstance(o, kd.AtomicCasOp)]
    assert len(cas) == 1 and str(cas[0].value.type) == "i32"
    shared = rmw[4]
    assert len(shared.indices) == 2 and all(str(i.type) == "i32" for i in shared.indices)
    assert all(str(o.indices[0].type) == "i64" for o in rmw if isinstance(o.ref.type, kd.ArrayType))


@pytest.mark.parametrize(
    "name", ["sqrt", "rsqrt", "exp", "exp2", "log", "log2", "tanh", "sin", "cos", "floor", "ceil"]
)
def test_float_math(load: Load, name: str) -> None:
    ir = kernel_with(
        load, "out: MutArray[f32], h: f16", f"out[0] = {name}(out[0])", f"out[1] = f32({name}(h))"
    )
    ops = [o for o in walk(ir) if o.name == f"math.{name}"]
    assert [str(o.results[0].type) for o in ops] == ["f32", "f16"]


def test_math_folds_on_constants(load: Load) -> None:
    ir = kernel_with(
        load,
        "out: MutArray[f32]",
        "out[0] = sqrt(16.0) + exp2(3) + floor(-1.5) + fma(2.0, 3.0, 1.0)",
    )
    assert not any(o.name.startswith("math.") for o in walk(ir))
    stored = next(o for o in walk(ir) if isinstance(o, kd.StoreOp))
    assert stored.value.owner.value.value.data == 4.0 + 8.0 - 2.0 + 7.0


def test_abs_min_max_respect_signedness(load: Load) -> None:
    ir = kernel_with(
        load, "fi: MutArray[i32], fu: MutArray[u32], ff: MutArray[f32]",
        "fi[0] = abs(fi[0]) + min(fi[1], fi[2]) + max(fi[1], 0, fi[3])",
        "fu[0] = abs(fu[0]) + min(fu[1], fu[2]) + max(fu[1], fu[2])",
        "ff[0] = abs(ff[0]) + min(ff[1], 0.5) + max(ff[1], ff[2])",
    )  # fmt: skip
    counts: dict[str, int] = {}
    for o in walk(ir):
        counts[o.name] = counts.get(o.name, 0) + 1
    assert counts["math.absi"] == 1 and counts["math.absf"] == 1  # abs of unsigned is itself
    assert counts["arith.minsi"] == 1 and counts["arith.maxsi"] == 2
    assert counts["arith.minui"] == 1 and counts["arith.maxui"] == 1
    assert counts["arith.minnumf"] == 1 and counts["arith.maxnumf"] == 1


def test_fma_and_index_2d(load: Load) -> None:
    ir = kernel_with(
        load, "a: Array[f32], out: MutArray[f32], row: u32, col: u32, stride: u32",
        "out[index_2d(row, col, stride)] = fma(a[0], a[1], 1.0)",
    )  # fmt: skip
    names = [o.name for o in walk(ir)]
    assert "math.fma" in names and "arith.muli" in names and "arith.addi" in names
    assert "arith.extui" in names, "a u32 flat index is zero-extended"


def test_shared_memory_and_barrier(load: Load) -> None:
    ir = kernel_with(
        load, "out: MutArray[f32], i: i64, j: u8",
        "s = shared_mem(f32, 64)",
        "t = shared_mem(f16, (8, 4))",
        "s[i] = 1.0",
        "bar_sync()",
        "t[j, 3] = f16(s[j])",
        "out[0] = s[63]",
    )  # fmt: skip
    allocs = [o for o in walk(ir) if isinstance(o, kd.SharedAllocOp)]
    assert [a.sym_name.data for a in allocs] == ["smem0", "smem1"]
    assert [a.result.type.get_shape() for a in allocs] == [(64,), (8, 4)]
    assert any(isinstance(o, kd.BarrierOp) for o in walk(ir))
    names = [o.name for o in walk(ir)]
    assert "arith.trunci" in names, "an i64 shared index is truncated to i32"
    assert "arith.extui" in names, "a u8 shared index is zero-extended to i32"
    assert ir.shared_bytes == 64 * 4 + 8 * 4 * 2


def test_every_prelude_builtin_has_a_compile_rule_and_fails_on_the_host() -> None:
    from kaio.frontend.builtins import builtin_handler  # noqa: F401 - the table asserts coverage

    for b in kp.BUILTINS:
        if b in (kp.abs, kp.min, kp.max, kp.cdiv):
            continue
        with pytest.raises(kaio.KaioError, match="can only be called inside"):
            b()
    assert kp.abs(-2) == 2 and kp.min(3, 1, 2) == 1 and kp.max([4, 5]) == 5  # host behaviour
    assert kp.cdiv(1000, 256) == 4 and kp.cdiv(0, 7) == 0 and kaio.cdiv is kp.cdiv
    assert kp.f32(1.5) == 1.5 and math.isclose(kp.f16(0.1), 0.1, rel_tol=1e-3)


def test_import_kaio_does_not_import_xdsl() -> None:
    code = (
        "import sys, kaio, kaio.prelude\n"
        "assert 'xdsl' not in sys.modules, 'xdsl imported eagerly'\n"
        "kaio.gpu_kernel\n"
        "assert 'xdsl' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_decorator_without_arguments_uses_256_threads(load: Load) -> None:
    m = load("@kaio.gpu_kernel\ndef k(x: MutArray[f32]):\n    x[0] = 1.0\n")
    assert m.k.block_size == (256, 1, 1) and "kaio.gpu_kernel k(x)" in repr(m.k)
