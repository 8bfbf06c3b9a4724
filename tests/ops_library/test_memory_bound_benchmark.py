"""benchmarks/memory_bound.py without a GPU: says so and exits 0 (it claims no figure)."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "memory_bound.py"


def test_without_a_gpu_the_benchmark_says_so_and_exits_0():
    env = {**os.environ, "KAIO_DEVICE": "sim"}
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("no GPU:") and "nothing was timed" in proc.stdout
