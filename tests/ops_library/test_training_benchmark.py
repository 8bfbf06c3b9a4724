"""benchmarks/training.py: without a GPU it says so and exits 0 (it claims no figure); with
--sim-smoke every table runs on the simulator, tiny."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "training.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KAIO_DEVICE": "sim"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False)


def test_without_a_gpu_the_benchmark_says_so_and_exits_0():
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("no GPU:") and "nothing was timed" in proc.stdout


@pytest.mark.slow  # ~12 s: every backward once on the simulator
def test_sim_smoke_runs_every_table():
    pytest.importorskip("torch")
    proc = run("--sim-smoke")
    assert proc.returncode == 0, proc.stderr
    for row in ("causal=True", "rms_norm", "layer_norm", "rope", "silu_and_mul", "gelu_and_mul", "softmax",
                "cross_entropy", "kaio", "torch"):  # fmt: skip
        assert row in proc.stdout, row
