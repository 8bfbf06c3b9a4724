"""kaio ops inside torch.compile: library ops and user kernels as torch.library custom ops, traced
through their fake implementations with no graph break (CPU tensors: the simulator runs them)."""

import shutil
import textwrap

import pytest

import kaio

torch = pytest.importorskip("torch")
from kaio.ops_library import matmul  # noqa: E402

import kaio.torch  # noqa: E402  (registers torch.ops.kaio.*)

KERNEL = """
import kaio
from kaio.prelude import *

@kaio.gpu_kernel(block_size=128)
def scale_add(x: Array[f32], y: MutArray[f32], s: f32, n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = y[i] + s * x[i]
"""


@pytest.fixture(scope="module")
def scale_add_op(tmp_path_factory):
    import importlib.util

    path = tmp_path_factory.mktemp("kernels") / "torch_compile_kernels.py"
    path.write_text(textwrap.dedent(KERNEL))
    spec = importlib.util.spec_from_file_location("torch_compile_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = module.scale_add

    @kaio.torch.custom_op("kaio_tests::scale_add", mutates_args=("y",))
    def scale_add(x: torch.Tensor, y: torch.Tensor, s: float) -> None:
        kernel[kaio.cdiv(x.numel(), 128)](x, y, s, x.numel())

    return scale_add


def mixed(scale_add_op):
    def f(a, b, x):
        c = matmul(a, b)  # kaio op 1: routed through torch.ops.kaio.matmul
        y = torch.relu(c) + 1.0
        scale_add_op(x, y, 0.5)  # kaio op 2: a user kernel registered with kaio.torch.custom_op
        return (y * 2).sum(dim=1)

    return f


def inputs():
    return torch.randn(48, 32).half(), torch.randn(32, 40).half(), torch.randn(48, 40)


def test_matmul_and_custom_ops_are_registered(scale_add_op):
    a, b, _ = inputs()
    assert torch.equal(torch.ops.kaio.matmul(a, b, 1.0, 0.0, None), matmul.run(a, b))
    y = torch.zeros(4)
    scale_add_op(torch.ones(4), y, 2.0)
    assert torch.equal(y, torch.full((4,), 2.0))
    torch.library.opcheck(torch.ops.kaio.matmul.default, (a, b, 1.0, 0.0, None))
    torch.library.opcheck(scale_add_op._opoverload, (torch.ones(4), torch.zeros(4), 2.0))


def test_fullgraph_compile_with_two_kaio_ops_matches_eager(scale_add_op):
    f = mixed(scale_add_op)
    a, b, x = inputs()
    expected = f(a, b, x)
    graphs = []

    def backend(gm, example_inputs):  # what Dynamo hands over: one graph holding both ops
        graphs.append(gm)
        return torch._dynamo.backends.common.aot_autograd(fw_compiler=lambda g, _: g)(
            gm, example_inputs
        )

    got = torch.compile(f, fullgraph=True, backend=backend)(a, b, x)
    assert torch.equal(got, expected)
    (gm,) = graphs
    code = gm.code
    assert "kaio.matmul" in code and "kaio_tests.scale_add" in code


def test_fullgraph_compile_aot_eager(scale_add_op):
    f = mixed(scale_add_op)
    a, b, x = inputs()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b, x)
    assert torch.equal(got, f(a, b, x))


def test_matmul_out_compiles_as_a_mutating_op():
    a, b, _ = inputs()

    def f(a, b, out):
        matmul(a, b, out, beta=1.0)  # kaio::matmul_out, mutates_args=("out",)
        return out.sum(dim=0)

    eager_out, compiled_out = torch.ones(48, 40), torch.ones(48, 40)
    expected = f(a, b, eager_out)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b, compiled_out)
    assert torch.equal(got, expected) and torch.equal(compiled_out, eager_out)


