"""The IR dumps in docs/dialect_stack.md are what the compiler prints today."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dialect_stack_dumps_are_current():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "regenerate_dumps.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
