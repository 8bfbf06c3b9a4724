"""The error table of the design map, row by row: each bad input gets the kaio error the table
names, and no Python-internal exception (AttributeError, TypeError, RecursionError...) escapes.

The tile-kernel row (shapes that do not match in dot/broadcast/store) is covered with the tile
language. Rows are (case id, kernel source or None, action, expected error type, text the
message names); ``action(module, device)`` does the bad thing. Beyond the table's rows: the
library ops' arguments and configs, buffers and interop arrays, array element types and the
element types each atomic has in PTX (a wrong type is a KaioTypeError, a value of the right type
that cannot work a KaioValueError, also a ValueError).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import kaio
from kaio import (
    KaioCompileError,
    KaioError,
    KaioLaunchError,
    KaioMemoryError,
    KaioTargetError,
    KaioTypeError,
    KaioValueError,
)
from kaio.ops_library import attention, gelu_and_mul
from kaio.ops_library.attention import AttentionConfig
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.targets.ptx import toolchain

GOOD = """
@kaio.gpu_kernel(block_size=32)
def k(x: Array[f32], y: MutArray[f32], n: u32, s: i8, h: f16, SCALE: kaio.constexpr = 2):
    i = thread_idx_x()
    if i < n:
        y[i] = x[i] * SCALE
"""


def kernel(*lines: str, sig: str = "x: Array[f32], y: MutArray[f32], n: u32, h: f16, s: i32") -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"@kaio.gpu_kernel(block_size=32)\ndef k({sig}):\n{body}"


def compiles(m: ModuleType, dev: kaio.Device) -> Any:
    return kaio.compile(m.k)


def compiles_for(arch: str) -> Callable[[ModuleType, kaio.Device], Any]:
    return lambda m, dev: kaio.compile(m.k, arch)


def launches(*args: Any, **kw: Any) -> Callable[[ModuleType, kaio.Device], Any]:
    """Launch ``m.k`` with ``args``; the strings "x", "y" become float32 buffers of 32."""

    def act(m: ModuleType, dev: kaio.Device) -> Any:
        bufs = {"x": dev.zeros(32), "y": dev.zeros(32), "x16": dev.zeros(32, np.float16)}
        values = [bufs[a] if isinstance(a, str) and a in bufs else a for a in args]
        return m.k.launch(dev, *values, grid=1, **kw)

    return act


def freed_buffer(m: ModuleType, dev: kaio.Device) -> Any:
    x = dev.zeros(32)
    x.free()
    return m.k.launch(dev, x, dev.zeros(32), 4, 0, 1.0, grid=1)


def source_case(code: str) -> tuple[str, Callable[[ModuleType, kaio.Device], Any]]:
    return code, compiles


def bad_decorator(block_size: Any) -> str:
    return f"@kaio.gpu_kernel(block_size={block_size})\ndef k(x: MutArray[f32]):\n    x[0] = 1.0\n"


UNSUPPORTED = {  # unsupported Python in a kernel: KaioCompileError at the line
    "try statement": kernel("try:", "    y[0] = 1.0", "except Exception:", "    pass"),
    "with statement": kernel("with open('f'):", "    pass"),
    "lambda": kernel("f = lambda v: v", "y[0] = 1.0"),
    "list comprehension": kernel("v = [i for i in range(3)]"),
    "dict literal": kernel("v = {1: 2}"),
    "string constant": kernel("v = 'text'"),
    "print call": kernel("print(n)"),
    "unknown name": kernel("y[0] = nowhere"),
    "unknown function": kernel("y[0] = nowhere(1.0)"),
    "nested def": kernel("def inner():", "    pass"),
    "global statement": kernel("global g"),
    "yield": kernel("yield 1"),
    "del statement": kernel("v = 1", "del v"),
    "star args call": kernel("y[0] = max(*x)"),
    "store to a read-only array": kernel("x[0] = 1.0"),
    "array as a value": kernel("v = x + 1.0"),
    "while else": kernel("while n > 0:", "    n = n - 1", "else:", "    pass"),
    "return a value from a kernel": kernel("return 1"),
}

MISMATCHES = {  # type mismatch in a kernel: KaioCompileError naming both types
    "f32 + f16": (kernel("y[0] = x[0] + h"), "f16"),
    "u32 + i32": (kernel("v = n + s"), "i32"),
    "compare f32 with f16": (kernel("if x[0] < h:", "    y[0] = 1.0"), "f16"),
    "store f16 into f32": (kernel("y[0] = h"), "f16"),
    "float index": (kernel("y[x[0]] = 1.0"), "f32"),
    "rebind i32 as f32": (kernel("v = s", "v = x[0]"), "f32"),
    "int / int": (kernel("v = s / s"), "i32"),
    "bitwise on float": (kernel("v = x[0] & 1"), "f32"),
}

LAUNCH = {  # wrong launch args: KaioTypeError naming the parameter, before the launch
    "array dtype": (launches("x16", "y", 4, 0, 1.0), "x"),
    "too few arguments": (launches("x", "y", 4), "missing"),
    "too many arguments": (launches("x", "y", 4, 0, 1.0, 3, 9), "takes"),
    "const buffer as output": (lambda m, d: m.k.launch(d, d.zeros(32), d.zeros(32).readonly(), 4, 0, 1.0, grid=1), "y"),
    "scalar out of range": (launches("x", "y", 4, 300, 1.0), "s"),
    "negative unsigned": (launches("x", "y", -1, 0, 1.0), "n"),
    "fractional int": (launches("x", "y", 2.5, 0, 1.0), "n"),
    "bool for int": (launches("x", "y", True, 0, 1.0), "n"),
    "string for float": (launches("x", "y", 4, 0, "one"), "h"),
    "numpy array for scalar": (launches("x", "y", np.arange(3), 0, 1.0), "n"),
    "list for array": (launches([1.0, 2.0], "y", 4, 0, 1.0), "x"),
    "unknown keyword": (launches("x", "y", 4, 0, 1.0, nope=1), "nope"),
    "constexpr list": (launches("x", "y", 4, 0, 1.0, SCALE=[1, 2]), "SCALE"),
    "constexpr numpy array": (launches("x", "y", 4, 0, 1.0, SCALE=np.array([1, 2])), "SCALE"),
    "constexpr dict": (launches("x", "y", 4, 0, 1.0, SCALE={}), "SCALE"),
    "constexpr string": (launches("x", "y", 4, 0, 1.0, SCALE="two"), "SCALE"),
    "freed buffer": (freed_buffer, "freed"),
}


def on_device(action: Callable[[kaio.Device], Any]) -> Callable[[ModuleType | None, kaio.Device], Any]:
    return lambda m, dev: action(dev)


def qkv(dev: kaio.Device) -> np.ndarray:
    return np.zeros((1, 1, 16, 32), np.float16)


def attention_with(**kw: Any) -> Callable[[kaio.Device], Any]:
    return lambda dev: attention(qkv(dev), qkv(dev), qkv(dev), device=dev, **kw)


class ForeignArray:
    """A producer's ``__cuda_array_interface__`` over simulator memory, with any shape."""

    def __init__(self, dev: kaio.Device, shape: Any, ptr: Any = None) -> None:
        self.backing = dev.zeros(32)
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": "<f4", "version": 3, "data": (self.backing.ptr if ptr is None else ptr, False),
        }  # fmt: skip


