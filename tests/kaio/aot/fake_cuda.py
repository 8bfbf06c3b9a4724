"""The recording libcuda (``fake_libcuda.c``) and the harness around it.

``build_fake(folder)``: the fake, compiled against the wheel's ``cuda.h`` (so its functions
have the driver's prototypes), as ``folder/libcuda.so.1``. ``build_launcher(export_dir, name,
fake)``: the exported C as a shared library linked to it. ``run(code, fake, log)``: Python in a
subprocess whose ``libcuda.so.1`` is the fake (kaio's own CudaBackend and the real cuda-python
bindings on top of it). ``parse(log)``: the recorded events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
GCC = shutil.which("gcc")
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def cuda_include() -> Path | None:
    try:
        import nvidia.cuda_runtime
    except ImportError:
        return None
    include = Path(list(nvidia.cuda_runtime.__path__)[0]) / "include"
    return include if (include / "cuda.h").is_file() else None


def need_gcc() -> tuple[str, Path]:
    include = cuda_include()
    if GCC is None or include is None:
        pytest.skip("needs gcc and the cuda.h of the nvidia-cuda-runtime-cu12 wheel")
    return GCC, include


def build_fake(folder: Path) -> Path:
    gcc, include = need_gcc()
    folder.mkdir(parents=True, exist_ok=True)
    # -isystem: cuda.h itself uses unnamed unions, which -pedantic flags (not the code built here)
    subprocess.run([gcc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-isystem", str(include),
                    "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"), str(HERE / "fake_libcuda.c"),
                    "-lpthread"], check=True)  # fmt: skip
    (folder / "libcuda.so").unlink(missing_ok=True)
    (folder / "libcuda.so").symlink_to("libcuda.so.1")
    return folder


def build_launcher(export_dir: Path, name: str, fake: Path) -> Path:
    """``lib<name>.so`` from the export's C, warning-free under -Wall -Wextra -pedantic -Werror."""
    gcc, include = need_gcc()
    library = export_dir / f"lib{name}.so"
    result = subprocess.run([gcc, *WARNINGS, "-fPIC", "-shared", "-isystem", str(include), "-o", str(library),
                             str(export_dir / f"{name}.c"), f"-L{fake}", "-lcuda", "-lpthread"],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return library


def run(code: str, fake: Path, log: Path, cc: int = 80, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter on the fake driver (``KAIO_DEVICE=cuda``: no simulator fallback)."""
    environment = {**os.environ, "LD_LIBRARY_PATH": f"{fake}:{os.environ.get('LD_LIBRARY_PATH', '')}",
                   "FAKE_CUDA_LOG": str(log), "FAKE_CUDA_CC": str(cc), "KAIO_DEVICE": "cuda", **env}  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                            cwd=HERE, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@dataclass
class Event:
    kind: str
    words: list[str]
    fields: dict[str, str]


def parse(log: Path) -> list[Event]:
    events = []
    for line in log.read_text().splitlines():
        kind, *words = line.split(" ")
        fields = dict(w.split("=", 1) for w in words if "=" in w)
        events.append(Event(kind, words, fields))
    return events


def of_kind(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.kind == kind]
