"""A library op's ``device=`` with torch tensors: honoured under torch.compile (forward and
backward launch on the named device, not the tensors' default one), eagerly with grad (the
backward too), and a device kaio refuses is the same kaio error compiled or not."""

import numpy as np
import pytest

import kaio

torch = pytest.importorskip("torch")
import kaio.torch  # noqa: E402, F401  (registers torch.ops.kaio.*)
from kaio.ops_library import attention, layer_norm, matmul, softmax  # noqa: E402
from kaio.ops_library.autograd import device_label, op_device  # noqa: E402
from kaio.ops_library.matmul_config import default_config  # noqa: E402

ARCH = "sm_90a"


@pytest.fixture
def chosen():
    """A simulated device other than the default one CPU tensors would run on."""
    default = kaio.Device()
    device = kaio.Device("sim", arch=ARCH)
    return device if device is not default else kaio.Device("sim", arch="sm_89")


class Launches:
    """Whether a simulated device launched since the last look (its latest report changed)."""

    def __init__(self, device):
        self.device, self.seen = device, device.last_launch_report

    def since(self) -> bool:
        report = self.device.last_launch_report
        launched, self.seen = report is not self.seen, report
        return launched


def compiled(f):
    torch._dynamo.reset()
    return torch.compile(f, fullgraph=True, backend="aot_eager")


def layer_norm_reference(x, w, b, eps=1e-5):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def attention_reference(q, k, v):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def softmax_reference(x):
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


CASES = {  # name: (the call, its inputs from a generator, the numpy reference, tolerance)
    "matmul": (
        lambda dev: lambda a, b: matmul(a, b, device=dev),
        lambda rng: (rng.standard_normal((16, 32)).astype(np.float16), rng.standard_normal((32, 24)).astype(np.float16)),
        lambda a, b: a.astype(np.float64) @ b.astype(np.float64),
        2e-3,
    ),
    "layer_norm": (
        lambda dev: lambda x, w, b: layer_norm(x, w, b, device=dev),
        lambda rng: tuple(rng.standard_normal(s).astype(np.float32) for s in ((6, 40), (40,), (40,))),
        layer_norm_reference,
        1e-5,
    ),
    "attention": (
        lambda dev: lambda q, k, v: attention(q, k, v, device=dev),
        lambda rng: tuple(rng.standard_normal((1, 2, 16, 64)).astype(np.float16) for _ in range(3)),
        attention_reference,
        5e-3,
    ),
}  # fmt: skip


def rel(got, want) -> float:
    got = got.detach().double().numpy()
    assert np.isfinite(got).all(), "unwritten (poisoned) elements"
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize("name", CASES)
def test_compiled_op_runs_on_the_named_device(name, chosen, rng, poison):
    call, make, reference, tol = CASES[name]
    inputs = make(rng)
    f = compiled(call(chosen))
    on_chosen, on_default = Launches(chosen), Launches(kaio.Device())
    got = f(*(torch.from_numpy(a) for a in inputs))
    assert rel(got, reference(*inputs)) < tol, name
    assert on_chosen.since(), f"{name}: did not launch on {chosen}"
    assert not on_default.since(), f"{name}: ran on the default device"


def test_compiled_backward_runs_on_the_named_device(chosen, rng, poison):
    """Checked on the norm alone: every op's backward gets the device the same way
    (``autograd.register_autograd``), and the matmul and attention backward kernels would
    triple the test's compile time."""
    call, make, reference, tol = CASES["layer_norm"]
    inputs = make(rng)
    tensors = [torch.from_numpy(a).requires_grad_() for a in inputs]
    got = compiled(call(chosen))(*tensors)
    assert rel(got, reference(*inputs)) < tol
    on_chosen, on_default = Launches(chosen), Launches(kaio.Device())
    weights = torch.from_numpy(rng.standard_normal(tuple(got.shape)).astype(np.float32))
    (got * weights).sum().backward()
    assert on_chosen.since(), f"the backward did not launch on {chosen}"
    assert not on_default.since(), "the backward ran on the default device"
    eager = [torch.from_numpy(a).requires_grad_() for a in inputs]
    (torch.nn.functional.layer_norm(eager[0], (40,), *eager[1:]) * weights).sum().backward()
    for t, e in zip(tensors, eager, strict=True):
        torch.testing.assert_close(t.grad, e.grad, rtol=1e-4, atol=1e-4)


def test_compiled_device_string_and_matmul_out(chosen, rng, poison):
    """``device="sim:<arch>"`` (what ``Device()`` takes) compiles as a Device does; ``out=``
    (the mutating custom op) carries it too."""
    x = torch.from_numpy(rng.standard_normal((4, 24)).astype(np.float32))
    on_chosen = Launches(chosen)
    got = compiled(lambda x: softmax(x, device=f"sim:{chosen.arch}"))(x)
    np.testing.assert_allclose(got.numpy(), softmax_reference(x.numpy()), rtol=1e-5, atol=1e-6)
    assert on_chosen.since()

    a, b = (torch.from_numpy(rng.standard_normal(s).astype(np.float16)) for s in ((16, 32), (32, 8)))
    out = torch.full((16, 8), float("nan"))
    compiled(lambda a, b, out: matmul(a, b, out, device=chosen))(a, b, out)
    np.testing.assert_allclose(out.numpy(), a.double().numpy() @ b.double().numpy(), rtol=2e-3, atol=2e-3)
    assert on_chosen.since()


