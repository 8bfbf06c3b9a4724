"""kaio.ops_library.layer_norm / rms_norm on the simulator against float64 numpy."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import layer_norm, rms_norm

from .conftest import DTYPES, TOL, f64, global_bytes, rel, rows_for, sweep

torch = pytest.importorskip("torch")


def ln_ref(x, w=None, b=None, eps=1e-5):
    x = f64(x)
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1 if w is None else f64(w)) + (0 if b is None else f64(b))


def rms_ref(h, w=None, eps=1e-6):
    h = f64(h)
    return h / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * (1 if w is None else f64(w))


@pytest.mark.parametrize("dtype, cols", sweep())
def test_layer_norm_matches_float64(rng, poison, dtype, cols):
    t = DTYPES[dtype]
    x = (rng.standard_normal((rows_for(cols), cols)) + 4).astype(t)  # an offset mean: no cancellation
    w, b = rng.standard_normal(cols).astype(t), rng.standard_normal(cols).astype(t)
    got = layer_norm(x, w, b)
    assert got.dtype == x.dtype and rel(got, ln_ref(x, w, b)) <= TOL[dtype]


@pytest.mark.parametrize("dtype, cols", sweep())
def test_fused_add_rms_norm_matches_float64(rng, poison, dtype, cols):
    t = DTYPES[dtype]
    x, r = (rng.standard_normal((2, rows_for(cols), cols))).astype(t)
    w = rng.standard_normal(cols).astype(t)
    y, h = rms_norm(x, w, residual=r)
    hsum = (x + r).astype(t)  # the sum, rounded to the storage type as stored
    np.testing.assert_array_equal(h, hsum)
    assert y.dtype == x.dtype and rel(y, rms_ref(hsum, w)) <= TOL[dtype]


def test_without_weights_and_with_long_rows_in_blocks(rng, poison, monkeypatch):
    from kaio.ops_library import rows

    monkeypatch.setattr(rows, "ONE_PASS", 64)
    monkeypatch.setattr(rows, "MAX_BLOCK", 64)  # 300 columns: five blocks, the last partial
    x = (rng.standard_normal((3, 300)) * 3 + 100).astype(np.float32)
    assert rel(layer_norm(x, eps=1e-3), ln_ref(x, eps=1e-3)) <= 1e-4
    assert rel(rms_norm(x), rms_ref(x)) <= 1e-5
    r = rng.standard_normal((3, 300)).astype(np.float32)
    y, h = rms_norm(x, residual=r, eps=0.5)
    assert rel(y, rms_ref(x + r, eps=0.5)) <= 1e-5 and rel(h, f64(x) + r) <= 1e-7


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_misaligned_torch_views(poison, dtype):
    def offset(*shape):
        return torch.randn(int(np.prod(shape)) + 1).to(dtype)[1:].view(*shape)

    x, r, w, b = offset(2, 2, 40), offset(2, 2, 40), offset(40), offset(40)
    assert x.data_ptr() % 16 and w.data_ptr() % 16
    tol = TOL["bf16" if dtype == torch.bfloat16 else "f32"]
    got = layer_norm(x, w, b)
    assert isinstance(got, torch.Tensor) and rel(got, ln_ref(x.float().numpy(), w.float().numpy(), b.float().numpy())) <= tol
    y, h = rms_norm(x, w, residual=r)
    assert isinstance(h, torch.Tensor) and torch.equal(h, x + r)
    assert rel(y, rms_ref((x + r).float().numpy(), w.float().numpy())) <= tol


def test_buffers_in_buffers_out(rng):
    dev = kaio.Device("sim")
    x = rng.standard_normal((4, 24)).astype(np.float16)
    got = rms_norm(dev.alloc_from(x), dev.alloc_from(np.ones(24, np.float16)))
    assert isinstance(got, kaio.Buffer) and rel(got.to_host(), rms_ref(x)) <= TOL["f16"]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: layer_norm(x, np.ones(7, np.float32)), r"`weight` must have shape \(8,\)"),
        (lambda x: layer_norm(x, None, np.ones((1, 8), np.float32)), r"`bias` must have shape \(8,\)"),
        (lambda x: layer_norm(x, np.ones(8, np.float16)), "`weight` is f16 but `x` is f32"),
        (lambda x: layer_norm(x, eps=0.0), "`eps` must be a positive"),
        (lambda x: rms_norm(x, eps=-1e-6), "`eps` must be a positive"),
        (lambda x: rms_norm(x, residual=np.ones((4, 8), np.float32)), r"`residual` must have shape \(3, 8\)"),
        (lambda x: rms_norm(x, residual=x.astype(np.float16)), "`residual` is f16 but `x` is f32"),
        (lambda x: rms_norm(x.astype(np.int32)), "`x` must be f16, bf16 or f32"),
    ],
)
def test_bad_inputs_are_named_before_launch(call, message):
    with pytest.raises(KaioTypeError, match=message):
        call(np.ones((3, 8), np.float32))


@pytest.mark.parametrize("dtype, cols", [("f16", 32768), ("f32", 16384 - 64)])
def test_rows_up_to_the_one_pass_limit_are_read_once(rng, poison, dtype, cols):
    from kaio.ops_library import rows

    assert rows.MAX_BLOCK < cols
    t = DTYPES[dtype]
    dev = kaio.Device("sim")
    x, r = (rng.standard_normal((2, cols)).astype(t) for _ in range(2))
    w = rng.standard_normal(cols).astype(t)
    xb, rb, wb = dev.alloc_from(x), dev.alloc_from(r), dev.alloc_from(w)
    out = {}
    loaded, stored = global_bytes(dev, lambda: out.update(yh=rms_norm(xb, wb, residual=rb, device=dev)))
    # x and residual once, the weight once per row; y and the sum written once
    assert (loaded, stored) == (2 * x.nbytes + 2 * w.nbytes, 2 * x.nbytes)
    y, h = (v.to_host() for v in out["yh"])
    hsum = (x.astype(np.float32) + r.astype(np.float32)).astype(t)
    np.testing.assert_array_equal(h, hsum)
    assert rel(y, rms_ref(hsum, w)) <= TOL[dtype]
    if cols <= rows.ONE_PASS:
        b = rng.standard_normal(cols).astype(t)
        loaded, stored = global_bytes(dev, lambda: out.update(y=layer_norm(xb, wb, dev.alloc_from(b), device=dev)))
        assert (loaded, stored) == (x.nbytes + 4 * w.nbytes, x.nbytes)
        assert rel(out["y"].to_host(), ln_ref(x, w, b)) <= TOL[dtype]
