"""The IR dumps in docs/dialect_stack.md and docs/tile_language.md are what the compiler prints
today."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", ["dialect_stack.md", "tile_language.md", "quantization.md"])
def test_doc_has_dumps(doc):
    text = (ROOT / "docs" / doc).read_text()
    assert text.count("<!-- dump: ") == text.count("<!-- end dump -->") >= 4


def test_doc_dumps_are_current():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "regenerate_dumps.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