def test_eager_backward_runs_on_the_named_device(chosen, rng):
    """With grad, the eager custom op gets the device and so does its backward."""
    x = torch.from_numpy(rng.standard_normal((4, 24)).astype(np.float32)).requires_grad_()
    on_chosen, on_default = Launches(chosen), Launches(kaio.Device())
    y = softmax(x, device=chosen)
    assert on_chosen.since()
    (y * y).sum().backward()
    assert on_chosen.since(), "the backward ran elsewhere"
    assert not on_default.since()
    ref = x.detach().clone().requires_grad_()
    (torch.softmax(ref, -1) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad, rtol=1e-5, atol=1e-6)


def test_device_labels_round_trip(chosen):
    assert device_label(None) is None and op_device(None) is None
    assert device_label(chosen) == f"sim:{chosen.arch}"
    assert device_label("sim") == f"sim:{kaio.Device('sim').arch}"
    for device in (chosen, kaio.Device("sim")):
        assert op_device(device_label(device)) is device


def first_kaio_error(call, *args):
    """The kaio error ``call(*args)`` raised (under torch.compile: the cause of torch's error)."""
    try:
        call(*args)
    except Exception as exc:  # noqa: BLE001  (torch.compile wraps what tracing raised)
        while exc is not None and not isinstance(exc, kaio.KaioError):
            exc = exc.__cause__ or exc.__context__
        return exc
    return None


@pytest.mark.parametrize(("bad", "error"), [("bogus", kaio.KaioTypeError), (True, kaio.KaioTypeError),
                                            (-1, kaio.KaioTypeError), ("sim:sm_99", kaio.KaioTargetError)])  # fmt: skip
def test_a_bad_device_is_the_same_kaio_error_eager_and_compiled(bad, error):
    x = torch.randn(4, 16)
    eager = first_kaio_error(lambda x: softmax(x, device=bad), x)
    assert type(eager) is error, eager
    with_grad = first_kaio_error(lambda x: softmax(x, device=bad), x.clone().requires_grad_())
    assert type(with_grad) is error, with_grad
    traced = first_kaio_error(compiled(lambda x: softmax(x, device=bad)), x)
    assert type(traced) is error and str(traced).startswith(str(eager)), traced  # Dynamo appends its trace


def test_a_bad_label_passed_to_the_custom_op_is_refused():
    with pytest.raises(kaio.KaioTypeError, match="unknown device"):
        torch.ops.kaio.softmax(torch.randn(2, 8), device="bogus")


def test_an_op_without_backward_is_refused_compiled_as_eagerly():
    """With grad, a traced op that has no backward is the eager KaioTypeError (naming the op),
    not torch's error when AOT autograd traces the backward."""
    from kaio.ops_library import quantize_int8

    x = torch.randn(4, 32, requires_grad=True)
    eager = first_kaio_error(quantize_int8, x)
    assert type(eager) is kaio.KaioTypeError and "quantize_int8: has no backward" in str(eager), eager
    traced = first_kaio_error(compiled(quantize_int8), x)
    assert type(traced) is kaio.KaioTypeError and str(traced).startswith(str(eager)), traced
    q, _ = compiled(quantize_int8)(x.detach())  # without grad it compiles
    assert q.dtype == torch.int8


MATMUL_CONFIG = default_config(True, (8, 8, 2), 2, arch="sm_80")
DIRECT_RUNS = {  # calls that run kernels directly on the tensors (no custom op): refused while traced
    "matmul config=MatmulConfig": lambda a, b: matmul(a, b, config=MATMUL_CONFIG),
    "matmul acc=": lambda a, b: matmul(a, b, acc=kaio.dtypes.f32),
    "attention out=": lambda a, b: attention(a, a, a, out=torch.empty_like(a)),
    "matmul_backward": lambda a, b: kaio.ops_library.matmul_backward(a, a, b),
}


@pytest.mark.parametrize("name", DIRECT_RUNS)
def test_a_direct_run_is_refused_under_compile(name):
    """Not a crash inside kaio's launch code (Dynamo tracing it): a KaioValueError naming the
    op, fullgraph or not; torch.compiler.disable around the call is the way out."""
    shape = (1, 1, 16, 64) if name.startswith("attention") else (16, 16)
    a, b = torch.randn(shape).half(), torch.randn(16, 16).half()
    for fullgraph in (True, False):
        torch._dynamo.reset()
        f = torch.compile(DIRECT_RUNS[name], fullgraph=fullgraph, backend="aot_eager")
        error = first_kaio_error(f, a, b)
        assert type(error) is kaio.KaioValueError and "torch.compile cannot trace" in str(error), error
        assert str(error).startswith(name.split()[0]), error


def test_a_direct_run_outside_the_graph_runs(rng):
    a, b = (torch.from_numpy(rng.standard_normal((16, 16)).astype(np.float16)) for _ in range(2))
    direct = torch.compiler.disable(DIRECT_RUNS["matmul config=MatmulConfig"])
    torch._dynamo.reset()
    got = torch.compile(lambda a, b: direct(a, b) + 1.0, backend="aot_eager")(a, b)  # a graph break
    np.testing.assert_allclose(got.numpy(), a.double().numpy() @ b.double().numpy() + 1.0, rtol=2e-3, atol=2e-3)