@pytest.mark.slow
# Inductor itself touches torch.jit APIs that torch deprecates; the suite's
# -W error::DeprecationWarning is for xDSL's warnings, not torch's internals.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor on CPU needs a C++ compiler")
def test_fullgraph_compile_inductor(scale_add_op):
    torch._dynamo.reset()
    f = mixed(scale_add_op)
    a, b, x = inputs()
    got = torch.compile(f, fullgraph=True)(a, b, x)
    torch.testing.assert_close(got, f(a, b, x), rtol=1e-5, atol=1e-4)


def test_custom_op_takes_a_fake_and_names_bad_schemas():
    @kaio.torch.custom_op("kaio_tests::twice", mutates_args=(), fake=lambda x: torch.empty_like(x))
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    out = torch.compile(lambda x: twice(x) + 1, fullgraph=True, backend="aot_eager")(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 3.0))
    with pytest.raises(kaio.KaioTypeError, match=r"kaio.torch.custom_op\('kaio_tests::untyped'\)"):

        @kaio.torch.custom_op("kaio_tests::untyped", mutates_args=())
        def untyped(x):
            return x


# --- every library op under torch.compile(fullgraph=True, dynamic=True) ----------------------

from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402


from ..ops_library import torch_op_samples as samples  # noqa: E402


def compiled_counting(f):
    """``f`` compiled fullgraph with dynamic shapes (aot_eager), and a counter of its graphs."""
    counter = CompileCounterWithBackend("aot_eager")
    return torch.compile(f, fullgraph=True, dynamic=True, backend=counter), counter


def loss_of(result, weights):
    outs = result if isinstance(result, tuple) else (result,)
    return sum((o.float() * w).sum() for o, w in zip(outs, weights, strict=True))


@pytest.mark.parametrize("case", samples.PUBLIC, ids=lambda c: c.name)
def test_every_op_compiles_fullgraph_dynamic_forward_and_backward(case, rng):
    """Forward and backward traced once for two input sizes (dynamic: no recompile), results
    and gradients equal to eager; an op without a backward compiles forward-only."""
    torch._dynamo.reset()
    grad = samples.records_gradient(case, rng)
    f, counter = compiled_counting(case.kaio)  # the fp8 cases' device= (sm_89) carried by the traced op
    _compare_compiled(case, rng, grad, f, counter)


def _compare_compiled(case, rng, grad, f, counter):
    frames = None
    for trial in range(2):
        inputs = case.make(rng, trial)
        eager_inputs = {n: t.clone().requires_grad_(grad and n in case.grads) for n, t in inputs.items()}
        inputs = {n: t.clone().requires_grad_(grad and n in case.grads) for n, t in inputs.items()}
        got, want = f(**inputs), case.kaio(**eager_inputs)
        for g, w in zip(*(r if isinstance(r, tuple) else (r,) for r in (got, want)), strict=True):
            tol = 0.0 if g.dtype.itemsize == 1 else case.tol  # 8-bit results: the same kernel, bit for bit
            torch.testing.assert_close(g, w, rtol=tol, atol=tol)
        if grad:
            outs = got if isinstance(got, tuple) else (got,)
            weights = [torch.from_numpy(rng.standard_normal(tuple(o.shape)).astype("float32")) for o in outs]
            loss_of(got, weights).backward()
            loss_of(want, weights).backward()
            for n in case.grads:
                torch.testing.assert_close(inputs[n].grad, eager_inputs[n].grad, rtol=case.tol, atol=case.tol)
        if frames is None:
            frames = counter.frame_count
    assert counter.frame_count == frames, f"{case.name}: recompiled for a new size"


# --- the fakes refuse what the real ops refuse -----------------------------------------------

