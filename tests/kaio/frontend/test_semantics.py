"""The frontend's IR means what the Python source means.

A small single-thread interpreter runs the built IR (arith, math, scf, kernel ops) and the same
function runs as plain Python with the builtins replaced by host stand-ins; on inputs where
Python and kaio agree (no negative `//`/`%`, no overflow) both must write the same outputs.
This checks the lowering of early exits, loops, short-circuits and inlining end to end.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import arith, scf
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from kaio.dialects import kernel as kd
from kaio.frontend import DeviceFunction, ParamKind

Load = Callable[..., ModuleType]

# ---------------------------------------------------------------------------- the interpreter

_CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
_CMPF = {1: "oeq", 2: "ogt", 3: "oge", 4: "olt", 5: "ole", 13: "une"}
_FLOAT_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _bits(t: Any) -> int:
    return t.width.data if isinstance(t, IntegerType) else 0


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _round(v: float, t: Any) -> float:
    with np.errstate(all="ignore"):
        return float(_FLOAT_NP[str(t)](v))


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class Machine:
    """Runs one thread of a kernel. Integers are held as unsigned bit patterns."""

    def __init__(self, thread: int = 0, block: int = 0, block_dim: int = 32):
        self.values: dict[SSAValue, Any] = {}
        self.specials = {
            "thread_id": thread,
            "block_id": block,
            "block_dim": block_dim,
            "grid_dim": 1,
        }

    def run(self, module: ModuleOp, args: list[Any]) -> None:
        func = kd.kernel_funcs(module)[0]
        for arg, value in zip(func.body.block.args, args, strict=True):
            self.values[arg] = value % (1 << _bits(arg.type)) if isinstance(value, int) else value
        self.block(func.body.block, tuple(self.values[a] for a in func.body.block.args))

    def block(self, block: Block, args: tuple[Any, ...] = ()) -> list[Any]:
        for arg, v in zip(block.args, args, strict=True):
            self.values[arg] = v
        for op in block.ops:
            if isinstance(op, scf.YieldOp | scf.ConditionOp):
                return [self.values[o] for o in op.operands]
            results = self.op(op)
            for r, v in zip(op.results, results, strict=True):
                self.values[r] = v
        return []

    def op(self, op: Operation) -> list[Any]:  # a dispatch table: one case per op
        v = [self.values[o] for o in op.operands]
        t = op.results[0].type if op.results else None
        w = _bits(t) if t is not None else 0
        mask = (1 << w) - 1 if w else 0
        match op:
            case kd.SourceLocOp() | kd.BarrierOp() | kd.ReturnOp():
                return []
            case arith.ConstantOp(value=IntegerAttr() as a):
                return [a.value.data & mask]
            case arith.ConstantOp(value=FloatAttr() as a):
                return [a.value.data]
            case arith.AddiOp():
                return [(v[0] + v[1]) & mask]
            case arith.SubiOp():
                return [(v[0] - v[1]) & mask]
            case arith.MuliOp():
                return [(v[0] * v[1]) & mask]
            case arith.DivSIOp():
                return [_trunc_div(_signed(v[0], w), _signed(v[1], w)) & mask]
            case arith.DivUIOp():
                return [v[0] // v[1]]
            case arith.RemSIOp():
                a, b = _signed(v[0], w), _signed(v[1], w)
                return [(a - b * _trunc_div(a, b)) & mask]
            case arith.RemUIOp():
                return [v[0] % v[1]]
            case arith.AndIOp():
                return [v[0] & v[1]]
            case arith.OrIOp():
                return [v[0] | v[1]]
            case arith.XOrIOp():
                return [v[0] ^ v[1]]
            case arith.ShLIOp():
                return [(v[0] << v[1]) & mask]
            case arith.ShRUIOp():
                return [v[0] >> v[1]]
            case arith.ShRSIOp():
                return [(_signed(v[0], w) >> v[1]) & mask]
            case arith.MinSIOp() | arith.MaxSIOp():
                pick = min if isinstance(op, arith.MinSIOp) else max
                return [pick(v, key=lambda x: _signed(x, w))]
            case arith.MinUIOp():
                return [min(v)]
            case arith.MaxUIOp():
                return [max(v)]
            case arith.CmpiOp():
                pred = _CMPI[op.predicate.value.data]
                a, b = v
                if pred[0] == "s":
                    bits = _bits(op.operands[0].type)
                    a, b = _signed(a, bits), _signed(b, bits)
                relation = pred[-2:]  # eq, ne, lt, le, gt, ge
                result = {
                    "eq": a == b,
                    "ne": a != b,
                    "lt": a < b,
                    "le": a <= b,
                    "gt": a > b,
                    "ge": a >= b,
                }
                return [int(result[relation])]
            case arith.CmpfOp():
                pred = _CMPF[op.predicate.value.data]
                a, b = v
                if pred == "une":
                    return [int(a != b)]  # true for NaN, like une
                ordered = not (math.isnan(a) or math.isnan(b))
                result = {"oeq": a == b, "ogt": a > b, "oge": a >= b, "olt": a < b, "ole": a <= b}[
                    pred
                ]
                return [int(ordered and result)]
            case arith.SelectOp():
                return [v[1] if v[0] else v[2]]
            case arith.ExtUIOp():
                return [v[0]]
            case arith.ExtSIOp():
                return [_signed(v[0], _bits(op.operands[0].type)) & mask]
            case arith.TruncIOp():
                return [v[0] & mask]
            case arith.SIToFPOp():
                return [_round(_signed(v[0], _bits(op.operands[0].type)), t)]
            case arith.UIToFPOp():
                return [_round(v[0], t)]
            case arith.FPToSIOp() | arith.FPToUIOp():
                return [int(v[0]) & mask]
            case arith.ExtFOp() | arith.TruncFOp():
                return [_round(v[0], t)]
            case arith.AddfOp():
                return [_round(v[0] + v[1], t)]
            case arith.SubfOp():
                return [_round(v[0] - v[1], t)]
            case arith.MulfOp():
                return [_round(v[0] * v[1], t)]
            case arith.DivfOp():
                return [_round(v[0] / v[1] if v[1] else math.copysign(math.inf, v[0]), t)]
            case arith.NegfOp():
                return [-v[0]]
            case arith.MinnumfOp():
                return [min(v)]
            case arith.MaxnumfOp():
                return [max(v)]
            case xmath.TruncOp():
                return [float(math.trunc(v[0]))]
            case xmath.SqrtOp():
                return [_round(math.sqrt(v[0]), t)]
            case xmath.AbsFOp():
                return [abs(v[0])]
            case xmath.ExpOp():
                return [_round(math.exp(v[0]), t)]
            case scf.IfOp():
                region = op.true_region if v[0] else op.false_region
                return self.block(region.block) if region.blocks else []
            case scf.ForOp():
                lb, ub, step, *carried = v
                bits = _bits(op.lb.type)
                i = lb
                while _signed(i, bits) < _signed(ub, bits):
                    carried = self.block(op.body.block, (i, *carried))
                    i = (i + step) & ((1 << bits) - 1)
                return carried
            case scf.WhileOp():
                carried = v
                for _ in range(100_000):
                    cond, *forwarded = self.block(op.before_region.block, tuple(carried))
                    if not cond:
                        return forwarded
                    carried = self.block(op.after_region.block, tuple(forwarded))
                raise AssertionError("the loop does not terminate")
            case kd.ThreadIdOp() | kd.BlockIdOp() | kd.BlockDimOp() | kd.GridDimOp():
                return [
                    self.specials[op.name.removeprefix("kernel.")]
                    if op.dim.data.value == "x"
                    else 0
                ]
            case kd.LaneIdOp():
                return [self.specials["thread_id"] % 32]
            case kd.SharedAllocOp():
                return [np.zeros(op.result.type.get_shape(), dtype=np.float64)]
            case kd.LoadOp():
                return [self._get(v[0], v[1:], op.result.type)]
            case kd.StoreOp():
                self._set(v[1], v[2:], v[0], op.value.type)
                return []
            case kd.AtomicRMWOp():
                old = self._get(v[1], v[2:], op.value.type)
                new = old + v[0] if op.combine.data in (kd.Combine.ADDI, kd.Combine.ADDF) else v[0]
                self._set(v[1], v[2:], new, op.value.type)
                return [old]
        raise NotImplementedError(op.name)

    @staticmethod
    def _index(ref: np.ndarray, indices: list[int]) -> tuple[int, ...]:
        bits = 64 if isinstance(ref, np.ndarray) and ref.ndim == 1 and len(indices) == 1 else 32
        index = tuple(_signed(i, bits) for i in indices)
        if any(not 0 <= i < n for i, n in zip(index, ref.shape, strict=True)):
            raise IndexError(f"out-of-bounds access {index} of shape {ref.shape}")
        return index

    def _get(self, ref: np.ndarray, indices: list[int], t: Any) -> Any:
        value = ref[self._index(ref, indices)].item()
        if isinstance(t, IntegerType):
            return int(value) % (1 << t.width.data)
        return float(value)

    def _set(self, ref: np.ndarray, indices: list[int], value: Any, t: Any) -> None:
        if isinstance(t, IntegerType) and np.issubdtype(ref.dtype, np.signedinteger):
            value = _signed(value, t.width.data)
        ref[self._index(ref, indices)] = value


def run_ir(kernel: Any, args: list[Any], constexprs: dict[str, Any] | None = None) -> None:
    Machine().run(kernel.build(constexprs or {}).module, args)


def run_python(kernel: Any, args: list[Any], constexprs: dict[str, Any] | None = None) -> None:
    """The kernel's own function, run by Python with host stand-ins for the builtins."""
    fn = kernel.fn
    host = dict(fn.__globals__)
    host.update(thread_idx_x=lambda: 0, block_idx_x=lambda: 0, static_range=range)
    for name, value in list(host.items()):
        if isinstance(value, DeviceFunction):
            inner = value.fn
            host[name] = types.FunctionType(
                inner.__code__, host, inner.__name__, inner.__defaults__
            )
    clone = types.FunctionType(fn.__code__, host, fn.__name__, fn.__defaults__, fn.__closure__)
    runtime = iter(args)
    call: dict[str, Any] = {}
    for p in kernel.params:
        if p.kind is not ParamKind.CONSTEXPR:
            call[p.name] = next(runtime)
        else:
            call[p.name] = (constexprs or {}).get(p.name, p.default)
    clone(**call)


