"""kaio.ops_library.linear_cross_entropy on the simulator against torch's F.linear + F.cross_entropy."""

import numpy as np
import pytest

from kaio import KaioTypeError, KaioValueError
from kaio.ops_library import linear_cross_entropy, linear_cross_entropy_backward

from .conftest import DTYPES, rel

torch = pytest.importorskip("torch")
pytest.importorskip("kaio.torch")  # registers torch.ops.kaio.* (a test may use them first)
F = torch.nn.functional


def problem(rng, tokens, hidden, vocab, leading=None):
    """f32 inputs, about unit logits, two ignored tokens, per-token loss weights."""
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    weight = (rng.standard_normal((vocab, hidden)) / np.sqrt(hidden)).astype(np.float32)
    bias = rng.standard_normal(vocab).astype(np.float32)
    targets = rng.integers(0, vocab, tokens)
    targets[rng.choice(tokens, 2, replace=False)] = -100
    grad_loss = rng.standard_normal(tokens).astype(np.float32)
    if leading is not None:
        x, targets, grad_loss = x.reshape(*leading, hidden), targets.reshape(leading), grad_loss.reshape(leading)
    return x, weight, bias, targets, grad_loss


def torch_reference(x, weight, bias, targets, grad_loss, grad_lse=None):
    """Losses, log-sum-exps and (dx, dweight, dbias) of sum(grad_loss * loss + grad_lse * lse), in f64."""
    xt, wt = (torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in (x, weight))
    bt = None if bias is None else torch.tensor(np.asarray(bias, np.float64), requires_grad=True)
    logits = F.linear(xt, wt, bt)
    loss = F.cross_entropy(logits.flatten(0, -2), torch.tensor(targets).flatten(), reduction="none")
    loss = loss.view(logits.shape[:-1])
    lse = torch.logsumexp(logits, -1)
    total = (loss * torch.tensor(grad_loss, dtype=torch.float64)).sum()
    if grad_lse is not None:
        total = total + (lse * torch.tensor(grad_lse, dtype=torch.float64)).sum()
    total.backward()
    grads = (xt.grad.numpy(), wt.grad.numpy(), None if bt is None else bt.grad.numpy())
    return loss.detach().numpy(), lse.detach().numpy(), grads


def test_autograd_matches_torch_with_bias_ignored_rows_and_per_token_weights(rng, poison):
    x, weight, bias, targets, grad_loss = problem(rng, 37, 32, 150)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, weight, bias))
    loss = linear_cross_entropy(xt, wt, torch.tensor(targets), bias=bt, chunk=16)  # chunks of 16, 16 and 5
    (loss * torch.tensor(grad_loss)).sum().backward()
    want_loss, _, (dx, dw, db) = torch_reference(x, weight, bias, targets, grad_loss)
    ignored = targets == -100
    assert loss.dtype == torch.float32 and (loss.detach().numpy()[ignored] == 0).all()
    assert (xt.grad.numpy()[ignored] == 0).all()  # an ignored token contributes nothing
    assert rel(loss.detach(), want_loss) <= 1e-5
    for got, want in ((xt.grad, dx), (wt.grad, dw), (bt.grad, db)):
        assert rel(got, want) <= 1e-5


@pytest.mark.parametrize("with_bias", [True, False])
def test_a_chunk_too_large_for_the_target_gather_finds_targets_in_the_sweep(rng, poison, monkeypatch, with_bias):
    # vocab * chunk >= 2**32 cannot be allocated here: lower the limit instead
    import importlib

    monkeypatch.setattr(importlib.import_module("kaio.ops_library.linear_cross_entropy"), "GATHER_LIMIT", 0)
    x, weight, bias, targets, grad_loss = problem(rng, 21, 32, 90)
    bias = bias if with_bias else None
    loss, lse = linear_cross_entropy(x, weight, targets, bias=bias, chunk=16, return_lse=True)
    want_loss, want_lse, _ = torch_reference(x, weight, bias, targets, grad_loss)
    assert rel(loss, want_loss) <= 1e-5 and rel(lse, want_lse) <= 1e-5


def test_numpy_without_bias_leading_dims_and_the_lse_gradient(rng, poison):
    x, weight, _, targets, grad_loss = problem(rng, 24, 48, 100, leading=(2, 12))  # chunks of 16 and 8
    grad_lse = rng.standard_normal((2, 12)).astype(np.float32)
    loss, lse = linear_cross_entropy(x, weight, targets.astype(np.int32), chunk=16, return_lse=True)
    dx, dw, db = linear_cross_entropy_backward(x, weight, targets.astype(np.int32), lse, grad_loss, chunk=16,
                                               grad_lse=grad_lse)  # fmt: skip
    want_loss, want_lse, (want_dx, want_dw, _) = torch_reference(x, weight, None, targets, grad_loss, grad_lse)
    assert db is None and loss.shape == lse.shape == (2, 12) and dx.shape == x.shape
    assert rel(loss, want_loss) <= 1e-5 and rel(lse, want_lse) <= 1e-5
    assert rel(dx, want_dx) <= 1e-5 and rel(dw, want_dw) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_inputs_against_the_f32_reference(rng, poison, dtype):
    x, weight, bias, targets, grad_loss = problem(rng, 20, 32, 120)
    half = [a.astype(DTYPES[dtype]) for a in (x, weight, bias)]
    loss, lse = linear_cross_entropy(*half[:2], targets, bias=half[2], chunk=16, return_lse=True)
    dx, dw, db = linear_cross_entropy_backward(*half[:2], targets, lse, grad_loss, bias=half[2], chunk=16)
    want_loss, _, want = torch_reference(*(a.astype(np.float32) for a in half), targets, grad_loss)
    assert dx.dtype == dw.dtype == db.dtype == DTYPES[dtype]
    assert rel(loss, want_loss) <= 1e-3
    for got, w in zip((dx, dw, db), want):
        assert rel(got, w) <= 2e-2


