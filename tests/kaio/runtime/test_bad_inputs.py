"""The error table of the design map, row by row: each bad input gets the kaio error the table
names, and no Python-internal exception (AttributeError, TypeError, RecursionError...) escapes.

The tile-kernel row (shapes that do not match in dot/broadcast/store) is covered with the tile
language. Rows are (case id, kernel source or None, action, expected error type, text the
message names); ``action(module, device)`` does the bad thing.
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
)

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
    ("pipeline: default arch under sm_90", GOOD, lambda m, d: kaio.compile(m.k, "sm_90", pipeline="lower-to-ptx"), KaioCompileError, "sm_80"),
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
