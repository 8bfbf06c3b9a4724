"""kaio.ops_library.softmax / log_softmax on the simulator against float64 numpy."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import log_softmax, softmax

from .conftest import DTYPES, TOL, f64, global_bytes, rel, rows_for, sweep

torch = pytest.importorskip("torch")


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = f64(x)
    shifted = x - x.max(-1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(-1, keepdims=True))
    return np.exp(shifted - lse), shifted - lse


@pytest.mark.parametrize("dtype, cols", sweep())
def test_softmax_and_log_softmax_match_float64(rng, poison, dtype, cols):
    x = (2 * rng.standard_normal((rows_for(cols), cols))).astype(DTYPES[dtype])
    p, lp = reference(x)
    got = softmax(x)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert rel(got, p) <= TOL[dtype]
    assert rel(log_softmax(x), lp) <= TOL[dtype]


def test_long_rows_loop_over_column_blocks_with_large_and_minus_inf_values(rng, poison, monkeypatch):
    from kaio.ops_library import rows

    monkeypatch.setattr(rows, "ONE_PASS_LIGHT", 64)
    monkeypatch.setattr(rows, "MAX_BLOCK", 64)  # 300 columns: five blocks
    x = (30 * rng.standard_normal((3, 300))).astype(np.float32)
    x[1, :128] = -np.inf  # whole blocks of -inf before the first finite value
    p, lp = reference(x)
    assert rel(softmax(x), p) <= 1e-5
    got = log_softmax(x)
    assert np.array_equal(got[1, :128], lp[1, :128]) and rel(got[:, 128:], lp[:, 128:]) <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_misaligned_torch_views_and_leading_dims(poison, dtype):
    base = torch.randn(2 * 3 * 64 + 1).to(dtype)
    x = base[1:].view(2, 3, 64)  # one element past an aligned address
    assert x.data_ptr() % 16
    got = softmax(x)
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.shape == x.shape
    assert rel(got, reference(x.numpy())[0]) <= TOL["f16" if dtype == torch.float16 else "f32"]


def test_buffers_in_buffers_out(rng):
    dev = kaio.Device("sim")
    x = rng.standard_normal((4, 10)).astype(np.float32)
    got = log_softmax(dev.alloc_from(x))
    assert isinstance(got, kaio.Buffer) and rel(got.to_host(), reference(x)[1]) <= 1e-5


def test_bad_inputs_are_named():
    with pytest.raises(KaioTypeError, match="`x` must be f16, bf16 or f32"):
        softmax(np.zeros((2, 3), np.int32))
    with pytest.raises(KaioTypeError, match="`x` must have at least 1 dim"):
        softmax(np.zeros((), np.float32))


@pytest.mark.parametrize("dtype, cols", [("bf16", 32768), ("f32", 8192 + 64)])
def test_rows_up_to_the_one_pass_limit_are_read_once(rng, poison, dtype, cols):
    from kaio.ops_library import rows

    assert rows.MAX_BLOCK < cols <= rows.ONE_PASS_LIGHT
    dev = kaio.Device("sim")
    x = (2 * rng.standard_normal((2, cols))).astype(DTYPES[dtype])
    xb = dev.alloc_from(x)
    out = {}
    loaded, stored = global_bytes(dev, lambda: out.update(p=softmax(xb, device=dev)))
    size = x.nbytes
    assert (loaded, stored) == (size, size)  # one read of each row, one write
    assert rel(out["p"].to_host(), reference(x)[0]) <= TOL[dtype]
    assert rel(log_softmax(xb, device=dev).to_host(), reference(x)[1]) <= TOL[dtype]
