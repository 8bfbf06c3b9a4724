"""Kernels with vector loads run correctly, and refuse arrays too misaligned for them."""

import numpy as np
import pytest
from acceptance_kernels import scale4

import kaio


class View:
    """A CuPy-like array over simulator memory, starting ``offset`` bytes into an allocation."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3}


def test_vector_loads_compute_the_right_thing():
    dev = kaio.Device("sim")
    n4 = 150
    x = np.random.default_rng().standard_normal(4 * n4).astype(np.float32)
    xs, ys = dev.alloc_from(x), dev.alloc_from(np.full(4 * n4, np.nan, np.float32))
    scale4[kaio.cdiv(n4, 64)](xs, ys, 3.0, n4)
    np.testing.assert_allclose(ys.to_host(), x * np.float32(3.0), rtol=1e-6)
    assert "ld.global.v4.f32" in kaio.compile(scale4, dev.compile_arch).ptx


def test_a_misaligned_array_is_refused_before_launch():
    dev = kaio.Device("sim")
    n4 = 16
    memory = dev.simulator.memory
    base = memory.alloc(4 * (4 * n4 + 1))
    memory.write(base, np.zeros(4 * n4 + 1, np.float32))
    ys = dev.zeros(4 * n4, np.float32)
    with pytest.raises(kaio.KaioTypeError, match=r"parameter `?x`?.*16-byte vector loads"):
        scale4[1](View(base + 4, 4 * n4), ys, 1.0, n4)
    scale4[1](View(base, 4 * n4), ys, 1.0, n4)  # the aligned start of the same memory is fine


def test_a_misaligned_cpu_tensor_is_refused_on_the_simulator_as_on_a_gpu():
    """A CPU tensor is staged into simulator memory for the launch; the copy keeps its host
    address modulo 256, so a tensor 4 bytes off a 16-byte boundary is refused (on a GPU the
    vector loads would fault) instead of being realigned by the copy and running."""
    torch = pytest.importorskip("torch")
    dev = kaio.Device("sim")
    n4 = 16
    host = np.zeros(4 * n4 + 8, np.float32)
    start = (-host.ctypes.data % 16) // 4  # the first 16-byte aligned element
    x = np.random.default_rng().standard_normal(4 * n4).astype(np.float32)
    host[start : start + 4 * n4] = x
    aligned = torch.from_numpy(host[start : start + 4 * n4])
    off = torch.from_numpy(host[start + 1 : start + 1 + 4 * n4])
    assert aligned.data_ptr() % 16 == 0 and off.data_ptr() % 16 == 4
    ys = torch.full((4 * n4,), float("nan"))
    with pytest.raises(kaio.KaioTypeError, match=r"parameter `?x`?.*16-byte vector loads"):
        scale4.launch(dev, off, ys, 1.0, n4, grid=1)
    assert torch.isnan(ys).all()  # refused before anything ran
    scale4.launch(dev, aligned, ys, 2.0, n4, grid=1)
    np.testing.assert_allclose(ys.numpy(), 2 * x, rtol=1e-6)
