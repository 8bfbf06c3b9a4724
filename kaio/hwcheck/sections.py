"""What ``python -m kaio.hwcheck`` runs: the sections of a GPU run and of a ``--sim`` smoke run,
each a command with its own time limits (see the package doc for the time plan)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from kaio.errors import KaioError

GPU_MARK = "pytest.mark.gpu"


class CheckoutMissing(KaioError):
    """hwcheck runs the repository's tests/ and benchmarks/, which a plain install lacks."""


@dataclass(frozen=True)
class Section:
    """One step of the check, run in its own process.

    ``timeout_s`` bounds the whole section; ``marker_timeout_s`` bounds the time from one
    progress marker (a test, a benchmark kernel) to the next, so a hang is caught well before the
    section's limit and named by its last marker."""

    name: str
    title: str
    argv: tuple[str, ...]
    timeout_s: float
    marker_timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    is_pytest: bool = False

    @property
    def command(self) -> str:
        """The command as a person would type it (the interpreter shown as ``python``)."""
        words = ["python" if self.argv[0] == sys.executable else self.argv[0], *self.argv[1:]]
        settings = [f"{k}={v}" for k, v in self.env.items()]
        return " ".join(settings + words)


def find_checkout(explicit: Path | None = None) -> Path:
    """The kaio source tree holding tests/ and benchmarks/: ``--repo``, else the current
    directory, else the tree kaio is installed from (an editable install)."""
    import kaio

    candidates = (
        [explicit]
        if explicit is not None
        else [Path.cwd(), Path(kaio.__file__).resolve().parents[1]]
    )
    for root in candidates:
        if (
            root is not None
            and (root / "benchmarks" / "matmul.py").is_file()
            and (root / "tests").is_dir()
        ):
            return root.resolve()
    where = str(explicit) if explicit is not None else "the current directory or kaio's install"
    raise CheckoutMissing(
        f"no kaio checkout in {where}: hwcheck runs the repository's tests/ and benchmarks/, "
        "which `pip install kaio` does not install; run it from a clone (or pass --repo DIR)"
    )


def gpu_test_files(root: Path) -> list[str]:
    """The test files with GPU tests (``pytest.mark.gpu``), relative to ``root``."""
    return sorted(
        str(path.relative_to(root))
        for path in (root / "tests").rglob("test_*.py")
        if GPU_MARK in path.read_text(encoding="utf-8")
    )


def plan(root: Path, *, sim: bool, hopper: bool) -> list[Section]:
    """The sections in order, each on the GPU's default target (sm_90a on Hopper, where the
    matmul's columns name every path: wgmma, warp-specialised, cp.async, persistent and
    mma.sync); on Hopper attention runs on the portable sm_90 target too."""
    python = sys.executable
    tests = (python, "-m", "pytest", "-m", "gpu", "-q", "-rfE", "-p", "kaio.hwcheck.pytest_plugin",
             *gpu_test_files(root))  # fmt: skip
    bench = "benchmarks/"  # run from the checkout's root: relative paths keep the report portable
    if sim:
        return [
            Section("tests", "GPU tests (skipped: no GPU in a --sim run)", tests, 120, 60, is_pytest=True),
            Section("matmul", "matmul on the simulator (script check, no timing)",
                    (python, bench + "matmul.py", "--sim-smoke", "--dtypes", "f16"), 120, 60),
            Section("attention", "attention on the simulator (script check)",
                    (python, bench + "attention.py", "--sim-smoke"), 120, 60),
            Section("memory_bound", "memory-bound ops on the simulator (CPU times, no GPU figure)",
                    (python, bench + "memory_bound.py", "--sim-smoke"), 120, 60),
            Section("training", "backward kernels on the simulator (script check, no GPU figure)",
                    (python, bench + "training.py", "--sim-smoke"), 120, 60),
            Section("quantized", "quantized ops on the simulator (script check, no GPU figure)",
                    (python, bench + "quantized.py", "--sim-smoke"), 120, 60),
            Section("launch", "launch overhead, host path on the simulator",
                    (python, bench + "launch_overhead.py", "--launches", "500", "--repeats", "2"), 120, 60),
        ]  # fmt: skip
    sections = [
        Section("tests", "GPU tests (`pytest -m gpu`)", tests, 420, 180, is_pytest=True),
        Section("matmul", "matmul throughput (TFLOP/s) beside cuBLAS and Triton",
                (python, bench + "matmul.py", "--sizes", "1024", "4096", "8192"), 300, 150),
        Section("attention", "attention throughput beside torch SDPA (FLASH, cuDNN)",
                (python, bench + "attention.py"), 150, 120),
    ]  # fmt: skip
    if hopper:
        sections.append(Section("attention_sm_90", "attention throughput, sm_90 (the portable mma.sync path)",
                                (python, bench + "attention.py"), 150, 120, {"KAIO_ARCH": "sm_90"}))  # fmt: skip
    sections += [
        Section("memory_bound", "memory-bound ops beside torch eager and a copy",
                (python, bench + "memory_bound.py"), 120, 60),
        Section("training", "backward kernels beside torch (FLASH backward, eager, F.linear + F.cross_entropy)",
                (python, bench + "training.py"), 120, 60),
        Section("quantized", "quantized ops: GGUF decode bandwidth, W4A16, int8/fp8 GEMMs beside f16 and torch",
                (python, bench + "quantized.py"), 120, 90),
        Section("launch", "launch overhead", (python, bench + "launch_overhead.py"), 60, 60),
    ]  # fmt: skip
    return sections
