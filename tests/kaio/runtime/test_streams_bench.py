"""Streams, events and bench on the simulator (synchronous: wall-clock timing)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from acceptance_kernels import vector_add

import kaio
from kaio import KaioError


def test_events_time_the_host_on_the_simulator(sim: kaio.Device) -> None:
    start, end = sim.event(), kaio.Event(sim)
    stream = sim.stream()
    start.record(stream)
    time.sleep(0.01)
    end.record()
    assert end.query() and 9.0 <= start.elapsed_ms(end) < 1000.0
    end.synchronize()
    assert stream.record().query()
    assert "not recorded" in repr(sim.event())


def test_event_misuse(sim: kaio.Device) -> None:
    with pytest.raises(KaioError, match="never recorded"):
        sim.event().synchronize()
    untimed = sim.event(timing=False).record()
    with pytest.raises(KaioError, match="timing=True"):
        untimed.elapsed_ms(sim.event().record())


def test_streams_are_per_device(sim: kaio.Device) -> None:
    stream = kaio.Stream(sim)
    assert stream.device is sim and 'Device("sim")' in repr(stream)
    stream.synchronize()
    stream.close()
    stream.close()


def test_bench_measures_wall_clock_on_the_simulator(sim: kaio.Device) -> None:
    calls: list[None] = []

    def work() -> None:
        calls.append(None)
        time.sleep(0.002)

    result = kaio.bench(work, warmup=5, rep=20, device=sim)
    assert result.method == "wall clock" and result.device == 'Device("sim")'
    assert 2 <= result.reps <= 10 and len(calls) >= result.reps + 4
    assert 2.0 <= result.min <= result.p20 <= result.median <= result.p80 <= result.max
    assert "median" in str(result) and "wall clock" in str(result)


def test_bench_a_kernel(sim: kaio.Device) -> None:
    n = 512
    a = sim.alloc_from(np.ones(n, np.float32))
    c = sim.zeros(n, np.float32)
    result = kaio.bench(lambda: vector_add[2](a, a, c, n), warmup=1, rep=5, max_reps=3)
    assert 1 <= result.reps <= 3 and result.median > 0
    np.testing.assert_array_equal(c.to_host(), np.full(n, 2.0, np.float32))
