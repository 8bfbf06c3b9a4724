"""docs/quantization.md's Python examples run as written, on the simulator.

The examples that load files find them in the working directory: a GGUF file written here with
the ``gguf`` package's writer (read back by its reader, as the example does), and GPTQ tensors
for ``safetensors.numpy.load_file`` (a real file when safetensors is installed, otherwise a
stand-in module that reads the same tensors from an npz file). The numpy reference of the GPTQ
layout runs on random tensors of its names. The one block that is an excerpt of a kernel's
source (it starts at ``for k0 in range``) is not a program and is skipped by name."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(
    r"```python\n(.*?)```", (ROOT / "docs" / "quantization.md").read_text(), re.DOTALL
)
EXCERPT = "for k0 in range(0, k, BK):"
RUNNABLE = [b for b in BLOCKS if not b.startswith(EXCERPT)]

# The GPTQ reference block uses these names (random GPTQ tensors: K = 256, N = 64, groups of 128).
GPTQ_NAMES = """
import numpy as np
rng = np.random.default_rng()
K, N, group_size = 256, 64, 128
qweight = rng.integers(-2**31, 2**31, (K // 8, N), dtype=np.int64).astype(np.int32)
qzeros = rng.integers(-2**31, 2**31, (K // group_size, N // 8), dtype=np.int64).astype(np.int32)
scales = (rng.random((K // group_size, N)) / 8).astype(np.float16)
"""

SAFETENSORS_STANDIN = '''
"""Stands in for safetensors.numpy: the tensors of an npz file."""
import numpy as np

def load_file(path):
    with np.load(path) as f:
        return {name: f[name] for name in f.files}
'''


def gptq_tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    k, n, group = 256, 64, 128
    p = "model.layers.0.self_attn.q_proj."
    return {
        p + "qweight": rng.integers(-(2**31), 2**31, (k // 8, n), dtype=np.int64).astype(np.int32),
        p + "scales": (rng.random((k // group, n)) / 8).astype(np.float16),
        p + "qzeros": np.full((k // group, n // 8), 0x77777777, np.int32),
        p + "g_idx": (np.arange(k) // group).astype(np.int32),
        p + "bias": rng.standard_normal(n).astype(np.float16),
    }


@pytest.fixture
def model_files(tmp_path: Path) -> Path:
    gguf = pytest.importorskip("gguf")
    weight = gguf.quants.quantize(
        np.random.randn(64, 256).astype(np.float32), gguf.GGMLQuantizationType.Q8_0
    )
    writer = gguf.GGUFWriter(tmp_path / "model.gguf", "llama")
    writer.add_tensor("blk.0.attn_q.weight", weight, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensors = gptq_tensors()
    try:
        from safetensors.numpy import save_file

        save_file(tensors, str(tmp_path / "model.safetensors"))
    except ImportError:
        with open(tmp_path / "model.safetensors", "wb") as f:
            np.savez(f, **tensors)
        (tmp_path / "safetensors").mkdir()
        (tmp_path / "safetensors" / "__init__.py").write_text("")
        (tmp_path / "safetensors" / "numpy.py").write_text(SAFETENSORS_STANDIN)
    return tmp_path


def test_every_block_but_the_kernel_excerpt_runs() -> None:
    assert len(BLOCKS) == len(RUNNABLE) + 1 and len(RUNNABLE) >= 6


@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_quantization_example_runs(model_files: Path, index: int) -> None:
    code = RUNNABLE[index]
    if "def nibbles" in code:  # the GPTQ reference: on random tensors of its names
        code = GPTQ_NAMES + code
    script = model_files / f"example_{index}.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "KAIO_DEVICE": "sim", "PYTHONPATH": str(model_files)}
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=model_files,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=240,
    )
    assert proc.returncode == 0, code + proc.stderr
