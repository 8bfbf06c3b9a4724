"""Helpers for the simulator tests: a small host-side wrapper around the simulator's memory,
PTX validation with the wheel's ptxas (skipped when the wheel is absent), and a generator for
"one instruction per thread" kernels used to test instructions against numpy."""

from __future__ import annotations

import importlib.util
import struct
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import ml_dtypes
import numpy as np
import pytest
from kaio.targets.ptx.toolchain import assemble, find_ptxas
from kaio.targets.sim import Simulator

PTX_DIR = Path(__file__).parent / "ptx"
HEADER = ".version 8.0\n.target sm_80\n.address_size 64\n"
REPO = Path(__file__).resolve().parents[3]


def check_ptx(ptx: str, arch: str = "sm_80") -> None:
    """Assemble with ptxas when the wheel is installed: proves the test PTX is real PTX."""
    if find_ptxas() is not None:
        assemble(ptx, arch)


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@dataclass
class Buffer:
    address: int
    nbytes: int
    dtype: np.dtype
    shape: tuple[int, ...]


class Device:
    """Allocate, fill, poison and read simulator buffers; pack launch parameters."""

    def __init__(self, sim: Simulator):
        self.sim = sim

    def array(self, data: np.ndarray) -> Buffer:
        data = np.ascontiguousarray(data)
        buf = Buffer(self.sim.memory.alloc(data.nbytes), data.nbytes, data.dtype, data.shape)
        self.sim.memory.write(buf.address, data)
        return buf

    def empty(self, shape: int | tuple[int, ...], dtype: object) -> Buffer:
        """An output buffer poisoned before launch: NaN for floats, all-ones bits otherwise."""
        dt = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        poison = np.full(shape, 0xFF, dtype=np.uint8) if dt.kind != "f" else None
        if poison is None:
            data = np.full(shape, np.nan, dtype=dt)
        else:
            data = np.full(int(np.prod(shape)) * dt.itemsize, 0xFF, dtype=np.uint8).view(dt).reshape(shape)
        return self.array(data)

    def read(self, buf: Buffer) -> np.ndarray:
        return self.sim.memory.read(buf.address, buf.nbytes).view(buf.dtype).reshape(buf.shape)

    @staticmethod
    def params(*args: object) -> list[bytes]:
        out = []
        for a in args:
            if isinstance(a, Buffer):
                out.append(struct.pack("<Q", a.address))
            elif isinstance(a, np.generic):
                out.append(a.tobytes())
            else:
                raise TypeError(f"pass numpy scalars or Buffers, not {type(a).__name__}")
        return out

    def launch(self, module, name, grid, block, *args, shared_bytes=0, profile=False):  # type: ignore[no-untyped-def]
        return module.launch(name, grid, block, self.params(*args), shared_bytes=shared_bytes, profile=profile)


@pytest.fixture
def dev(sim: Simulator) -> Device:
    return Device(sim)


def load_ptx(sim: Simulator, name: str):  # type: ignore[no-untyped-def]
    """Load tests/targets/sim/ptx/<name>.ptx, checked by ptxas first."""
    text = (PTX_DIR / f"{name}.ptx").read_text()
    check_ptx(text)
    return sim.load(text)