OPS = {  # library ops: configs and arguments checked where given, naming the argument
    "MatmulConfig zero tile": (lambda d: MatmulConfig(block=(0, 64, 32)), KaioValueError, "`block`"),
    "MatmulConfig two-number block": (lambda d: MatmulConfig(block=(64, 64)), KaioValueError, "(BM, BN, BK)"),
    "MatmulConfig non-power-of-two tile": (lambda d: MatmulConfig(block=(96, 64, 32)), KaioValueError, "`block`"),
    "MatmulConfig float tile": (lambda d: MatmulConfig(block=(64.0, 64, 32)), KaioTypeError, "`block`"),
    "MatmulConfig persistent split-K": (lambda d: MatmulConfig(persistent=True, split_k=2), KaioValueError, "split_k"),
    "MatmulConfig zero split-K": (lambda d: MatmulConfig(split_k=0), KaioValueError, "`split_k`"),
    "MatmulConfig unknown layout": (lambda d: MatmulConfig(layout="swizle"), KaioValueError, "`layout`"),
    "MatmulConfig list layout": (lambda d: MatmulConfig(layout=["pad"]), KaioTypeError, "`layout`"),  # type: ignore[arg-type]
    "MatmulConfig string flag": (lambda d: MatmulConfig(tensor_cores="no"), KaioTypeError, "`tensor_cores`"),  # type: ignore[arg-type]
    "MatmulConfig 2048 threads": (lambda d: MatmulConfig(warps=(8, 8)), KaioValueError, "`warps`"),
    "MatmulConfig 1000 stages": (lambda d: MatmulConfig(stages=1000), KaioValueError, "`stages`"),
    "MatmulConfig maxnreg under ptxas's minimum": (lambda d: MatmulConfig(maxnreg=8), KaioValueError, "`maxnreg`"),
    "AttentionConfig zero rows": (lambda d: AttentionConfig(block_m=0), KaioValueError, "`block_m`"),
    "AttentionConfig float stages": (lambda d: AttentionConfig(stages=2.0), KaioTypeError, "`stages`"),  # type: ignore[arg-type]
    "gelu_and_mul approximate list": (
        lambda d: gelu_and_mul(np.ones((2, 4), np.float32), approximate=["tanh"], device=d), KaioTypeError, "`approximate`"  # type: ignore[arg-type]
    ),
    "gelu_and_mul approximate dict": (
        lambda d: gelu_and_mul(np.ones((2, 4), np.float32), approximate={}, device=d), KaioTypeError, "`approximate`"  # type: ignore[arg-type]
    ),
    "attention causal string": (attention_with(causal="no"), KaioTypeError, "`causal`"),
    "attention causal int": (attention_with(causal=1), KaioTypeError, "`causal`"),
    "attention scale bool": (attention_with(scale=True), KaioTypeError, "`scale`"),
    "attention scale string": (attention_with(scale="0.1"), KaioTypeError, "`scale`"),
    "attention scale inf": (attention_with(scale=float("inf")), KaioValueError, "`scale`"),
    "attention return_lse string": (attention_with(return_lse="yes"), KaioTypeError, "`return_lse`"),
    "attention config string": (attention_with(config="fast"), KaioTypeError, "config"),
}

