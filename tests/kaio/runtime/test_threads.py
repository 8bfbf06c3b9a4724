"""Several Python threads allocating, launching, reading and freeing on one simulated device.

The simulator's memory is one numpy arena that an allocation may grow (and so replace) while
another thread's launch runs in it; the allocation table is a set of lists that a free edits in
place. Without the backend's lock these runs lose writes and raise "host write ... does not lie
inside one allocation".
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from acceptance_kernels import block_sum, vector_add

import kaio


def _hammer(device: kaio.Device, threads: int, iterations: int) -> tuple[list[str], int]:
    errors: list[str] = []
    wrong = [0]
    start = threading.Barrier(threads)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        start.wait()
        for i in range(iterations):
            try:
                n = int(rng.integers(1, 300))
                a = rng.standard_normal(n).astype(np.float32)
                b = rng.standard_normal(n).astype(np.float32)
                da, db, dc = device.alloc_from(a), device.alloc_from(b), device.zeros(n)
                vector_add.launch(device, da, db, dc, n, grid=(n + 255) // 256)
                if not np.array_equal(dc.to_host(), a + b):
                    wrong[0] += 1
                if i % 4 == 0:  # a block reduction too: shared memory and barriers
                    sums = device.zeros((n + 255) // 256)
                    block_sum.launch(device, da, sums, n, grid=(n + 255) // 256)
                    expected = [a[k : k + 256].sum(dtype=np.float64) for k in range(0, n, 256)]
                    if not np.allclose(sums.to_host(), expected, rtol=1e-4, atol=1e-4):
                        wrong[0] += 1
                da.free()
                db.free()
                if i % 2:
                    dc.free()  # else dropped: the garbage collector frees it, from any thread
            except Exception as exc:  # collected: an exception in a thread is lost otherwise
                errors.append(f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return errors, wrong[0]


def test_eight_threads_share_one_simulator() -> None:
    device = kaio.Device("sim")
    vector_add.launch(device, device.zeros(1), device.zeros(1), device.zeros(1), 1, grid=1)
    before = device.memory_info()[0]
    errors, wrong = _hammer(device, threads=8, iterations=100)
    assert errors == [] and wrong == 0
    gc.collect()
    assert device.memory_info()[0] == before  # every buffer came back, freed or collected


@pytest.mark.slow
def test_many_threads_share_one_simulator_at_benchmark_size() -> None:
    errors, wrong = _hammer(kaio.Device("sim"), threads=16, iterations=500)
    assert errors == [] and wrong == 0
