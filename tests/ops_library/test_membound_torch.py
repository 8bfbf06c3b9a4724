"""The memory-bound ops inside torch.compile: torch tensors go through torch.ops.kaio custom ops,
traced by their fake implementations with no graph break (CPU tensors: the simulator runs them)."""

import pytest

torch = pytest.importorskip("torch")
import kaio.torch  # noqa: E402, F401  (registers torch.ops.kaio.*)
from kaio.ops_library import cross_entropy, gelu_and_mul, layer_norm, rms_norm, rope, softmax  # noqa: E402


def block(x, r, w, b, cos, sin, targets):
    y, h = rms_norm(x, w, residual=r)
    z = layer_norm(softmax(y), w, b)
    q = rope(z.view(1, 2, 2, 16), cos, sin, layout="bshd")
    g = gelu_and_mul(q.view(4, 16))
    return cross_entropy(g * 3.0, targets).sum() + h.sum()


def test_the_ops_trace_as_custom_ops_without_graph_breaks():
    x, r = torch.randn(4, 16), torch.randn(4, 16)
    w, b = torch.randn(16), torch.randn(16)
    cos, sin = torch.randn(2, 8), torch.randn(2, 8)
    targets = torch.tensor([1, 7, -100, 0])
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    eager = block(x, r, w, b, cos, sin, targets)
    got = torch.compile(block, fullgraph=True, backend=backend)(x, r, w, b, cos, sin, targets)
    assert len(graphs) == 1
    names = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    for op in ("add_rms_norm", "softmax", "layer_norm", "rope", "gated_activation", "cross_entropy"):
        assert f"kaio.{op}" in names or f"kaio.{op}.default" in names, (op, names)
    torch.testing.assert_close(got, eager)


def test_an_explicit_device_runs_the_op_directly():
    import kaio

    x = torch.randn(3, 8)
    torch.testing.assert_close(softmax(x, device=kaio.Device("sim")), torch.softmax(x, -1))
