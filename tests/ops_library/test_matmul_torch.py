"""kaio.ops_library.matmul with torch tensors (CPU tensors: the simulator), numpy arrays and kaio
Buffers: each kind comes back as it went in."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import MatmulConfig, matmul
from kaio.ops_library.operands import Operands

torch = pytest.importorskip("torch")


def reference(a, b, c0=None, alpha=1.0, beta=0.0):
    ref = alpha * (a.double() @ b.double())
    return ref if c0 is None else ref + beta * c0.double()


def rel_error(got, ref) -> float:
    return float((got.double() - ref).norm() / max(ref.norm(), 1e-30))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_torch_in_torch_out_on_the_inputs_device(dtype):
    a, b = torch.randn(72, 40).to(dtype), torch.randn(40, 56).to(dtype)
    c = matmul(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.device == a.device
    assert c.shape == (72, 56) and rel_error(c, reference(a, b)) <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_torch_out_in_the_input_type_with_alpha_beta(dtype):
    a, b = torch.randn(64, 48).to(dtype), torch.randn(48, 40).to(dtype)
    c0 = torch.randn(64, 40).to(dtype)
    out = c0.clone()
    got = matmul(a, b, out, alpha=0.5, beta=2.0)
    assert got is out and out.dtype == dtype
    assert rel_error(out, reference(a, b, c0, 0.5, 2.0)) <= 5e-3
    out32 = torch.full((64, 40), float("nan"))
    matmul(a, b, out=out32, config=MatmulConfig())  # a MatmulConfig runs the op directly
    assert rel_error(out32, reference(a, b)) <= 1e-5


def test_numpy_and_buffers_keep_their_kinds():
    rng = np.random.default_rng()
    a = rng.standard_normal((40, 24)).astype(np.float16)
    b = rng.standard_normal((24, 32)).astype(np.float16)
    got = matmul(a, b)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    dev = kaio.Device("sim")
    buf = matmul(dev.alloc_from(a), dev.alloc_from(b))
    assert isinstance(buf, kaio.Buffer) and buf.device is dev
    np.testing.assert_allclose(buf.to_host(), got, rtol=1e-6)
    out = np.zeros((40, 32), np.float32)
    assert matmul(dev.alloc_from(a), dev.alloc_from(b), out) is out, "a numpy out is filled"
    np.testing.assert_allclose(out, got, rtol=1e-6)


def test_torch_operands_are_checked_by_name():
    a, b = torch.randn(16, 8).half(), torch.randn(8, 16).half()
    with pytest.raises(KaioTypeError, match=r"matmul: `a` is not contiguous .*a.contiguous\(\)"):
        matmul(torch.randn(8, 16).half().t(), b)
    with pytest.raises(KaioTypeError, match=r"matmul: `b` has dtype torch.complex64"):
        matmul.run(a, torch.ones(8, 16, dtype=torch.complex64))
    with pytest.raises(KaioTypeError, match=r"`out` is a numpy array but other operands are torch"):
        matmul(a, b, np.zeros((16, 16), np.float32))
    with pytest.raises(KaioTypeError, match="the inner sizes differ"):
        matmul.run(a, a)


def test_operands_pick_device_and_kind():
    t = torch.ones(2, 2)
    ops = Operands("op", t, None)
    assert ops.torch and not ops.host and ops.device is kaio.Device()
    out = ops.output((3, 4), kaio.dtypes.bf16)
    assert out.value.dtype == torch.bfloat16 and out.value.shape == (3, 4)
    assert ops.result(out) is out.value
    host = Operands("op", np.ones(2))
    assert host.host and not host.torch


def test_bias_and_activation_through_the_custom_op_and_torch_compile():
    a, b = torch.randn(40, 32).to(torch.float16), torch.randn(32, 48).to(torch.float16)
    bias = torch.randn(48)
    want = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
    got = matmul(a, b, bias=bias, activation="gelu")
    assert rel_error(got, want) <= 1e-5

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(x, y, z):
        return matmul(x, y, bias=z, activation="relu") * 2

    compiled = f(a, b, bias)
    assert rel_error(compiled, 2 * torch.relu(a.double() @ b.double() + bias.double())) <= 1e-5
