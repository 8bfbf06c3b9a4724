"""Run one fuzzer program on the simulator and compare it with the reference evaluator."""

from __future__ import annotations

import importlib.util
import itertools
import tempfile
from pathlib import Path

import numpy as np

import kaio

from .programs import ROWS, Evaluator, Program, canonical, source, to_bits

HEADER = "import kaio\nfrom kaio.prelude import *\n\n"
_folder = Path(tempfile.mkdtemp(prefix="kaio-fuzz-"))
_counter = itertools.count()


def load_kernel(text: str) -> kaio.GpuKernel:
    """Decorate kernel source: the frontend reads it back from a real file."""
    name = f"kaio_fuzz_{next(_counter)}"
    path = _folder / f"{name}.py"
    path.write_text(HEADER + text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fuzz  # type: ignore[no-any-return]


def run_program(p: Program, arrays: dict[str, np.ndarray], device: kaio.Device) -> list[np.ndarray]:
    kernel = load_kernel(source(p))
    inputs = [device.alloc_from(arrays[t.name]) for t in p.inputs]
    outputs = [device.zeros(ROWS, t.np_dtype) for _, t in p.results]
    kernel.launch(device, *inputs, *outputs, ROWS, grid=1)
    return [o.to_host() for o in outputs]


def expected(p: Program, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    ev = Evaluator(p, arrays, ROWS)
    rows = [ev.row(i) for i in range(ROWS)]
    return [to_bits([r[k] for r in rows], t) for k, (_, t) in enumerate(p.results)]


def mismatches(p: Program, arrays: dict[str, np.ndarray], device: kaio.Device) -> str | None:
    """None when the simulator agrees with the reference bit for bit (NaNs as one), else a report
    naming the kernel source, the first differing rows and their inputs."""
    got = run_program(p, arrays, device)
    want = expected(p, arrays)
    for k, ((name, t), g, w) in enumerate(zip(p.results, got, want)):
        g_bits = canonical(g) if t.is_float else g
        bad = np.flatnonzero(g_bits != w)
        if bad.size:
            lines = []
            for r in bad[:4]:
                inputs = [(t2.name, arrays[t2.name][r].item()) for t2 in p.inputs]
                seen = f"{g[r]!r} (bits {int(g_bits[r]):#x}), reference bits {int(w[r]):#x}" if t.is_float else f"{g[r]!r}, reference {w[r]!r}"
                lines.append(f"  row {r}: inputs {inputs}: simulator {seen}")
            detail = "\n".join(lines)
            return f"{name} ({t.name}) differs in {bad.size} of {ROWS} rows\n{detail}\n--- kernel ---\n{source(p)}"
    return None