RUNTIME = {  # buffers, host arrays and interop arrays
    "zeros of a float": (lambda d: d.zeros(2.5), KaioTypeError, "`shape`"),
    "zeros of None": (lambda d: d.zeros(None), KaioTypeError, "`shape`"),
    "zeros larger than the device": (lambda d: d.zeros(2**62), KaioValueError, "`shape`"),
    "empty larger than the device": (lambda d: d.empty((2**31, 2**31)), KaioValueError, "`shape`"),
    "reshape to a float": (lambda d: d.zeros(4).reshape(2.5), KaioTypeError, "`shape`"),
    "alloc_from ragged list": (lambda d: d.alloc_from([[1.0, 2.0], [3.0]]), KaioValueError, "`data`"),
    "copy_from ragged list": (lambda d: d.zeros(2).copy_from([[1.0], [2.0, 3.0]]), KaioValueError, "source"),
    "np.asarray of a buffer": (lambda d: np.asarray(d.zeros(4)), KaioTypeError, "to_host()"),
    "np.array of a buffer with a dtype": (lambda d: np.array(d.zeros(4), dtype=np.float64), KaioTypeError, "to_host()"),
    "len of a 0-d buffer": (lambda d: len(d.zeros(())), KaioTypeError, "0-d"),
    "CAI negative shape to alloc_from": (lambda d: d.alloc_from(ForeignArray(d, (-4,))), KaioTypeError, "(-4,)"),
    "CAI fractional shape to alloc_from": (lambda d: d.alloc_from(ForeignArray(d, (2.5,))), KaioTypeError, "(2.5,)"),
    "CAI negative pointer": (lambda d: d.alloc_from(ForeignArray(d, (4,), ptr=-16)), KaioTypeError, "pointer"),
}


def element_kernel(elem: str, quoted: bool = False) -> str:
    """A kernel of one ``MutArray[elem]`` parameter; ``quoted``: the annotation as a string (as
    ``from __future__ import annotations`` makes it), read by kaio rather than by Python."""
    note = f'"MutArray[{elem}]"' if quoted else f"MutArray[{elem}]"
    return f"@kaio.gpu_kernel(block_size=32)\ndef k(x: {note}):\n    x[0] = 1\n"


ELEMENTS = {  # array element types that are not kaio types: named, with the type meant
    "MutArray[int]": (element_kernel("int"), KaioTypeError, "use i32"),
    "Array[float]": (element_kernel("float").replace("MutArray", "Array"), KaioTypeError, "use f32"),
    "MutArray[numpy.float32]": ("import numpy\n" + element_kernel("numpy.float32"), KaioTypeError, "use f32"),
    "MutArray[bool]": (element_kernel("bool"), KaioTypeError, "use u8"),
    "MutArray[int] as a string": (element_kernel("int", quoted=True), KaioCompileError, "use i32"),
}