def _reference_module() -> ModuleType:
    """benchmarks/reference_ptx.py (not a package): the generator of the Triton and nvcc
    fixtures, their kernel sources and launch configurations."""
    spec = importlib.util.spec_from_file_location("reference_ptx", REPO / "benchmarks" / "reference_ptx.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _reference_module()


def load_fixture(sim: Simulator, name: str, text: str | None = None):  # type: ignore[no-untyped-def]
    """A Triton/nvcc fixture (or ``text``, a variant of it): (module, kernel, block, shared)."""
    text = text if text is not None else (PTX_DIR / f"{name}.ptx").read_text()
    check_ptx(text)
    kernel, block, shared = REFERENCE.launch_info(text)
    return sim.load(text), kernel, block, shared


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """Relative Frobenius error."""
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.fixture
def ptx_file(sim: Simulator):  # type: ignore[no-untyped-def]
    return lambda name: load_ptx(sim, name)


_NP_OF = {
    "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
    "u8": np.uint8, "s8": np.int8, "u16": np.uint16, "s16": np.int16, "u32": np.uint32, "s32": np.int32,
    "u64": np.uint64, "s64": np.int64, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64,
    "f16x2": np.uint32, "bf16x2": np.uint32, "pred": np.uint8,
}  # fmt: skip


def _bits(ptx_type: str) -> int:
    if ptx_type == "pred":
        return 1
    if ptx_type in ("f16x2", "bf16x2"):
        return 32
    return int("".join(ch for ch in ptx_type if ch.isdigit())[:2] or 0)


def elementwise_ptx(body: str, ins: dict[str, str], outs: dict[str, str], extra_regs: str = "", arch: str = "sm_80", version: str = "8.0") -> str:
    """A kernel where thread i loads ins[k][i] into register %k, runs ``body`` and stores each
    %k of ``outs`` to its output array. Registers are declared .bN (or .pred)."""
    names = list(ins) + list(outs)
    params = ", ".join(f".param .u64 p_{k}" for k in names)
    decl = []
    for k in names:
        t = {**ins, **outs}[k]
        decl.append(f".reg .pred %{k};" if t == "pred" else f".reg .b{max(_bits(t), 16)} %{k};")
    lines = [
        HEADER.replace("8.0", version).replace("sm_80", arch),
        f".visible .entry ew({params}, .param .u32 n)",
        "{",
        "  .reg .pred %guard;",
        "  .reg .b32 %tid_, %ntid_, %ctaid_, %i_, %n_;",
        "  .reg .b64 %addr_, %off_, %base_;",
        "  .reg .b16 %byte_;",
        *("  " + d for d in decl),
        extra_regs,
        "  mov.u32 %tid_, %tid.x;",
        "  mov.u32 %ntid_, %ntid.x;",
        "  mov.u32 %ctaid_, %ctaid.x;",
        "  mad.lo.s32 %i_, %ctaid_, %ntid_, %tid_;",
        "  ld.param.u32 %n_, [n];",
        "  setp.ge.u32 %guard, %i_, %n_;",
        "  @%guard bra END;",
    ]
    for k, t in ins.items():
        width = max(_bits(t), 8) // 8
        lines += [
            f"  ld.param.u64 %base_, [p_{k}];",
            f"  mul.wide.u32 %off_, %i_, {width};",
            "  add.s64 %addr_, %base_, %off_;",
        ]
        if t == "pred":
            lines += ["  ld.global.u8 %byte_, [%addr_];", f"  setp.ne.u16 %{k}, %byte_, 0;"]
        elif _bits(t) == 8:
            lines.append(f"  ld.global.{t} %{k}, [%addr_];")
        else:
            lines.append(f"  ld.global.b{_bits(t)} %{k}, [%addr_];")
    lines.append(body)
    for k, t in outs.items():
        width = max(_bits(t), 8) // 8
        lines += [
            f"  ld.param.u64 %base_, [p_{k}];",
            f"  mul.wide.u32 %off_, %i_, {width};",
            "  add.s64 %addr_, %base_, %off_;",
        ]
        if t == "pred":
            lines += [f"  selp.u16 %byte_, 1, 0, %{k};", "  st.global.u8 [%addr_], %byte_;"]
        elif _bits(t) == 8:
            lines.append(f"  st.global.{t} [%addr_], %{k};")
        else:
            lines.append(f"  st.global.b{_bits(t)} [%addr_], %{k};")
    lines += ["END:", "  ret;", "}", ""]
    return "\n".join(lines)


class Elementwise:
    def __init__(self, sim: Simulator):
        self.sim = sim
        self.dev = Device(sim)

    def __call__(
        self,
        body: str,
        ins: dict[str, tuple[str, np.ndarray]],
        outs: dict[str, str],
        extra_regs: str = "",
        block: int = 128,
        arch: str = "sm_80",
        version: str = "8.0",
    ) -> dict[str, np.ndarray]:
        ptx = elementwise_ptx(body, {k: t for k, (t, _) in ins.items()}, outs, extra_regs, arch, version)
        check_ptx(ptx, arch)
        module = self.sim.load(ptx)
        n = len(next(iter(ins.values()))[1])
        bufs = [self.dev.array(np.asarray(a, dtype=np.uint8) if t == "pred" else np.ascontiguousarray(a)) for t, a in ins.values()]
        out_bufs = {k: self.dev.empty(n, _NP_OF[t]) for k, t in outs.items()}
        self.dev.launch(module, "ew", ((n + block - 1) // block, 1, 1), (block, 1, 1), *bufs, *out_bufs.values(), np.uint32(n))
        return {k: self.dev.read(b) for k, b in out_bufs.items()}


@pytest.fixture
def elementwise(sim: Simulator) -> Elementwise:
    return Elementwise(sim)
