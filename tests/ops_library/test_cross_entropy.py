"""kaio.ops_library.cross_entropy on the simulator against float64 numpy."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import cross_entropy

from .conftest import DTYPES, f64, rel, rows_for, sweep

torch = pytest.importorskip("torch")


def reference(x, targets, ignore_index=-100):
    x = f64(x)
    m = x.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]
    keep = targets != ignore_index
    picked = np.take_along_axis(x, np.where(keep, targets, 0)[..., None], -1)[..., 0]
    return np.where(keep, lse - picked, 0.0)


@pytest.mark.parametrize("dtype, cols", sweep())
def test_cross_entropy_matches_float64(rng, poison, dtype, cols):
    rows = rows_for(cols) + (cols <= 1000)
    x = (3 * rng.standard_normal((rows, cols))).astype(DTYPES[dtype])
    targets = rng.integers(0, cols, rows).astype(np.int64)
    if rows > 1:
        targets[rng.integers(rows)] = -100
    got = cross_entropy(x, targets)
    assert got.dtype == np.float32 and got.shape == (rows,)
    assert rel(got, reference(x, targets)) <= 1e-5  # f32 statistics whatever the storage


def test_long_rows_in_blocks_i32_targets_and_another_ignore_index(rng, poison, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("kaio.ops_library.cross_entropy"), "COLUMNS", 64)
    x = (10 * rng.standard_normal((2, 3, 300))).astype(np.float32)
    targets = rng.integers(0, 300, (2, 3)).astype(np.int32)
    targets[1, 2] = 7
    got = cross_entropy(x, targets, ignore_index=7)
    assert got.shape == (2, 3) and got[1, 2] == 0.0
    assert rel(got, reference(x, targets, 7)) <= 1e-5


@pytest.mark.parametrize("block", [None, 64])
def test_a_tensor_too_large_for_the_target_gather_finds_targets_in_the_sweep(rng, poison, monkeypatch, block):
    # rows * cols >= 2**32 cannot be allocated here: lower the limit, one tile per row and blocks
    import importlib

    from kaio.ops_library import rows

    module = importlib.import_module("kaio.ops_library.cross_entropy")  # the package's name is the op

    monkeypatch.setattr(module, "GATHER_LIMIT", 0)
    if block:
        monkeypatch.setattr(rows, "MAX_BLOCK", block)
    x = (5 * rng.standard_normal((5, 300))).astype(np.float32)
    targets = rng.integers(0, 300, 5).astype(np.int64)
    targets[2] = -100
    loss, dx = cross_entropy(x, targets, return_grad=True)
    assert rel(loss, reference(x, targets)) <= 1e-5
    p = np.exp(f64(x) - f64(x).max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p[np.arange(5), np.where(targets >= 0, targets, 0)] -= 1.0
    p[2] = 0.0
    assert rel(dx, p) <= 1e-5


def test_misaligned_torch_logits(poison):
    x = torch.randn(4 * 40 + 1).to(torch.float16)[1:].view(4, 40)
    targets = torch.tensor([3, -100, 39, 0])
    assert x.data_ptr() % 16
    got = cross_entropy(x, targets)
    want = torch.nn.functional.cross_entropy(x.double(), targets, reduction="none")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert rel(got, want.numpy()) <= 1e-5


def test_buffers_in_buffers_out(rng):
    dev = kaio.Device("sim")
    x = rng.standard_normal((3, 16)).astype(np.float32)
    targets = np.array([1, 2, 3], np.int32)
    got = cross_entropy(dev.alloc_from(x), dev.alloc_from(targets))
    assert isinstance(got, kaio.Buffer) and rel(got.to_host(), reference(x, targets)) <= 1e-5


@pytest.mark.parametrize(
    "targets, kw, message",
    [
        (np.array([0, 8, 1]), {}, r"`targets`\[1\] = 8 is outside \[0, 8\)"),
        (np.array([0, -1, 1]), {}, r"`targets`\[1\] = -1 is outside"),
        (np.array([0, -100, 1]), {"ignore_index": -1}, r"`targets`\[1\] = -100 is outside"),
        (np.array([0, 1]), {}, r"`targets` must have shape \(3,\)"),
        (np.array([0, 1, 2], np.float32), {}, "`targets` must be i32 or i64"),
        (np.array([0, 1, 2]), {"ignore_index": 2**40}, "`ignore_index` must be a 32-bit integer"),
    ],
)
def test_bad_inputs_are_named_before_launch(targets, kw, message):
    with pytest.raises(KaioTypeError, match=message):
        cross_entropy(np.zeros((3, 8), np.float32), targets, **kw)


def test_out_of_range_torch_targets_are_refused():
    with pytest.raises(KaioTypeError, match=r"`targets`\[2\] = 5 is outside \[0, 5\)"):
        cross_entropy(torch.zeros(3, 5), torch.tensor([0, 1, 5]))
