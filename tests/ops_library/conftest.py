"""Shared by the memory-bound op tests: fresh random inputs, outputs poisoned before launch,
float64 references compared with a tolerance by storage type."""

from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.ops_library.operands import Operand, Operands

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 3e-2}  # norm-relative error vs float64
ROW_LENGTHS = [1, 7, 64, 1000, 4096 + 3]


def sweep() -> list[object]:
    """(dtype, row length) cases; f16 on the longest rows (the bf16 case runs the same code
    path) is under ``-m slow`` to keep the suite short."""
    return [
        pytest.param(d, n, marks=[pytest.mark.slow] if (d, n) == ("f16", ROW_LENGTHS[-1]) else [])
        for d in DTYPES
        for n in ROW_LENGTHS
    ]


@pytest.fixture
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output an op allocates starts as NaN (or -1 for integers): unwritten elements show."""
    original = Operands.output

    def poisoned(self: Operands, shape: tuple[int, ...], ktype: kaio.dtypes.ScalarType) -> Operand:
        out = original(self, shape, ktype)
        fill = np.nan if ktype.is_float else -1
        if self.torch:
            out.value.fill_(fill)
        else:
            out.value.copy_from(np.full(shape, fill, dtype=ktype.np_dtype))
        return out

    monkeypatch.setattr(Operands, "output", poisoned)


def rows_for(cols: int) -> int:
    """Few rows for long rows: simulator time is what the suite spends."""
    return 3 if cols <= 64 else 2 if cols <= 1000 else 1


def rel(got: object, want: np.ndarray) -> float:
    g = np.asarray(got, dtype=np.float64) if not hasattr(got, "double") else got.double().numpy()  # type: ignore[attr-defined]
    want = np.asarray(want, dtype=np.float64)
    assert g.shape == want.shape, (g.shape, want.shape)
    assert np.isfinite(g).all(), "unwritten (NaN) or non-finite elements"
    return float(np.linalg.norm(g - want) / max(np.linalg.norm(want), 1e-30))


def f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def global_bytes(dev: kaio.Device, run: object) -> tuple[int, int]:
    """(bytes loaded, bytes stored) from global memory by the one launch ``run()`` makes."""
    with dev.profiling():
        run()  # type: ignore[operator]
    report = dev.last_launch_report
    loaded = sum(r.bytes for r in report.global_memory if r.text.lstrip("@%p0123456789! ").startswith("ld."))
    stored = sum(r.bytes for r in report.global_memory if r.text.lstrip("@%p0123456789! ").startswith("st."))
    return loaded, stored
