"""torch and kaio on a real GPU (``pytest -m gpu``): ordering with torch's work on a non-default
stream, CUDA graphs captured by torch and by kaio. Skipped without a driver or a CUDA torch."""

from __future__ import annotations

import numpy as np
import pytest
from acceptance_kernels import saxpy, vector_add

import kaio
from kaio.runtime import driver

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not driver.available(), reason="no CUDA driver on this machine"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch has no CUDA device"),
]


def test_ordering_with_torch_ops_on_a_side_stream_without_synchronising() -> None:
    n = 1 << 22
    stream = torch.cuda.Stream()
    x = torch.empty(n, device="cuda")
    y = torch.empty(n, device="cuda")
    vector_add[kaio.cdiv(n, 256)](x, x, y, n)  # compile and load first
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for step in range(20):
            x.fill_(float(step))  # torch, on the side stream
            y.copy_(x * 3)  # a slow-ish torch op between
            saxpy[kaio.cdiv(n, 256)](x, y, 2.0, n)  # kaio: must see both, on the same stream
            y.mul_(0.5)  # torch again: must see kaio's result
    stream.synchronize()
    assert torch.all(y == 0.5 * (3 * 19 + 2 * 19)).item()


def test_torch_cuda_graph_of_100_kaio_launches_replays() -> None:
    n = 4096
    x = torch.ones(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    saxpy[kaio.cdiv(n, 256)](x, y, 1.0, n)  # warm up outside capture
    torch.cuda.synchronize()
    y.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(100):
            saxpy[kaio.cdiv(n, 256)](x, y, 1.0, n)
    torch.cuda.synchronize()
    assert torch.all(y == 0).item(), "capture records, it does not run"
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.all(y == 200).item()


def test_kaio_capture_of_100_launches_replays() -> None:
    dev = kaio.Device(0)
    n = 4096
    x = dev.alloc_from(np.ones(n, np.float32))
    y = dev.zeros(n, np.float32)
    saxpy[kaio.cdiv(n, 256)](x, y, 1.0, n)
    y = dev.zeros(n, np.float32)
    with dev.capture() as graph:
        for _ in range(100):
            saxpy[kaio.cdiv(n, 256)](x, y, 1.0, n)
    assert graph.launches == 100
    graph.replay()
    dev.synchronize()
    assert (y.to_host() == 100).all()


def test_matmul_on_cuda_tensors_returns_cuda_tensors() -> None:
    from kaio.ops_library import matmul

    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 192, device="cuda", dtype=torch.bfloat16)
    c = matmul(a, b)
    assert c.device == a.device and c.dtype == torch.float32
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    compiled = torch.compile(lambda a, b: torch.relu(matmul(a, b)) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(a, b), torch.relu(c) * 2)
