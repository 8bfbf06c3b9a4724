"""The host side of a matmul call: the kernel a call runs is worked out once per set of facts
(dtypes, alignments, shape, config, epilogue terms) and remembered, so a loop of calls does not
rebuild and check candidate configs every time (tens of microseconds a call, on a GPU where the
kernel itself takes ten)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import kaio
from kaio.ops_library import matmul

matmul_module = importlib.import_module("kaio.ops_library.matmul")  # (the package's name is the op)


def test_the_default_config_is_chosen_once_per_set_of_facts(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    dev = kaio.Device("sim")
    chosen: list[tuple[int, ...]] = []
    real = matmul_module.default_config

    def counting(*args: object, **kwargs: object) -> object:
        chosen.append(args[1])  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    matmul_module._specialization.cache_clear()
    monkeypatch.setattr(matmul_module, "default_config", counting)
    a = dev.alloc_from(rng.standard_normal((24, 40)).astype(np.float16))
    b = dev.alloc_from(rng.standard_normal((40, 16)).astype(np.float16))
    want = a.to_host().astype(np.float64) @ b.to_host().astype(np.float64)
    for _ in range(3):
        out = dev.alloc_from(np.full((24, 16), np.nan, np.float32))
        matmul(a, b, out)
        np.testing.assert_allclose(out.to_host(), want, rtol=1e-2, atol=1e-2)
    assert len(chosen) == 1, "the same facts: chosen once"
    matmul(a, b, dev.empty((24, 16), np.float32), alpha=2.0)  # another epilogue term: its own kernel
    assert len(chosen) == 2
    wide = dev.alloc_from(rng.standard_normal((40, 24)).astype(np.float16))
    matmul(a, wide, dev.empty((24, 24), np.float32))  # another shape
    assert len(chosen) == 3


def test_what_a_call_remembers_depends_on_its_facts_alone() -> None:
    from kaio.ops_library.matmul_config import MatmulConfig

    cached = matmul_module._specialization
    dev = kaio.Device("sim", arch="sm_80")
    f16, f32 = kaio.dtypes.f16, kaio.dtypes.f32
    skinny = cached(dev, f16, f32, None, None, (8, 8, 2), (16, 16, 16), 16, 4096, 8192, None, (False, False))
    square = cached(dev, f16, f32, None, None, (8, 8, 2), (16, 16, 16), 4096, 4096, 4096, None, (False, False))
    assert skinny.config.split_k > 1 and square.config.split_k == 1
    mine = MatmulConfig((32, 64, 64), (2, 2), 3)
    assert cached(dev, f16, f32, None, "relu", (8, 8, 2), (16, 16, 16), 64, 64, 64, mine, (True, False)).config is mine
