"""The synchronisation-mutant campaign (``kaio.tools.sync_mutants``) over the tile fuzzer's
programs: each program's kernel with one barrier, wait or fence deleted at a time, run under
the race check, synccheck and an adversarial schedule, against numpy.

A fuzz program often computes tiles it never stores (``t3 = kt.dot(...)`` feeding only an
unused ``t6``): the dot's math goes as dead code, but its operands' stores to shared memory
and the barrier after them stay, and deleting that barrier changes nothing. Such survivors
are the fuzzer's dead code, not a leniency (as are the barriers of a tile whose store is masked
off whole, and the membar.cta scheduling fences: ``sync_mutant_cases.SCHEDULING_FENCES``), so
the tests ask that every program's mutants be killed except where that holds: CI checks a
program whose every synchronisation guards live data (all killed), and a dot whose result is
stored (every mutant killed) beside the same dot left unused (its staging barriers survive). ``-m slow`` prints the table for
``KAIO_TILE_FUZZ_PROGRAMS`` (default 40) fresh programs."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f32
from kaio.tools.sync_mutant_cases import SCHEDULING_FENCES
from kaio.tools.sync_mutants import campaign, survivors, table

from .harness import load_kernel
from .test_tile_fuzz import ARCHS, HEADER, first_seed
from .tile_programs import SIZE, inputs, random_program

ALL_KILLED = (39,)  # a program whose synchronisation guards only live data


def program_case(seed: int):  # type: ignore[no-untyped-def]
    """(arch, case) of tile program ``seed``: the case runs it and compares with numpy exactly."""
    rng = np.random.default_rng(seed)
    program = random_program(rng)
    xf, xi = inputs(rng)
    want = program.evaluate(xf, xi)
    kernel = load_kernel(HEADER + program.source())

    def run(dev: kaio.Device) -> None:
        of = dev.alloc_from(np.full(SIZE, np.nan, np.float32))
        oi = dev.alloc_from(np.full(SIZE, np.iinfo(np.int32).max, np.int32))
        hist = dev.zeros(64, np.int32)
        kernel[1](dev.alloc_from(xf), dev.alloc_from(xi), of, oi, hist, *(v for _, v in program.params))
        for got, expected in zip((of.to_host(), oi.to_host(), hist.to_host()), want, strict=True):
            same = (got == expected) | (np.isnan(got) & np.isnan(expected)) if got.dtype.kind == "f" else got == expected
            assert same.all(), f"{int((~same).sum())} elements differ from numpy"

    return ARCHS[seed % len(ARCHS)], run


def run_campaign(seeds: list[int]) -> list:  # type: ignore[type-arg]
    results = []
    for seed in seeds:
        arch, case = program_case(seed)
        results += campaign({f"tile program {seed} ({arch})": case}, kaio.Device("sim", arch=arch), seeds=(0,))
    return results


def test_a_program_whose_synchronisation_guards_live_data_has_every_mutant_killed():
    results = run_campaign(list(ALL_KILLED))
    assert all(not r.error and r.outcomes for r in results), table(results)
    assert not survivors(results), table(results)


@pytest.mark.slow
def test_fresh_programs_print_their_table():
    start = first_seed()
    results = run_campaign([start + i for i in range(int(os.environ.get("KAIO_TILE_FUZZ_PROGRAMS", "40")))])
    print(table(results, SCHEDULING_FENCES))
    assert all(not r.error for r in results), table(results)
    assert sum(o.verdict != "survived" for r in results for o in r.outcomes) > 0, table(results)


@kaio.tile_kernel(num_warps=2)
def stored_dot(a: Array[f32], b: Array[f32], c: MutArray[f32]):
    kt.store(c, (0, 0), kt.dot(kt.load(a, (0, 0), (16, 32), (16, 32)), kt.load(b, (0, 0), (32, 16), (32, 16)), kt.zeros((16, 16), f32)), (16, 16))


@kaio.tile_kernel(num_warps=2)
def unused_dot(a: Array[f32], b: Array[f32], c: MutArray[f32]):
    x = kt.load(a, (0, 0), (16, 32), (16, 32))
    unused = kt.dot(x, kt.load(b, (0, 0), (32, 16), (32, 16)), kt.zeros((16, 16), f32))  # noqa: F841 - the fuzzer's dead code
    kt.store(c, (0, 0), x, (16, 32))


def _dot_case(kernel, want):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
    expected = want(a.astype(np.float64), b.astype(np.float64))

    def run(dev: kaio.Device) -> None:
        c = dev.alloc_from(np.full(expected.shape, np.nan, np.float32))
        kernel[1](dev.alloc_from(a), dev.alloc_from(b), c)
        assert np.abs(c.to_host() - expected).max() < 1e-3

    return run


def test_a_stored_dot_has_every_mutant_killed_and_an_unused_one_leaves_its_staging_barrier():
    dev = kaio.Device("sim", arch="sm_80")
    stored, unused = campaign({"stored dot": _dot_case(stored_dot, lambda a, b: a @ b),
                               "unused dot": _dot_case(unused_dot, lambda a, b: a)}, dev, seeds=(0,))  # fmt: skip
    assert stored.outcomes and not survivors([stored]), table([stored])
    assert survivors([unused]) and all(o.site.text == "bar.sync 0;" for o in survivors([unused])), table([unused])