# Atomics PTX has no ``atom`` for: a KaioCompileError at the call naming the type, not a module
# that compiles and fails to load (``atom.add.u8``, ``atom.exch.b16`` do not assemble).
ATOMICS = {
    f"{call.split('(')[0]} on {t}": (kernel(f"v = {call}", sig=f"x: MutArray[{t}]"), f"not {t}")
    for call, types in (
        ("atomic_add(x, 0, x[1])", ("i8", "u8", "i16", "u16")),
        ("atomic_max(x, 0, x[1])", ("i8", "u16")),
        ("atomic_min(x, 0, x[1])", ("u8", "i16")),
        ("atomic_exch(x, 0, x[1])", ("i8", "u16", "f16", "bf16")),
        ("atomic_cas(x, 0, x[1], x[2])", ("i8", "u8")),
    )
    for t in types
}


CASES: list[tuple[str, str | None, Callable[..., Any], type[KaioError], str]] = [
    *(
        (f"unsupported: {name}", code, compiles, KaioCompileError, ":")
        for name, code in UNSUPPORTED.items()
    ),
    *(
        (f"mismatch: {name}", code, compiles, KaioCompileError, part)
        for name, (code, part) in MISMATCHES.items()
    ),
    *((f"launch: {name}", GOOD, act, KaioTypeError, part) for name, (act, part) in LAUNCH.items()),
    # feature not on the target arch
    ("arch: bf16 math on sm_75", kernel("y[0] = f32(bf16(x[0]) * bf16(x[0]))"), compiles_for("sm_75"), KaioTargetError, "sm_80"),
    ("arch: unknown arch", GOOD, compiles_for("sm_61"), KaioTargetError, "sm_61"),
    ("arch: sim of unknown arch", None, lambda m, d: kaio.Device("sim", arch="sm_42"), KaioTargetError, "sm_42"),
    # the JIT (here the simulator's loader) rejects PTX
    ("jit: syntax error", None, lambda m, d: d._modules.function(".version 7.0\n.target sm_80\n garbage", "k"), KaioLaunchError, "PTX"),
    ("jit: unknown instruction", None, lambda m, d: d._modules.function(".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n\tfrobnicate.u32 %r1;\n\tret;\n}\n", "k"), KaioLaunchError, "frobnicate"),
    # out-of-bounds / misaligned access on the simulator
    ("memory: out of bounds store", kernel("y[n] = 1.0"), launches("x", "y", 4096, 0, 1.0), KaioMemoryError, "thread"),
    ("memory: out of bounds load", kernel("y[0] = x[n]"), launches("x", "y", 1 << 20, 0, 1.0), KaioMemoryError, "address"),
    # pipelines that leave ops unlowered or name another arch
    ("pipeline: empty", GOOD, lambda m, d: kaio.compile(m.k, pipeline=""), KaioCompileError, "kernel.func"),
    ("pipeline: no lowering", GOOD, lambda m, d: kaio.compile(m.k, pipeline="canonicalize,cse"), KaioCompileError, "cse"),
    ("pipeline: other arch", GOOD, lambda m, d: kaio.compile(m.k, pipeline="lower-to-ptx{arch=sm_90}"), KaioCompileError, "sm_90"),
    ("pipeline: unknown pass", GOOD, lambda m, d: kaio.compile(m.k, pipeline="no-such-pass"), KaioCompileError, "no-such-pass"),
    ("pipeline: not a pipeline", GOOD, lambda m, d: kaio.compile(m.k, pipeline=42), KaioCompileError, "42"),
    # bad decorator arguments, non-kernels, unusable dump paths
    ("decorator: float block", bad_decorator("1.5"), compiles, KaioCompileError, "block_size"),
    ("decorator: None block", bad_decorator("None"), compiles, KaioCompileError, "block_size"),
    ("decorator: string block", bad_decorator("'256'"), compiles, KaioCompileError, "block_size"),
    ("decorator: zero block", bad_decorator("0"), compiles, KaioCompileError, "block_size"),
    ("decorator: too many threads", bad_decorator("(64, 32)"), compiles, KaioCompileError, "block_size"),
    ("decorator: four dims", bad_decorator("(1, 1, 1, 1)"), compiles, KaioCompileError, "block_size"),
    ("compile: plain function", None, lambda m, d: kaio.compile(lambda x: x), KaioTypeError, "gpu_kernel"),
    ("compile: int", None, lambda m, d: kaio.compile(3), KaioTypeError, "kernel"),
    ("compile: None", None, lambda m, d: kaio.compile(None), KaioTypeError, "kernel"),
    ("compile: empty module", None, lambda m, d: kaio.compile(ModuleOp([])), KaioCompileError, "kernel.func"),
    ("compile: dump_ir not a path", GOOD, lambda m, d: kaio.compile(m.k, dump_ir=3), KaioTypeError, "dump_ir"),
    *((f"ops: {name}", None, on_device(act), error, part) for name, (act, error, part) in OPS.items()),
    *((f"runtime: {name}", None, on_device(act), error, part) for name, (act, error, part) in RUNTIME.items()),
    ("runtime: CAI negative shape at launch", GOOD, lambda m, d: m.k.launch(d, ForeignArray(d, (-4,)), d.zeros(32), 4, 0, 1.0, grid=1),
     KaioTypeError, "parameter `x"),  # fmt: skip
    *((f"element: {name}", code, compiles, error, part) for name, (code, error, part) in ELEMENTS.items()),
    *((f"atomic: {name}", code, compiles, KaioCompileError, part) for name, (code, part) in ATOMICS.items()),
]