ol = kaio.ops_library
T = torch.randn
BAD_INPUTS = [  # (what is wrong, the call, its arguments)
    ("f64 x", lambda x: ol.softmax(x), (T(4, 8, dtype=torch.float64),)),
    ("non-contiguous x", lambda x: ol.log_softmax(x), (T(8, 4).t(),)),
    ("integer x", lambda x: ol.softmax(x), (torch.ones(4, 8, dtype=torch.int32),)),
    ("weight shape", lambda x, w: ol.layer_norm(x, w), (T(4, 8), T(7))),
    ("weight dtype", lambda x, w: ol.rms_norm(x, w), (T(4, 8), T(8).half())),
    ("non-contiguous weight", lambda x, w: ol.rms_norm(x, w), (T(4, 8), T(8, 2)[:, 0])),
    ("residual shape", lambda x, r: ol.rms_norm(x, None, residual=r), (T(4, 8), T(3, 8))),
    ("rope 3-D x", lambda x, c, s: ol.rope(x, c, s), (T(2, 5, 16), T(5, 8), T(5, 8))),
    ("rope cos shape", lambda x, c, s: ol.rope(x, c, s), (T(1, 5, 2, 16), T(5, 6), T(5, 6))),
    ("odd gated dim", lambda x: ol.silu_and_mul(x), (T(4, 7),)),
    ("f64 gated x", lambda x: ol.gelu_and_mul(x), (T(4, 8, dtype=torch.float64),)),
    ("float targets", lambda x, t: ol.cross_entropy(x, t), (T(4, 8), T(4))),
    ("targets shape", lambda x, t: ol.cross_entropy(x, t), (T(4, 8), torch.zeros(5, dtype=torch.long))),
    ("matmul inner sizes", lambda a, b: ol.matmul(a, b), (T(4, 8), T(6, 4))),
    ("matmul f64", lambda a, b: ol.matmul(a, b), (T(4, 8, dtype=torch.float64), T(8, 4, dtype=torch.float64))),
    ("matmul bias shape", lambda a, b, c: ol.matmul(a, b, bias=c), (T(4, 8), T(8, 4), T(5))),
    ("matmul non-contiguous", lambda a, b: ol.matmul(a, b), (T(8, 4).t(), T(8, 4))),
    ("attention f32 q", lambda q, k, v: ol.attention(q, k, v), (T(1, 2, 8, 32), T(1, 2, 8, 32), T(1, 2, 8, 32))),
    ("attention head dim", lambda q, k, v: ol.attention(q, k, v),
     (T(1, 2, 8, 20).half(), T(1, 2, 8, 20).half(), T(1, 2, 8, 20).half())),  # not a multiple of 8
]  # fmt: skip


def raised(call, args):
    """The kaio error ``call(*args)`` raised (looked for through torch's wrapping), else None."""
    try:
        call(*args)
    except Exception as exc:  # noqa: BLE001  (torch.compile wraps what the fake raised)
        while exc is not None and not isinstance(exc, kaio.KaioError):
            exc = exc.__cause__ or exc.__context__
        return exc
    return None


