"""The examples run unchanged on the default device (here: the simulator)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KAIO_DEVICE"}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_quickstart() -> None:
    result = run("quickstart.py")
    assert result.returncode == 0, result.stderr
    assert "saxpy of 10000 elements on" in result.stdout and "matches numpy" in result.stdout


def test_run_kernels_prints_a_table_of_passing_kernels() -> None:
    result = run("run_kernels.py", "700")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name in (
        "vector_add",
        "saxpy",
        "silu_gate",
        "warp_sum",
        "block_sum",
        "matmul",
        "histogram",
        "half_math",
    ):
        row = next(line for line in lines if line.startswith(name))
        assert row.split()[1] == "ok", row
    assert lines[-1] == "all kernels match numpy"
