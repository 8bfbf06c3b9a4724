"""No library op drops a gradient: every public op called with torch tensors that require grad
records the graph (its gradients match torch's own version of the same math) or raises a kaio
error at the call. A result with ``requires_grad=False`` (the gradient silently lost) fails."""

import pytest

torch = pytest.importorskip("torch")
import kaio  # noqa: E402
import kaio.torch  # noqa: E402, F401

from . import torch_op_samples as samples  # noqa: E402


def test_every_public_op_has_a_case():
    covered = {c.op for c in samples.PUBLIC + samples.BACKWARD}
    assert samples.public_ops() <= covered, samples.public_ops() - covered


def outputs(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("case", samples.BACKWARD, ids=lambda c: c.name)
def test_backward_functions_record_or_refuse_a_second_derivative(case, rng):
    inputs = case.make(rng, 0)
    for name in case.grads:
        inputs[name].requires_grad_(True)
    try:
        got = outputs(case.kaio(**inputs))
    except kaio.KaioError as exc:  # refused at the call
        assert "grad" in str(exc), exc
        return
    assert all(t.requires_grad for t in got), f"{case.name} dropped the gradient"
    try:
        sum((t.float().sum() for t in got), torch.zeros(())).backward()
    except RuntimeError as exc:  # torch's refusal: the op records no second derivative
        assert "autograd" in str(exc) or "derivative" in str(exc), exc
        return
    assert all(inputs[n].grad is not None for n in case.grads), f"{case.name}: .grad left None"


@pytest.mark.parametrize("case", samples.PUBLIC, ids=lambda c: c.name)
def test_gradient_recorded_or_refused(case, rng):
    inputs = case.make(rng, 0)
    for name in case.grads:
        inputs[name].requires_grad_(True)
    try:
        got = outputs(case.kaio(**inputs))
    except kaio.KaioError as exc:  # refused at the call: no backward for this op (yet)
        assert "backward" in str(exc) or "grad" in str(exc), exc
        pytest.skip(f"{case.name} refuses tensors that require grad: {exc}")
    assert all(t.requires_grad for t in got if t.is_floating_point()), f"{case.name} dropped the gradient"
    weights = [torch.from_numpy(rng.standard_normal(tuple(t.shape)).astype("float32")) for t in got]
    sum(((t.float() * w).sum() for t, w in zip(got, weights, strict=True)), torch.zeros(())).backward()
    grads = {n: inputs[n].grad for n in case.grads}
    assert all(g is not None for g in grads.values()), f"{case.name}: .grad left None: {grads}"

    ref_inputs = {n: t.detach().clone().requires_grad_(n in case.grads) for n, t in inputs.items()}
    want = outputs(case.torch_ref(**ref_inputs))
    for t, w in zip(got, want, strict=True):
        torch.testing.assert_close(t.detach().float(), w.detach().float(), rtol=case.tol, atol=case.tol)
    sum(((t.float() * w).sum() for t, w in zip(want, weights, strict=True)), torch.zeros(())).backward()
    for n in case.grads:
        torch.testing.assert_close(grads[n].float(), ref_inputs[n].grad.float(), rtol=case.tol, atol=case.tol,
                                   msg=lambda m, n=n: f"{case.name}: d{n}: {m}")  # fmt: skip


def test_an_op_without_a_backward_raises_at_the_call(monkeypatch):
    from kaio.ops_library import autograd

    monkeypatch.setattr(autograd, "has_backward", lambda qualname: qualname != "kaio::softmax")
    x = torch.randn(3, 8, requires_grad=True)
    with pytest.raises(kaio.KaioTypeError, match=r"softmax: has no backward yet.*torch.no_grad"):
        kaio.ops_library.softmax(x)
    with torch.no_grad():  # nothing to record: it runs
        torch.testing.assert_close(kaio.ops_library.softmax(x), torch.softmax(x, -1))
    torch.testing.assert_close(kaio.ops_library.softmax(x.detach()), torch.softmax(x.detach(), -1))


def test_matmul_out_refuses_tensors_that_require_grad():
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, 4)
    with pytest.raises(kaio.KaioTypeError, match="out="):
        kaio.ops_library.matmul(a, b, torch.zeros(4, 4))


@pytest.mark.parametrize("kw", [{"config": "object"}, {"acc": "f32"}], ids=["MatmulConfig", "acc"])
def test_matmul_run_directly_refuses_tensors_that_require_grad(kw):
    """A MatmulConfig object or acc= runs the kernel outside the custom op: refused with grad."""
    if kw.get("config") == "object":
        kw = {"config": kaio.ops_library.MatmulConfig()}
    a, b = torch.randn(16, 32, requires_grad=True), torch.randn(32, 16)
    with pytest.raises(kaio.KaioTypeError, match="matmul: records no gradient"):
        kaio.ops_library.matmul(a, b, **kw)
    torch.testing.assert_close(kaio.ops_library.matmul(a.detach(), b, **kw), a.detach() @ b, rtol=1e-3, atol=1e-3)


def test_the_ops_without_a_torch_op_are_public_ops_that_refuse_gradients():
    # the exemption names real ops, and each says so rather than dropping a gradient
    assert samples.WITHOUT_TORCH_OP <= set(samples.ol.__all__)
    import numpy as np

    x = torch.randn(4, 8, requires_grad=True)
    q = torch.randn(1, 2, 32, dtype=torch.float16, requires_grad=True)
    cache = torch.randn(1, 16, 2, 32, dtype=torch.float16)
    with pytest.raises(kaio.KaioError, match="grad"):
        samples.ol.paged_attention(q, cache, cache, torch.zeros(1, 1, dtype=torch.int32), torch.tensor([3], dtype=torch.int32))
    # create_block_mask takes no tensor that could require grad: the mask is integers
    # sample's ids are integers with no gradient to drop: it takes logits that require grad
    ids = samples.ol.sample(x)
    assert ids.dtype == torch.int32 and ids.requires_grad is False
    torch.testing.assert_close(ids, torch.argmax(x.detach(), -1).to(torch.int32))
