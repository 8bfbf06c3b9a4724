"""matmul_backward (dA = alpha dC B^T, dB = alpha A^T dC through kaio's matmul, dbias by
column sums) and the autograd of torch.ops.kaio.matmul on the simulator, against torch
autograd of ``alpha * a @ b + bias`` in float64."""

import numpy as np
import pytest

from kaio import KaioTypeError
from kaio.ops_library import matmul, matmul_backward

from .conftest import rel

torch = pytest.importorskip("torch")
pytest.importorskip("kaio.torch")  # registers torch.ops.kaio.* (a test may use them first)
F = torch.nn.functional


def reference(g, a, b, alpha, bias_shape=None, act=None):
    at = torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)
    bt = torch.tensor(np.asarray(b, dtype=np.float64), requires_grad=True)
    ct = torch.zeros(bias_shape or (b.shape[1],), dtype=torch.float64, requires_grad=True)
    out = alpha * at @ bt + ct
    (act(out) if act else out).backward(torch.tensor(np.asarray(g, dtype=np.float64)))
    return at.grad.numpy(), bt.grad.numpy(), ct.grad.numpy()


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-5), (np.float16, 3e-3)])
def test_gradients_match_torch_autograd(rng, poison, dtype, tol):
    m, k, n = 33, 20, 45
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    g = rng.standard_normal((m, n)).astype(np.float32)
    da, db, dbias = matmul_backward(g, a, b, alpha=0.5, bias=True)
    want = reference(g, a, b, 0.5)
    assert da.dtype == db.dtype == dbias.dtype == dtype
    assert rel(da, want[0]) <= tol and rel(db, want[1]) <= tol and rel(dbias, want[2]) <= tol
    assert matmul_backward(g, a, b)[2] is None  # no bias, no bias gradient


def test_torch_tensors_that_require_grad_get_their_gradients(rng):
    a = torch.tensor(rng.standard_normal((17, 24)), dtype=torch.float32, requires_grad=True)
    b = torch.tensor(rng.standard_normal((24, 9)), dtype=torch.float32, requires_grad=True)
    bias = torch.tensor(rng.standard_normal(9), dtype=torch.float32, requires_grad=True)
    g = rng.standard_normal((17, 9))
    matmul(a, b, bias=bias, alpha=2.0).backward(torch.tensor(g, dtype=torch.float32))
    want = reference(g, a.detach().numpy(), b.detach().numpy(), 2.0)
    for got, w in zip((a.grad, b.grad, bias.grad), want):
        assert got is not None
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation, act", [("relu", F.relu), ("silu", F.silu), ("gelu", lambda x: F.gelu(x, approximate="tanh"))])
def test_fused_activation_gradients(rng, activation, act):
    a = torch.tensor(rng.standard_normal((8, 16)), dtype=torch.float32, requires_grad=True)
    b = torch.tensor(rng.standard_normal((16, 8)), dtype=torch.float32, requires_grad=True)
    g = rng.standard_normal((8, 8))
    matmul(a, b, activation=activation).backward(torch.tensor(g, dtype=torch.float32))
    want = reference(g, a.detach().numpy(), b.detach().numpy(), 1.0, act=act)
    np.testing.assert_allclose(a.grad.numpy(), want[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b.grad.numpy(), want[1], rtol=1e-4, atol=1e-4)


def test_bf16_gradients_against_an_f32_reference(rng):
    a = torch.tensor(rng.standard_normal((32, 16)), dtype=torch.bfloat16, requires_grad=True)
    b = torch.tensor(rng.standard_normal((16, 24)), dtype=torch.bfloat16, requires_grad=True)
    matmul(a, b).sum().backward()
    want = reference(np.ones((32, 24)), a.detach().float().numpy(), b.detach().float().numpy(), 1.0)
    assert a.grad.dtype == torch.bfloat16
    assert rel(a.grad, want[0]) <= 1e-2 and rel(b.grad, want[1]) <= 1e-2


def test_out_with_tensors_that_require_grad_is_refused():
    a = torch.ones((4, 4), requires_grad=True)
    with pytest.raises(KaioTypeError, match="out="):
        matmul(a, torch.ones((4, 4)), out=torch.empty((4, 4)))


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (((4, 5), (4, 5), (3, 5)), {}, r"\(m, k\) and \(k, n\)"),
        (((4, 5), (4, 5), (5, 6)), {}, "grad_out"),
        (((4, 6), (4, 5), (5, 6)), {"alpha": "2"}, "alpha"),
        (((4, 5), (4, 5), (5, 5)), {"bias": "x"}, "bias"),
    ],
)
def test_bad_inputs_are_kaio_errors(args, kwargs, message):
    g, a, b = (np.zeros(s, np.float32) for s in args)
    with pytest.raises(KaioTypeError, match=message):
        matmul_backward(g, a, b, **kwargs)


def test_opcheck(rng):
    a = torch.tensor(rng.standard_normal((8, 16)), dtype=torch.float32, requires_grad=True)
    b = torch.tensor(rng.standard_normal((16, 8)), dtype=torch.float32, requires_grad=True)
    bias = torch.tensor(rng.standard_normal(8), dtype=torch.float32, requires_grad=True)
    torch.library.opcheck(torch.ops.kaio.matmul.default, (a, b, 1.0, 0.0, None, bias, None))
    g = torch.ones((8, 8))
    torch.library.opcheck(torch.ops.kaio.matmul_backward.default, (g, a.detach(), b.detach(), 1.0, torch.float32))
