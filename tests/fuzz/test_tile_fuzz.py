"""Differential fuzzing of tile kernels: random tile programs (``tile_programs``) run on
``Device("sim")`` and must give exactly what numpy gives for the same program: masked view loads
and stores with random (negative included) offsets and bounds, gathers, elementwise chains with
broadcasts, reductions on each axis, transposes, f32/f16 dots, loops carrying tiles and atomics.

Each program is drawn from its own seed, printed with the kernel source on a mismatch: replay it
with ``KAIO_TILE_FUZZ_SEED=<seed> KAIO_TILE_FUZZ_PROGRAMS=1`` and keep it as a regular test in
``test_tile_fuzz_regressions.py``. ``KAIO_TILE_FUZZ_PROGRAMS`` sets how many the slow test runs
(default 3000), ``KAIO_TILE_FUZZ_SEED`` the first seed (default: a fresh one each run).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import kaio

from .harness import load_kernel
from .tile_programs import SIZE, TileProgram, inputs, random_program

CI_PROGRAMS = 200
ARCHS = ("sm_80", "sm_90a")  # every other program on each
HEADER = "import kaio.tile as kt\n\n"


def first_seed() -> int:
    seed = os.environ.get("KAIO_TILE_FUZZ_SEED")
    return int(seed) if seed else int.from_bytes(os.urandom(4), "little")


def mismatch(seed: int) -> str | None:
    """None when the simulator gives numpy's result for program ``seed``, else a report."""
    rng = np.random.default_rng(seed)
    program = random_program(rng)
    xf, xi = inputs(rng)
    dev = kaio.Device("sim", arch=ARCHS[seed % len(ARCHS)])
    kernel = load_kernel(HEADER + program.source())
    of = dev.alloc_from(np.full(SIZE, np.nan, np.float32))
    oi = dev.alloc_from(np.full(SIZE, np.iinfo(np.int32).max, np.int32))
    hist = dev.zeros(64, np.int32)
    kernel[1](dev.alloc_from(xf), dev.alloc_from(xi), of, oi, hist, *(v for _, v in program.params))
    want = program.evaluate(xf, xi)
    for name, got, expected in zip(("of", "oi", "hist"), (of.to_host(), oi.to_host(), hist.to_host()), want, strict=True):
        same = (got == expected) | (np.isnan(got) & np.isnan(expected)) if got.dtype.kind == "f" else got == expected
        bad = np.flatnonzero(~same)
        if bad.size:
            shown = ", ".join(f"[{i}] {got[i]} (numpy {expected[i]})" for i in bad[:6])
            return _report(seed, program, dev.arch, f"`{name}` differs in {bad.size} elements: {shown}")
    return None


def _report(seed: int, program: TileProgram, arch: str, what: str) -> str:
    params = ", ".join(f"{n}={v}" for n, v in program.params)
    return f"tile program seed {seed} on {arch}: {what}\nparams: {params}\n--- kernel ---\n{program.source()}"


def _run(count: int) -> None:
    start, first = time.perf_counter(), first_seed()
    failures = []
    for seed in range(first, first + count):
        try:
            report = mismatch(seed)
        except Exception as error:  # noqa: BLE001 (a compile error or a simulator fault is a finding too)
            rng = np.random.default_rng(seed)
            report = _report(seed, random_program(rng), ARCHS[seed % len(ARCHS)], f"{type(error).__name__}: {error}")
        if report is not None:
            failures.append(report)
            if len(failures) >= 3:
                break
    print(f"\ntile fuzzer: {count} programs from seed {first} in {time.perf_counter() - start:.1f} s")
    assert not failures, "\n\n".join(failures)


def test_random_tile_programs_match_numpy() -> None:
    _run(CI_PROGRAMS)


@pytest.mark.slow
def test_many_random_tile_programs_match_numpy() -> None:
    _run(int(os.environ.get("KAIO_TILE_FUZZ_PROGRAMS", "3000")))