def _under_a_file(m: ModuleType, dev: kaio.Device, tmp: Path) -> Any:
    regular = tmp / "regular-file"
    regular.write_text("x")
    return kaio.compile(m.k, dump_ir=regular / "dumps")


def _raising_callback(m: ModuleType, dev: kaio.Device, tmp: Path) -> Any:
    def dump(stage: str, text: str) -> None:
        if stage == "lower-to-ptx":
            raise RuntimeError("disk full")

    return kaio.compile(m.k, dump_ir=dump)


def _env_dump_under_a_file(m: ModuleType, dev: kaio.Device, tmp: Path) -> Any:
    regular = tmp / "regular-file"
    regular.write_text("x")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAIO_DUMP_IR", str(regular / "dumps"))
        return kaio.compile(m.k)


PATH_CASES = [
    ("dump_ir under a regular file", _under_a_file, KaioCompileError, "dump_ir"),
    ("dump_ir callback raises", _raising_callback, KaioCompileError, "lower-to-ptx"),
    ("KAIO_DUMP_IR under a regular file", _env_dump_under_a_file, KaioCompileError, "KAIO_DUMP_IR"),
]


def _expect(action: Callable[[], Any], error: type[KaioError], part: str) -> None:
    try:
        action()
    except KaioError as exc:
        assert isinstance(exc, error), f"{type(exc).__name__} instead of {error.__name__}: {exc}"
        assert part in str(exc), f"{part!r} not in: {exc}"
        return
    except Exception as exc:  # the bug this table guards against
        pytest.fail(f"a raw {type(exc).__name__} escaped: {exc}")
    pytest.fail(f"no error; expected {error.__name__}")


