"""Every acceptance kernel runs on the simulator device and matches its numpy reference (the
cases live in examples/run_kernels.py: fresh random inputs, poisoned outputs)."""

from __future__ import annotations

import numpy as np
import pytest
from run_kernels import CASES, Case, check

import kaio


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_acceptance_kernel_matches_numpy_on_the_simulator(
    case: Case, sim: kaio.Device, rng: np.random.Generator
) -> None:
    n = int(rng.integers(300, 1500))  # rarely a multiple of the block: the bounds guards matter
    got, expected = case.run(sim, rng, n)
    ok, error = check(case, got, expected, n)
    assert ok, f"{case.name}: max abs error {error}\ngot {got}\nexpected {expected}"


def test_check_rejects_a_wrong_result(rng: np.random.Generator) -> None:
    """The comparison the acceptance tests rely on can fail: a poisoned element is caught."""
    case = CASES[0]
    expected = rng.standard_normal(10).astype(np.float32)
    got = expected.copy()
    got[3] = np.nan
    assert not check(case, got, expected, 10)[0]
    assert not check(case, got[:9], expected, 10)[0]
    assert check(case, expected.copy(), expected, 10)[0]
