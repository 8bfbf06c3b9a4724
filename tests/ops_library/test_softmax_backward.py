"""softmax_backward / log_softmax_backward on the simulator against torch autograd (float64),
one-tile rows and rows swept in blocks, and gradients through the public functions."""

import numpy as np
import pytest

from kaio import KaioTypeError
from kaio.ops_library import log_softmax, log_softmax_backward, softmax, softmax_backward
from kaio.ops_library import rows as rowops

from .conftest import DTYPES, TOL, rel

torch = pytest.importorskip("torch")
pytest.importorskip("kaio.torch")  # registers torch.ops.kaio.* (a test may use them first)

OPS = {"softmax": (softmax, softmax_backward, torch.softmax), "log_softmax": (log_softmax, log_softmax_backward, torch.log_softmax)}


def reference(dy, x, f):
    xt = torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    f(xt, -1).backward(torch.tensor(np.asarray(dy, dtype=np.float64)))
    return xt.grad.numpy()


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cols", [5, 300])
def test_gradient_matches_torch_autograd(rng, poison, name, dtype, cols):
    _, backward, f = OPS[name]
    x = rng.standard_normal((3, cols))
    y = f(torch.tensor(x), -1).numpy().astype(DTYPES[dtype])
    dy = rng.standard_normal((3, cols)).astype(DTYPES[dtype])
    got = backward(dy, y)
    assert got.dtype == y.dtype and got.shape == y.shape
    assert rel(got, reference(dy, x, f)) <= 4 * TOL[dtype]


@pytest.mark.parametrize("name", list(OPS))
def test_rows_swept_in_blocks(rng, poison, monkeypatch, name):
    monkeypatch.setattr(rowops, "ONE_PASS", 0)  # a 5000-long row loops over 4096-wide blocks
    _, backward, f = OPS[name]
    x = rng.standard_normal((2, 5000))
    dy = rng.standard_normal((2, 5000)).astype(np.float32)
    got = backward(dy, f(torch.tensor(x), -1).numpy().astype(np.float32))
    assert rel(got, reference(dy, x, f)) <= 1e-5


@pytest.mark.parametrize("name", list(OPS))
def test_torch_tensors_that_require_grad_get_their_gradient(rng, name):
    forward, _, f = OPS[name]
    x = torch.tensor(rng.standard_normal((2, 3, 20)), dtype=torch.float32, requires_grad=True)
    dy = torch.tensor(rng.standard_normal((2, 3, 20)), dtype=torch.float32)
    forward(x).backward(dy)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), reference(dy.numpy(), x.detach().numpy(), f), rtol=1e-4, atol=1e-5)


def test_half_precision_gradients_against_an_f32_reference(rng):
    x = torch.tensor(rng.standard_normal((4, 64)), dtype=torch.float16, requires_grad=True)
    dy = torch.tensor(rng.standard_normal((4, 64)), dtype=torch.float32)
    softmax(x).backward(dy.half())
    assert x.grad.dtype == torch.float16
    assert rel(x.grad, reference(dy.numpy(), x.detach().float().numpy(), torch.softmax)) <= 1e-2


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: softmax_backward(np.zeros((2, 4), np.float32), np.zeros((2, 5), np.float32)), "grad_y"),
        (lambda: softmax_backward(np.zeros((2, 4), np.float16), np.zeros((2, 4), np.float32)), "grad_y"),
        (lambda: log_softmax_backward(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.int32)), "y"),
    ],
)
def test_bad_inputs_are_kaio_errors(call, message):
    with pytest.raises(KaioTypeError, match=message):
        call()


def test_opcheck(rng):
    x = torch.tensor(rng.standard_normal((3, 16)), dtype=torch.float32, requires_grad=True)
    dy = torch.tensor(rng.standard_normal((3, 16)), dtype=torch.float32)
    for log in (False, True):
        torch.library.opcheck(torch.ops.kaio.softmax.default, (x, log))
        torch.library.opcheck(torch.ops.kaio.softmax_backward.default, (dy, torch.softmax(x.detach(), -1), log))