@pytest.mark.parametrize(("what", "call", "args"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_fakes_refuse_what_the_real_ops_refuse(what, call, args):
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = raised(call, args)
    assert real is not None, f"{what}: the real op accepted it"
    with FakeTensorMode() as mode:
        fake = raised(call, tuple(mode.from_tensor(a) for a in args))
    assert type(fake) is type(real), f"{what}: FakeTensorMode raised {fake!r}, the real op {real!r}"
    torch._dynamo.reset()
    compiled = raised(torch.compile(call, fullgraph=True, dynamic=True, backend="aot_eager"), args)
    assert type(compiled) is type(real), f"{what}: torch.compile raised {compiled!r}, the real op {real!r}"
    assert str(compiled).split(":")[0] == str(real).split(":")[0]  # the same op named


def test_eps_is_checked_in_and_out_of_compile():
    x, w = torch.randn(4, 8), torch.randn(8)
    f = torch.compile(lambda x, w, eps: ol.rms_norm(x, w, eps=eps), fullgraph=True, dynamic=True, backend="aot_eager")
    torch.testing.assert_close(f(x, w, 1e-3), ol.rms_norm(x, w, eps=1e-3))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(kaio.KaioTypeError, match="eps"):
            ol.layer_norm(x, w, eps=bad)
        assert isinstance(raised(f, (x, w, bad)), kaio.KaioTypeError), bad


# --- @kaio.torch.custom_op(backward=...): a user's fused op, trainable ------------------------


def test_user_fused_op_with_a_backward_kernel_matches_torch(rng):
    import tile_bias_gelu_training as example  # examples/

    x = torch.from_numpy(rng.standard_normal((37, 70)).astype("float32")).requires_grad_()
    bias = torch.from_numpy(rng.standard_normal(70).astype("float32")).requires_grad_()
    dy = torch.from_numpy(rng.standard_normal((37, 70)).astype("float32"))
    y = example.bias_gelu(x, bias)
    y.backward(dy)
    xr, br = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    yr = torch.nn.functional.gelu(xr + br, approximate="tanh")
    yr.backward(dy)
    torch.testing.assert_close(y, yr, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bias.grad, br.grad, rtol=1e-4, atol=1e-4)  # atomics: any order

    # compiled with dynamic shapes, forward and backward: the same gradients
    torch._dynamo.reset()
    f = torch.compile(lambda x, b: example.bias_gelu(x, b).sum(), fullgraph=True, dynamic=True, backend="aot_eager")
    x2, b2 = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    f(x2, b2).backward()
    xr, br = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    torch.nn.functional.gelu(xr + br, approximate="tanh").sum().backward()
    torch.testing.assert_close(x2.grad, xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b2.grad, br.grad, rtol=1e-4, atol=1e-4)


def test_user_fused_op_trains_like_torch():
    import tile_bias_gelu_training as example

    kaio_losses, kaio_params = example.train(fused=True, steps=4, seed=1)
    torch_losses, torch_params = example.train(fused=False, steps=4, seed=1)
    assert kaio_losses[-1] < kaio_losses[0]
    torch.testing.assert_close(torch.tensor(kaio_losses), torch.tensor(torch_losses), rtol=1e-4, atol=1e-6)
    for p, q in zip(kaio_params, torch_params, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_custom_op_backward_gets_saved_arguments_and_output():
    seen = {}

    def grad(saved, g):
        seen.update(saved.__dict__)
        return g * 2 * saved.x, None  # d(x^2 * s)/dx with s a non-tensor argument: None

    @kaio.torch.custom_op("kaio_tests::square_scaled", mutates_args=(), fake=lambda x, s: torch.empty_like(x),
                          backward=grad)  # fmt: skip
    def square_scaled(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * x * s

    x = torch.randn(5, requires_grad=True)
    square_scaled(x, 3.0).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
    assert seen["s"] == 3.0 and torch.equal(seen["output"], x.detach() * x.detach() * 3.0)
    torch.library.opcheck(square_scaled._opoverload, (torch.randn(4, requires_grad=True), 2.0))


def test_custom_op_backward_errors():
    with pytest.raises(kaio.KaioTypeError, match=r"backward= needs an op that returns its results"):

        @kaio.torch.custom_op("kaio_tests::inplace_bw", mutates_args=("x",), backward=lambda saved, g: g)
        def inplace_bw(x: torch.Tensor) -> None:
            x.add_(1)

    with pytest.raises(kaio.KaioTypeError, match="backward must be a function"):
        kaio.torch.custom_op("kaio_tests::not_fn", mutates_args=(), backward=3)(lambda x: x)

    @kaio.torch.custom_op("kaio_tests::too_many", mutates_args=(), fake=lambda x: torch.empty_like(x),
                          backward=lambda saved, g: (g, g))  # fmt: skip
    def too_many(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    with pytest.raises(kaio.KaioTypeError, match=r"returned 2 gradients for 1 arguments"):
        too_many(torch.ones(2, requires_grad=True)).sum().backward()

    @kaio.torch.custom_op("kaio_tests::no_backward", mutates_args=(), fake=lambda x: torch.empty_like(x))
    def no_backward(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    y = no_backward(torch.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="no autograd formula"):  # torch's rule: never a silent drop
        y.sum().backward()
