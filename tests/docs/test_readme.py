"""The README's kernel examples run as written (on the simulator here)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("section", "expected"),
    [("A kernel", "["), ("A tile kernel", "True"), ("Quantized ops", "True")],  # y.to_host()[:4]; the rows sum to 1; int8 ~ f16
)
def test_readme_kernel_example_runs(tmp_path, section, expected):
    readme = (ROOT / "README.md").read_text()
    example = re.search(rf"## {section}\n.*?```python\n(.*?)```", readme, re.S).group(1)  # its first code block
    script = tmp_path / "readme_example.py"
    script.write_text(example)
    env = {**os.environ, "KAIO_DEVICE": "sim"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(expected)
