"""silu_and_mul_backward / gelu_and_mul_backward on the simulator against torch autograd of
torch's own math (float64), and gradients through the public functions with torch tensors."""

import numpy as np
import pytest

from kaio import KaioTypeError
from kaio.ops_library import gelu_and_mul, gelu_and_mul_backward, silu_and_mul, silu_and_mul_backward

from .conftest import DTYPES, TOL, rel

torch = pytest.importorskip("torch")
pytest.importorskip("kaio.torch")  # registers torch.ops.kaio.* (a test may use them first)
F = torch.nn.functional

ACTS = {
    "silu": (silu_and_mul, lambda dy, x: silu_and_mul_backward(dy, x), lambda a: F.silu(a)),
    "gelu": (gelu_and_mul, lambda dy, x: gelu_and_mul_backward(dy, x), lambda a: F.gelu(a)),
    "gelu_tanh": (
        lambda x: gelu_and_mul(x, approximate="tanh"),
        lambda dy, x: gelu_and_mul_backward(dy, x, approximate="tanh"),
        lambda a: F.gelu(a, approximate="tanh"),
    ),
}


def reference(dy, x, act):
    """d/dx of sum(dy * act(x[..., :d]) * x[..., d:]) by torch autograd, in float64."""
    xt = torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    a, g = xt.chunk(2, dim=-1)
    (act(a) * g).backward(torch.tensor(np.asarray(dy, dtype=np.float64)))
    return xt.grad.numpy()


@pytest.mark.parametrize("name", list(ACTS))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("d", [7, 64])
def test_gradient_matches_torch_autograd(rng, poison, name, dtype, d):
    x = (2 * rng.standard_normal((3, 2 * d))).astype(DTYPES[dtype])
    dy = rng.standard_normal((3, d)).astype(DTYPES[dtype])
    got = ACTS[name][1](dy, x)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert rel(got, reference(dy, x, ACTS[name][2])) <= 2 * TOL[dtype]


@pytest.mark.parametrize("name", list(ACTS))
def test_torch_tensors_that_require_grad_get_their_gradient(rng, name):
    forward, _, act = ACTS[name]
    x = torch.tensor(rng.standard_normal((2, 3, 32)), dtype=torch.float32, requires_grad=True)
    dy = torch.tensor(rng.standard_normal((2, 3, 16)), dtype=torch.float32)
    y = forward(x)
    assert y.requires_grad
    y.backward(dy)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), reference(dy.numpy(), x.detach().numpy(), act), rtol=1e-4, atol=1e-5)


def test_half_precision_gradients_against_an_f32_reference(rng):
    x32 = torch.tensor(rng.standard_normal((4, 48)), dtype=torch.float32)
    x = x32.to(torch.bfloat16).requires_grad_(True)
    silu_and_mul(x).sum().backward()
    want = reference(np.ones((4, 24)), x.detach().float().numpy(), F.silu)
    assert x.grad.dtype == torch.bfloat16
    assert rel(x.grad, want) <= 1e-2


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: silu_and_mul_backward(np.zeros((2, 4), np.float32), np.zeros((2, 7), np.float32)), "even"),
        (lambda: silu_and_mul_backward(np.zeros((2, 3), np.float32), np.zeros((2, 8), np.float32)), "grad_out"),
        (lambda: silu_and_mul_backward(np.zeros((2, 4), np.float16), np.zeros((2, 8), np.float32)), "grad_out"),
        (lambda: gelu_and_mul_backward(np.zeros((2, 4), np.float32), np.zeros((2, 8), np.float32), approximate="x"), "approximate"),
        (lambda: silu_and_mul_backward(np.zeros((2, 4), np.float64), np.zeros((2, 8), np.float64)), "x"),
    ],
)
def test_bad_inputs_are_kaio_errors(call, message):
    with pytest.raises(KaioTypeError, match=message):
        call()


def test_opcheck(rng):
    x = torch.tensor(rng.standard_normal((3, 16)), dtype=torch.float32, requires_grad=True)
    dy = torch.tensor(rng.standard_normal((3, 8)), dtype=torch.float32)
    for act in (0, 1, 2):
        torch.library.opcheck(torch.ops.kaio.gated_activation.default, (x, act))
        torch.library.opcheck(torch.ops.kaio.gated_activation_backward.default, (dy, x.detach(), act))