def agree(
    kernel: Any, make_args: Callable[[], list[Any]], constexprs: dict[str, Any] | None = None
) -> None:
    a, b = make_args(), make_args()
    run_ir(kernel, a, constexprs)
    run_python(kernel, b, constexprs)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------------- the kernels


KERNELS = """
@kaio.gpu_kernel(block_size=32)
def search(x: Array[i32], out: MutArray[i32], n: i32, target: i32):
    out[0] = -1
    for i in range(n):
        if x[i] == target:
            out[0] = i
            return
        out[1] += 1
    out[2] = 7

@kaio.gpu_kernel(block_size=32)
def skip_and_stop(x: Array[i32], out: MutArray[i32], n: i32):
    total = 0
    for i in range(n):
        if x[i] % 3 == 0:
            continue
        if x[i] > 40:
            break
        total += x[i]
        for j in range(i):
            if j > 2:
                break
            total += 1
    out[0] = total

@kaio.gpu_kernel(block_size=32)
def steps(out: MutArray[i32], a: i32, b: i32, s: i32, m: u32):
    count = 0
    for i in range(a, b, s):
        count += i
    out[0] = count
    for j in range(m, 0, -1):
        out[1] += 1
    for k in range(b, a, -3):
        out[2] += k
    for q in range(m):
        out[3] += 2

@kaio.gpu_kernel(block_size=32)
def short_circuit(x: Array[i32], out: MutArray[i32], n: i32, i: i32):
    if i < n and x[i] > 10:
        out[0] = 1
    if i >= n or x[i] == 0:
        out[1] = 1
    out[2] = x[i] if i < n else -5
    if 0 <= i < n and not x[i] < 3:
        out[3] = 1

@kaio.device
def classify(v: i32) -> i32:
    if v < 10:
        return 0
    elif v < 20:
        return 1
    for k in range(3):
        if v < 30 + k * 10:
            return 2 + k
    return 9

@kaio.gpu_kernel(block_size=32)
def helpers(x: Array[i32], out: MutArray[i32], n: i32):
    i = 0
    while i < n:
        out[i] = classify(x[i])
        i += 1

@kaio.gpu_kernel(block_size=32)
def unrolled(x: Array[i32], out: MutArray[i32], N: kaio.constexpr = 6):
    acc = 0
    for j in static_range(N):
        if x[j] == 0:
            continue
        if x[j] > 50:
            break
        acc = acc * 2 + x[j]
    out[0] = acc

@kaio.gpu_kernel(block_size=32)
def while_flags(x: Array[i32], out: MutArray[i32], n: i32):
    i = 0
    found = 0
    while True:
        if i >= n:
            break
        if x[i] == 13:
            found = 1
            break
        i += 1
    out[0] = i
    out[1] = found
    k = n
    while k > 0 and x[k - 1] != 0:
        k -= 1
    out[2] = k
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    import importlib.util

    path = tmp_path_factory.mktemp("sem") / "semantics_kernels.py"
    path.write_text("import kaio\nfrom kaio.prelude import *\n" + KERNELS)
    spec = importlib.util.spec_from_file_location("semantics_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


small = st.integers(0, 60)
arrays = st.lists(small, min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(data=arrays, target=small)
def test_search_with_early_return(kernels: ModuleType, data: list[int], target: int) -> None:
    agree(
        kernels.search, lambda: [np.array(data, np.int32), np.zeros(3, np.int32), len(data), target]
    )


@settings(max_examples=40, deadline=None)
@given(data=arrays)
def test_continue_and_break_in_nested_loops(kernels: ModuleType, data: list[int]) -> None:
    agree(
        kernels.skip_and_stop, lambda: [np.array(data, np.int32), np.zeros(1, np.int32), len(data)]
    )


@settings(max_examples=60, deadline=None)
@given(a=st.integers(-20, 20), b=st.integers(-20, 20), s=st.integers(-5, 5), m=st.integers(0, 6))
def test_range_steps_and_signedness(kernels: ModuleType, a: int, b: int, s: int, m: int) -> None:
    if s == 0:
        s = 1  # Python raises on a zero step; kaio runs no iteration (documented)
    agree(kernels.steps, lambda: [np.zeros(4, np.int32), a, b, s, m])


@settings(max_examples=40, deadline=None)
@given(data=arrays, i=st.integers(0, 14))
def test_short_circuit_never_reads_out_of_bounds(
    kernels: ModuleType, data: list[int], i: int
) -> None:
    # The interpreter raises IndexError on an out-of-bounds load, as Python does.
    agree(
        kernels.short_circuit,
        lambda: [np.array(data, np.int32), np.zeros(4, np.int32), len(data), i],
    )


@settings(max_examples=40, deadline=None)
@given(data=arrays)
def test_device_function_with_returns_in_branches_and_loops(
    kernels: ModuleType, data: list[int]
) -> None:
    agree(
        kernels.helpers,
        lambda: [np.array(data, np.int32), np.zeros(len(data), np.int32), len(data)],
    )


@settings(max_examples=40, deadline=None)
@given(data=st.lists(small, min_size=6, max_size=6), n=st.integers(1, 6))
def test_static_range_with_break_and_continue(kernels: ModuleType, data: list[int], n: int) -> None:
    agree(kernels.unrolled, lambda: [np.array(data, np.int32), np.zeros(1, np.int32)], {"N": n})


@settings(max_examples=40, deadline=None)
@given(data=st.lists(st.integers(0, 20), min_size=1, max_size=12))
def test_while_true_with_breaks(kernels: ModuleType, data: list[int]) -> None:
    agree(kernels.while_flags, lambda: [np.array(data, np.int32), np.zeros(3, np.int32), len(data)])
