"""Differential fuzzing: hypothesis draws small typed kernels (every integer and float type,
casts, if/else, loops with break/continue, early returns, guarded loads, the builtins whose
results are exact) and input rows; each runs in one launch on ``Device("sim")`` and must match
the reference evaluator of the documented semantics bit for bit (NaN payloads aside).

A failure shrinks to a small kernel, printed with the differing rows: turn it into a regular
test in ``test_fuzz_regressions.py``.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kaio

from .generate import input_rows, programs
from .harness import mismatches

CI_PROGRAMS = 300
RUN = {"programs": 0, "seconds": 0.0}


def _check(program: object, seed: int) -> None:
    start = time.perf_counter()
    report = mismatches(program, input_rows(program, seed), kaio.Device("sim"))  # type: ignore[arg-type]
    RUN["programs"] += 1
    RUN["seconds"] += time.perf_counter() - start
    assert report is None, report


_SETTINGS = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@settings(max_examples=CI_PROGRAMS, **_SETTINGS)  # type: ignore[arg-type]
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_programs_match_the_reference(program: object, seed: int) -> None:
    _check(program, seed)


@pytest.mark.slow
@settings(max_examples=3000, **_SETTINGS)  # type: ignore[arg-type]
@given(programs(), st.integers(0, 2**32 - 1))
def test_many_random_programs_match_the_reference(program: object, seed: int) -> None:
    _check(program, seed)


def teardown_module() -> None:
    print(f"\nfuzzer: {RUN['programs']} programs in {RUN['seconds']:.1f} s")
