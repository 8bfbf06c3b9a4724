"""The README's kernel example runs as written (on the simulator here)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_kernel_example_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"## A kernel\n\n```python\n(.*?)```", readme, re.S).group(1)
    script = tmp_path / "readme_example.py"
    script.write_text(example)
    env = {**os.environ, "KAIO_DEVICE": "sim"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("[")  # y.to_host()[:4]
