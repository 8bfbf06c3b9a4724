"""cross_entropy's gradient (return_grad=True, computed in the forward's row sweep),
cross_entropy_backward and the autograd of torch.ops.kaio.cross_entropy on the simulator,
against torch autograd of F.cross_entropy(reduction="none") in float64."""

import numpy as np
import pytest

from kaio import KaioTypeError
from kaio.ops_library import cross_entropy, cross_entropy_backward

from .conftest import DTYPES, TOL, rel

torch = pytest.importorskip("torch")
pytest.importorskip("kaio.torch")  # registers torch.ops.kaio.* (a test may use them first)
F = torch.nn.functional


def case(rng, rows, cols, dtype=np.float32):
    logits = (2 * rng.standard_normal((rows, cols))).astype(dtype)
    targets = rng.integers(0, cols, rows)
    targets[1] = -100  # an ignored row
    return logits, targets


def reference(logits, targets, grad_loss):
    xt = torch.tensor(np.asarray(logits, dtype=np.float64), requires_grad=True)
    loss = F.cross_entropy(xt, torch.tensor(targets), reduction="none", ignore_index=-100)
    loss.backward(torch.tensor(np.asarray(grad_loss, dtype=np.float64)))
    return loss.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cols", [37, 5000])  # several rows per program; a row swept in blocks
def test_gradient_from_the_forward_sweep(rng, poison, dtype, cols):
    logits, targets = case(rng, 3, cols, DTYPES[dtype])
    loss, dlogits = cross_entropy(logits, targets, return_grad=True)
    want_loss, want = reference(logits, targets, np.ones(3))
    assert dlogits.dtype == logits.dtype and dlogits.shape == logits.shape
    assert rel(loss, want_loss) <= 1e-5
    assert rel(dlogits, want) <= 2 * TOL[dtype]
    assert not np.asarray(dlogits, dtype=np.float64)[1].any()  # the ignored row


@pytest.mark.parametrize("cols", [37, 5000])
def test_standalone_backward_scales_rows_by_grad_loss(rng, poison, cols):
    logits, targets = case(rng, 3, cols)
    grad_loss = rng.standard_normal(3).astype(np.float32)
    got = cross_entropy_backward(logits, targets, grad_loss)
    assert rel(got, reference(logits, targets, grad_loss)[1]) <= 1e-5
    assert not got[1].any()


@pytest.mark.parametrize("fused", [True, False])
def test_torch_logits_that_require_grad_get_their_gradient(rng, fused):
    logits, targets = case(rng, 4, 24)
    x = torch.tensor(logits, requires_grad=True)
    t = torch.tensor(targets)
    # the public function takes the fused path; the plain custom op reads the logits again
    loss = cross_entropy(x, t) if fused else torch.ops.kaio.cross_entropy(x, t, -100)
    grad_loss = rng.standard_normal(4)
    loss.backward(torch.tensor(grad_loss, dtype=torch.float32))
    np.testing.assert_allclose(x.grad.numpy(), reference(logits, targets, grad_loss)[1], rtol=1e-4, atol=1e-6)


def test_return_grad_with_torch_tensors_gives_a_gradient_that_is_not_differentiated(rng):
    logits, targets = case(rng, 3, 16)
    x = torch.tensor(logits, requires_grad=True)
    loss, dlogits = cross_entropy(x, torch.tensor(targets), return_grad=True)
    assert loss.requires_grad and not dlogits.requires_grad
    np.testing.assert_allclose(dlogits.numpy(), reference(logits, targets, np.ones(3))[1], rtol=1e-4, atol=1e-6)


def test_bf16_gradient_against_an_f32_reference(rng):
    logits, targets = case(rng, 4, 64)
    x = torch.tensor(logits).to(torch.bfloat16).requires_grad_(True)
    cross_entropy(x, torch.tensor(targets)).mean().backward()
    assert x.grad.dtype == torch.bfloat16
    assert rel(x.grad, reference(x.detach().float().numpy(), targets, np.full(4, 0.25))[1]) <= 1e-2


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x, t: cross_entropy_backward(x, t, np.ones(3, np.float64)), "grad_loss"),
        (lambda x, t: cross_entropy_backward(x, t, np.ones(2, np.float32)), "grad_loss"),
        (lambda x, t: cross_entropy_backward(x, t[:2], np.ones(3, np.float32)), "targets"),
        (lambda x, t: cross_entropy_backward(x, t, np.ones(3, np.float32), ignore_index=1.5), "ignore_index"),
        (lambda x, t: cross_entropy(x, t, return_grad=1), "return_grad"),
    ],
)
def test_bad_inputs_are_kaio_errors(rng, call, message):
    with pytest.raises(KaioTypeError, match=message):
        call(*case(rng, 3, 8))


def test_opcheck(rng):
    logits, targets = case(rng, 3, 16)
    x = torch.tensor(logits, requires_grad=True)
    t = torch.tensor(targets)
    torch.library.opcheck(torch.ops.kaio.cross_entropy.default, (x, t, -100))
    torch.library.opcheck(torch.ops.kaio.cross_entropy_with_grad.default, (x, t, -100))
    grad_loss = torch.ones(3)
    torch.library.opcheck(torch.ops.kaio.cross_entropy_backward.default, (x.detach(), t, grad_loss, -100))
