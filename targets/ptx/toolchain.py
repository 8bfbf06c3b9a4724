"""Optional NVIDIA tools from PyPI wheels, used to *check* kaio's PTX (never to produce it).

``ptxas`` comes from the ``nvidia-cuda-nvcc-cu12`` wheel and ``cuobjdump`` from
``nvidia-cuda-cuobjdump``; both are test extras. They are looked up inside the installed
wheels, never on PATH, so a machine's own CUDA toolkit cannot make a test pass by accident.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def _nvidia_roots() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _find_tool(relative_paths: list[str]) -> Path | None:
    for root in _nvidia_roots():
        for rel in relative_paths:
            candidate = root / rel
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    return None


def find_ptxas() -> Path | None:
    """The ptxas binary of the ``nvidia-cuda-nvcc-cu12`` wheel, or None if not installed."""
    return _find_tool(["cuda_nvcc/bin/ptxas", "cu13/bin/ptxas"])


def find_cuobjdump() -> Path | None:
    """The cuobjdump binary of the ``nvidia-cuda-cuobjdump`` wheel, or None if not installed."""
    return _find_tool(["cu13/bin/cuobjdump", "cuda_cuobjdump/bin/cuobjdump", "cu12/bin/cuobjdump"])


def find_nvdisasm() -> Path | None:
    """The nvdisasm binary of the ``nvidia-cuda-nvdisasm`` wheel (cuobjdump -sass runs it)."""
    return _find_tool(["cu13/bin/nvdisasm", "cuda_nvdisasm/bin/nvdisasm", "cu12/bin/nvdisasm"])


@dataclass(frozen=True)
class PtxasReport:
    """What ``ptxas -v`` said about one assembled module."""

    cubin: bytes
    log: str
    registers: dict[str, int]  # per entry
    spill_stores: dict[str, int]
    spill_loads: dict[str, int]


class PtxasError(RuntimeError):
    pass


_FUNC_RE = re.compile(r"Compiling entry function '(\w+)'")
_REGS_RE = re.compile(r"Used (\d+) registers")
_SPILL_RE = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def assemble(ptx: str, arch: str) -> PtxasReport:
    """Assemble PTX text with the wheel's ptxas for ``arch`` (e.g. ``"sm_80"``), verbosely."""
    ptxas = find_ptxas()
    if ptxas is None:
        raise PtxasError("ptxas not found: pip install nvidia-cuda-nvcc-cu12")
    with tempfile.TemporaryDirectory(prefix="kaio-ptxas-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        out = Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        proc = subprocess.run(
            [str(ptxas), "-v", f"-arch={arch}", str(src), "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise PtxasError(f"ptxas -arch={arch} rejected the PTX:\n{log}")
        cubin = out.read_bytes()
    registers: dict[str, int] = {}
    spill_stores: dict[str, int] = {}
    spill_loads: dict[str, int] = {}
    current = None
    for line in log.splitlines():
        if m := _FUNC_RE.search(line):
            current = m.group(1)
        elif current is not None and (m := _SPILL_RE.search(line)):
            spill_stores[current] = int(m.group(1))
            spill_loads[current] = int(m.group(2))
        elif current is not None and (m := _REGS_RE.search(line)):
            registers[current] = int(m.group(1))
    return PtxasReport(cubin, log, registers, spill_stores, spill_loads)


def disassemble(cubin: bytes) -> str:
    """SASS text of a cubin, through the wheel's ``cuobjdump -sass``."""
    tool, disasm = find_cuobjdump(), find_nvdisasm()
    if tool is None or disasm is None:
        raise PtxasError("cuobjdump -sass needs: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    env = {**os.environ, "NVDISASM_PATH": str(disasm)}
    with tempfile.TemporaryDirectory(prefix="kaio-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise PtxasError(f"cuobjdump failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout
