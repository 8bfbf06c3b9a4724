"""kaio ops inside torch.compile: library ops and user kernels as torch.library custom ops, traced
through their fake implementations with no graph break (CPU tensors: the simulator runs them)."""

import shutil
import textwrap

import pytest

import kaio

torch = pytest.importorskip("torch")
import kaio.torch  # noqa: E402  (registers torch.ops.kaio.*)
from kaio.ops_library import matmul  # noqa: E402

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
