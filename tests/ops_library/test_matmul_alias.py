"""``matmul(a, b, out=a)``: an output that shares memory with an input is refused before launch
(the kernel would read tiles it already overwrote; before the check it ran silently)."""

import numpy as np
import pytest

import kaio
from kaio.ops_library import matmul


@pytest.mark.parametrize("which", ["a", "b"])
def test_out_aliasing_a_device_input_is_refused(dev: kaio.Device, which: str) -> None:
    a = dev.alloc_from(np.eye(16, dtype=np.float32))
    b = dev.alloc_from(np.eye(16, dtype=np.float32))
    with pytest.raises(kaio.KaioTypeError, match=f"`out` overlaps `{which}`"):
        matmul(a, b, out=a if which == "a" else b)


def test_out_aliasing_a_host_input_is_refused(dev: kaio.Device) -> None:
    a = np.eye(16, dtype=np.float32)
    with pytest.raises(kaio.KaioTypeError, match="`out` overlaps `a`"):
        matmul(a, np.eye(16, dtype=np.float32), out=a, device=dev)


def test_a_separate_out_still_works(dev: kaio.Device) -> None:
    a = np.arange(256, dtype=np.float32).reshape(16, 16) / 256
    out = np.zeros((16, 16), np.float32)
    matmul(a, np.eye(16, dtype=np.float32), out=out, device=dev)
    np.testing.assert_allclose(out, a, rtol=1e-6)
