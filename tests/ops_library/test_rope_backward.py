"""rope_backward (the rotation back) on the simulator against torch autograd of a torch rope,
and torch.autograd through rope and torch.ops.kaio.rope, cos/sin gradients included."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import rope, rope_backward

from .conftest import rel

torch = pytest.importorskip("torch")
import kaio.torch  # noqa: E402, F401  (registers torch.ops.kaio.*)

TORCH_TYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
GRAD_TOL = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}


def torch_rope(x, cos, sin, interleaved, layout):
    """rope in torch ops (any dtype: the reference runs in f64)."""
    at = (None, slice(None), None) if layout == "bshd" else (None, None)
    c, s = cos[at], sin[at]
    h = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :h], x[..., h:])
    ra, rb = a * c - b * s, b * c + a * s
    if interleaved:
        return torch.stack((ra, rb), -1).flatten(-2)
    return torch.cat((ra, rb), -1)


def make(b, s, h, d, layout, dtype, table_dtype=None):
    t = TORCH_TYPES[dtype]
    shape = (b, s, h, d) if layout == "bshd" else (b, h, s, d)
    angle = torch.rand(s, d // 2) * 2 * np.pi
    tt = t if table_dtype is None else table_dtype
    return torch.randn(shape).to(t), torch.randn(shape).to(t), angle.cos().to(tt), angle.sin().to(tt)


def reference(x, cos, sin, dy, interleaved, layout):
    """(dx, dcos, dsin) in f64."""
    xs = [v.double().requires_grad_() for v in (x, cos, sin)]
    torch_rope(*xs, interleaved, layout).backward(dy.double())
    return [v.grad for v in xs]


@pytest.mark.parametrize("shape", [(1, 3, 2, 2), (2, 5, 3, 14), (1, 3, 2, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
@pytest.mark.parametrize("dtype", list(TORCH_TYPES))
def test_rope_backward_matches_torch(poison, dtype, interleaved, layout, shape):
    x, dy, cos, sin = make(*shape, layout, dtype)
    got = rope_backward(dy, cos, sin, interleaved, device=kaio.Device("sim"))  # the kernel itself
    assert got.dtype == dy.dtype and got.shape == dy.shape
    assert rel(got, reference(x, cos, sin, dy, interleaved, layout)[0].numpy()) <= GRAD_TOL[dtype]


def test_numpy_in_numpy_out_and_f32_tables_with_half_gradients(poison):
    x, dy, cos, sin = make(2, 4, 4, 32, "bhsd", "f16", torch.float32)
    got = rope_backward(dy.numpy(), cos.numpy(), sin.numpy(), layout="bhsd")
    assert isinstance(got, np.ndarray) and got.dtype == np.float16
    assert rel(got, reference(x, cos, sin, dy, False, "bhsd")[0].numpy()) <= GRAD_TOL["f16"]
    # the rotation back undoes the rotation
    y = rope(x.float().numpy(), cos.numpy(), sin.numpy(), layout="bhsd")
    assert rel(rope_backward(y, cos.numpy(), sin.numpy(), layout="bhsd"), x.double().numpy()) <= 1e-5


@pytest.mark.parametrize("direct", [False, True], ids=["public", "torch_ops"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
def test_autograd_sets_every_grad(direct, interleaved):
    x, dy, cos, sin = make(2, 3, 2, 16, "bshd", "f32")
    lx, lc, ls = (v.clone().requires_grad_() for v in (x, cos, sin))
    y = torch.ops.kaio.rope(lx, lc, ls, interleaved, None) if direct else rope(lx, lc, ls, interleaved)
    y.backward(dy)
    for leaf, want in zip((lx, lc, ls), reference(x, cos, sin, dy, interleaved, "bshd")):
        assert leaf.grad is not None and rel(leaf.grad, want.numpy()) <= 1e-5
    # x alone requires grad: the tables get none, x's is the kernel's
    lx = x.clone().requires_grad_()
    rope(lx, cos, sin, interleaved).backward(dy)
    assert rel(lx.grad, reference(x, cos, sin, dy, interleaved, "bshd")[0].numpy()) <= 1e-5


def test_bf16_gradient_with_f32_tables():
    x, dy, cos, sin = make(1, 5, 3, 14, "bhsd", "bf16", torch.float32)
    lx, lc = x.clone().requires_grad_(), cos.clone().requires_grad_()
    rope(lx, lc, sin).backward(dy)
    want = reference(x, cos, sin, dy, False, "bhsd")
    assert lx.grad.dtype == torch.bfloat16 and lc.grad.dtype == torch.float32
    assert rel(lx.grad, want[0].numpy()) <= GRAD_TOL["bf16"] and rel(lc.grad, want[1].numpy()) <= GRAD_TOL["bf16"]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda g, c: rope_backward(g[0], c, c), r"rope_backward: `grad_out` must be 4-D"),
        (lambda g, c: rope_backward(g.astype(np.int32), c, c), r"rope_backward: `grad_out` must be f16, bf16 or f32"),
        (lambda g, c: rope_backward(g, c[:, :2], c), r"rope_backward: `cos` must have shape \(S, 4\), got \(3, 2\)"),
        (lambda g, c: rope_backward(g, c, c, interleaved=1), "rope_backward: `interleaved` must be a bool"),
        (lambda g, c: rope_backward(g, c, c, layout="sbhd"), "rope_backward: `layout` is 'bshd', 'bhsd'"),
    ],
)
def test_bad_inputs_are_named_before_launch(call, message):
    with pytest.raises(KaioTypeError, match=message):
        call(np.ones((1, 3, 2, 8), np.float32), np.ones((3, 4), np.float32))


@pytest.mark.parametrize("name", ["rope", "rope_backward"])
def test_opcheck(name):
    x, _, cos, sin = make(1, 3, 2, 8, "bshd", "f32")
    if name == "rope":  # autograd checked with every input requiring grad
        x, cos, sin = (v.requires_grad_() for v in (x, cos, sin))
    torch.library.opcheck(getattr(torch.ops.kaio, name).default, (x, cos, sin, False, None))