@pytest.mark.slow
def test_only_chunk_sized_buffers_are_allocated(rng, monkeypatch):
    from kaio.runtime.buffer import Buffer

    sizes = []
    allocate = Buffer.allocate.__func__

    def recording(cls, device, shape, dtype):
        buf = allocate(cls, device, shape, dtype)
        sizes.append(buf.size)
        return buf

    monkeypatch.setattr(Buffer, "allocate", classmethod(recording))
    tokens, hidden, vocab, chunk = 64, 32, 256, 16
    x, weight, bias, targets, grad_loss = problem(rng, tokens, hidden, vocab)
    _, lse = linear_cross_entropy(x, weight, targets, bias=bias, chunk=chunk, return_lse=True)
    linear_cross_entropy_backward(x, weight, targets, lse, grad_loss, bias=bias, chunk=chunk)
    # the largest arrays are the weight and its gradient; a chunk's logits are vocab x chunk
    assert max(sizes) == vocab * hidden < tokens * vocab
    assert vocab * chunk in sizes


def test_opcheck(rng):
    x, weight, bias, targets, grad_loss = (torch.tensor(a) for a in problem(rng, 20, 32, 64))
    lse = torch.zeros(20)
    torch.library.opcheck(torch.ops.kaio.linear_cross_entropy.default, (x, weight, targets, bias, -100, 16))
    torch.library.opcheck(torch.ops.kaio.linear_cross_entropy_backward.default,
                          (x, weight, targets, lse, grad_loss, None, None, -100, 0))  # fmt: skip


@pytest.mark.parametrize(
    "change, error, message",
    [
        ({"targets": np.array([0, 9, 1])}, KaioTypeError, r"`targets`\[1\] = 9 is outside \[0, 9\)"),
        ({"targets": np.array([0, 1])}, KaioTypeError, r"`targets` must have shape \(3,\)"),
        ({"targets": np.zeros(3, np.float32)}, KaioTypeError, "`targets` must be i32 or i64"),
        ({"weight": np.zeros((9, 5), np.float32)}, KaioTypeError, r"`weight` must have shape \(vocab, 4\)"),
        ({"weight": np.zeros((0, 4), np.float32)}, KaioValueError, "is empty"),
        ({"weight": np.zeros((9, 4), np.float16)}, KaioTypeError, "`weight` is f16 but `x` is f32"),
        ({"bias": np.zeros(8, np.float32)}, KaioTypeError, r"`bias` must have shape \(9,\)"),
        ({"x": np.zeros((3, 4), np.int32)}, KaioTypeError, "`x` must be f16, bf16 or f32"),
        ({"chunk": 0}, KaioTypeError, "`chunk` must be a positive number"),
        ({"ignore_index": 2**40}, KaioTypeError, "`ignore_index` must be a 32-bit integer"),
    ],
)
def test_bad_inputs_are_named_before_launch(change, error, message):
    args = {"x": np.zeros((3, 4), np.float32), "weight": np.zeros((9, 4), np.float32),
            "targets": np.array([0, 1, 2]), "bias": None, **change}  # fmt: skip
    kw = {k: args.pop(k) for k in ("bias", "chunk", "ignore_index") if k in args}
    with pytest.raises(error, match=message):
        linear_cross_entropy(args["x"], args["weight"], args["targets"], **kw)


def test_backward_refuses_a_grad_loss_of_another_type_or_shape(rng):
    x, weight, _, targets, grad_loss = problem(rng, 4, 16, 8)
    lse = np.zeros(4, np.float32)
    with pytest.raises(KaioTypeError, match="`grad_loss` must be f32"):
        linear_cross_entropy_backward(x, weight, targets, lse, grad_loss.astype(np.float64))
    with pytest.raises(KaioTypeError, match=r"`lse` must have shape \(4,\)"):
        linear_cross_entropy_backward(x, weight, targets, lse[:3], grad_loss)


def test_fake_refuses_what_the_op_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, weight, targets = torch.empty(3, 4, dtype=torch.float64), torch.empty(9, 4), torch.zeros(3, dtype=torch.long)
        with pytest.raises(KaioTypeError, match="`x` must be f16, bf16 or f32"):
            torch.ops.kaio.linear_cross_entropy(x, weight, targets, None, -100, 0)
