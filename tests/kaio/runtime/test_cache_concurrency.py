"""Processes writing the caches at once lose nothing: four processes each storing 25 keys leave
all 100, in the autotune cache (one file per op, merged under a lock) and in the kernel cache
(one file per entry, replaced atomically). Before the lock, 4 writers lost about a third of
their autotune keys (each read the file, added its key and wrote back over the others')."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from kaio.ops_library import autotune as tuning

import kaio
from kaio import cache

WRITERS = 4
KEYS_EACH = 25

# Each writer imports kaio, says it is ready, and waits for the ``go`` file, so all four write
# during the same instant.
WAIT = """
import sys, time
from pathlib import Path
go, writer = Path(sys.argv[1]), int(sys.argv[2])
(go.parent / f"ready{writer}").touch()
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.001)
"""

AUTOTUNE_WRITER = (
    """
import dataclasses
from kaio.ops_library import autotune as tuning
"""
    + WAIT
    + """
@dataclasses.dataclass(frozen=True)
class Tile:
    size: int = 64

for i in range(25):
    tuning.tuned("concurrency", f"writer{writer}|key{i}", [Tile(32), Tile(64)], lambda c: float(c.size))
"""
)

KERNEL_WRITER = (
    """
from kaio import cache
"""
    + WAIT
    + """seed = cache.load(sys.argv[3])
assert seed is not None
for i in range(25):
    assert cache.store(f"{sys.argv[3][:40]}-writer{writer}-key{i}", seed)
"""
)


def run_writers(script: str, folder: Path, *extra: str) -> None:
    """Start the writers, release them together, and wait for all (each must succeed)."""
    go = folder / "go"
    root = Path(kaio.__file__).resolve().parent.parent  # the kaio these tests import
    env = {**os.environ, "KAIO_CACHE_DIR": str(cache.cache_dir())}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), str(go), str(w), *extra],
            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for w in range(WRITERS)
    ]  # fmt: skip
    deadline = time.monotonic() + 60
    while (
        not all((folder / f"ready{w}").exists() for w in range(WRITERS))
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    go.touch()
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out


def test_four_autotuning_processes_keep_every_key(kaio_cache: Path, tmp_path: Path) -> None:
    run_writers(AUTOTUNE_WRITER, tmp_path)
    stored = json.loads(tuning.path("concurrency").read_text())
    expected = {f"writer{w}|key{i}" for w in range(WRITERS) for i in range(KEYS_EACH)}
    assert set(stored) == expected, f"lost {len(expected - set(stored))} keys"
    assert all(entry["config"] == {"size": 32} for entry in stored.values())


KERNEL = """
@kaio.gpu_kernel(block_size=64)
def double(x: MutArray[f32]):
    x[thread_idx_x()] = x[thread_idx_x()] * 2.0
"""


def test_four_compiling_processes_keep_every_entry(
    kaio_cache: Path, tmp_path: Path, load_kernels: Callable[[str], ModuleType]
) -> None:
    seed = kaio.compile(load_kernels(KERNEL).double)
    run_writers(KERNEL_WRITER, tmp_path, seed.cache_key)
    keys = [
        f"{seed.cache_key[:40]}-writer{w}-key{i}" for w in range(WRITERS) for i in range(KEYS_EACH)
    ]
    assert all(cache.load(key) is not None for key in keys)
    names = [p.name for p in (kaio_cache / "kernels").iterdir()]
    assert len(names) == WRITERS * KEYS_EACH + 1, "a temporary file was left behind"