@pytest.mark.parametrize(("code", "action", "error", "part"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_a_kaio_error(
    code: str | None,
    action: Callable[[ModuleType | None, kaio.Device], Any],
    error: type[KaioError],
    part: str,
    load_kernels: Callable[[str], ModuleType],
    sim: kaio.Device,
) -> None:
    def run() -> Any:
        module = load_kernels(code) if code is not None else None
        return action(module, sim)

    _expect(run, error, part)


@pytest.mark.parametrize(("action", "error", "part"), [c[1:] for c in PATH_CASES], ids=[c[0] for c in PATH_CASES])
def test_unusable_dump_targets_get_a_kaio_error(
    action: Callable[..., Any],
    error: type[KaioError],
    part: str,
    load_kernels: Callable[[str], ModuleType],
    sim: kaio.Device,
    tmp_path: Path,
) -> None:
    module = load_kernels(GOOD)
    _expect(lambda: action(module, sim, tmp_path), error, part)


def test_a_corrupt_cache_entry_is_rebuilt_not_an_error(
    load_kernels: Callable[[str], ModuleType], kaio_cache: Path
) -> None:
    module = load_kernels(GOOD)
    good = kaio.compile(module.k)
    (path,) = (kaio_cache / "kernels").glob("*.json")
    for text in ("[" * 50_000, json.dumps({"block_size": [float("inf")]}), "\x00garbage"):
        path.write_text(text)
        assert kaio.compile(module.k).ptx == good.ptx


def test_a_refused_call_leaves_its_output_untouched(sim: kaio.Device, rng: np.random.Generator) -> None:
    poison = rng.standard_normal((1, 1, 16, 32)).astype(np.float16)
    out = sim.alloc_from(poison)
    with pytest.raises(KaioTypeError, match="`causal`"):
        attention(qkv(sim), qkv(sim), qkv(sim), out=out, causal="no", device=sim)
    np.testing.assert_array_equal(out.to_host(), poison)
    kept = rng.standard_normal(2).astype(np.float32)
    buf = sim.alloc_from(kept)
    with pytest.raises(KaioValueError, match="source"):
        buf.copy_from([[1.0], [2.0, 3.0]])
    np.testing.assert_array_equal(buf.to_host(), kept)


def test_zero_d_arrays_upload_as_zero_d_buffers_and_launch(
    sim: kaio.Device, rng: np.random.Generator, load_kernels: Callable[[str], ModuleType]
) -> None:
    value = np.float32(rng.standard_normal())
    for data in (np.array(value), value):  # a 0-d array and a numpy scalar
        buf = sim.alloc_from(data)
        assert buf.shape == () and buf.to_host() == value
    m = load_kernels(kernel("y[0] = x[0] * 2.0", sig="x: Array[f32], y: MutArray[f32]"))
    y = sim.alloc_from(np.full(1, np.nan, np.float32))  # poisoned
    m.k.launch(sim, sim.alloc_from(np.array(value)), y, grid=1)
    np.testing.assert_array_equal(y.to_host(), [value * np.float32(2)])


CAS16 = kernel(
    "i = thread_idx_x()",
    "olds[i] = atomic_cas(x, i, want[i], new[i])",  # one element per thread
    "if atomic_cas(x, 32, x0, new[i]) == x0:",  # every thread on one element: exactly one wins
    "    atomic_add(wins, 0, 1)",
    sig="x: MutArray[T], want: Array[T], new: Array[T], olds: MutArray[T], wins: MutArray[i32], x0: T",
)


@pytest.mark.parametrize("t", ["i16", "u16"])
def test_16_bit_atomic_cas_is_the_one_16_bit_integer_atomic(
    t: str, sim: kaio.Device, rng: np.random.Generator, load_kernels: Callable[[str], ModuleType]
) -> None:
    """``atom.cas.b16`` exists (sm_70+): kept, checked against numpy, with collisions."""
    m = load_kernels(CAS16.replace("T", t))
    dt = np.dtype(np.int16 if t == "i16" else np.uint16)
    info = np.iinfo(dt)
    start = rng.integers(info.min, info.max, 33, dtype=dt, endpoint=True)
    want = np.where(rng.random(32) < 0.5, start[:32], rng.integers(info.min, info.max, 32, dtype=dt, endpoint=True))
    new = rng.integers(info.min, info.max, 32, dtype=dt, endpoint=True)
    new[new == start[32]] ^= dt.type(1)  # a winner's new value must not let a second one win
    x, olds, wins = sim.alloc_from(start), sim.alloc_from(np.zeros(32, dt) ^ dt.type(0x5A5A)), sim.zeros(1, np.int32)
    m.k.launch(sim, x, sim.alloc_from(want), sim.alloc_from(new), olds, wins, int(start[32]), grid=1)
    got = x.to_host()
    np.testing.assert_array_equal(olds.to_host(), start[:32])
    np.testing.assert_array_equal(got[:32], np.where(want == start[:32], new, start[:32]))
    assert wins.to_host()[0] == 1 and got[32] in new
    if toolchain.find_ptxas() is not None:
        toolchain.assemble(kaio.compile(m.k, "sm_80").ptx, "sm_80")  # ptxas takes it


def test_configs_normalise_what_they_accept_and_the_autotune_cache_remeasures_what_they_refuse() -> None:
    from kaio.ops_library import autotune as tuning

    config = MatmulConfig(block=[128, np.int64(128), 32], warps=(np.int32(2), 2))  # type: ignore[arg-type]
    assert config == MatmulConfig() and hash(config) == hash(MatmulConfig())
    assert type(config.block[1]) is int
    stored = {**tuning.encode(MatmulConfig()), "block": [0, 64, 32]}  # a damaged autotune entry
    with pytest.raises(ValueError, match="`block`"):  # what `tuned` catches to measure again
        tuning.decode(MatmulConfig, stored)
