"""Every row op on views offset by one element (no row 16-byte aligned) at every row length of
the sweep, against torch in float64: the realigned 16-byte accesses (tile_language.md,
"Alignment") read and write exactly the view, nothing beside it (outputs poisoned; the
simulator faults on any access outside an allocation)."""

import math

import numpy as np
import pytest

from kaio.ops_library import cross_entropy, gelu_and_mul, layer_norm, log_softmax, rms_norm, silu_and_mul, softmax

from .conftest import ROW_LENGTHS, TOL, rel

torch = pytest.importorskip("torch")
F = torch.nn.functional


def offset(*shape, dtype):
    """A tensor of ``shape`` one element past the start of its storage (which ends with it)."""
    return torch.randn(math.prod(shape) + 1).to(dtype)[1:].view(*shape)


def check(got, want, dtype):
    assert rel(got, want.double().numpy()) <= TOL[dtype], dtype


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("cols", ROW_LENGTHS)
def test_every_row_op_on_offset_views(poison, dtype, cols):
    t = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    rows = 2 if cols > 64 else 5
    x, r, w, b = offset(rows, cols, dtype=t), offset(rows, cols, dtype=t), offset(cols, dtype=t), offset(cols, dtype=t)
    assert x.data_ptr() % 16 and w.data_ptr() % 16
    xd = x.double()
    check(softmax(x), torch.softmax(xd, -1), dtype)
    check(log_softmax(x), torch.log_softmax(xd, -1), dtype)
    check(layer_norm(x, w, b), F.layer_norm(xd, (cols,), w.double(), b.double()), dtype)
    y, h = rms_norm(x, w, residual=r)
    assert torch.equal(h, x + r)
    check(y, F.rms_norm(h.double(), (cols,), w.double(), 1e-6), dtype)
    g = offset(rows, 2 * cols, dtype=t)
    a, up = g.double()[..., :cols], g.double()[..., cols:]
    check(silu_and_mul(g), F.silu(a) * up, dtype)
    check(gelu_and_mul(g), F.gelu(a) * up, dtype)
    targets = torch.from_numpy(np.random.default_rng().integers(0, cols, rows))
    loss = cross_entropy(x, targets)
    want = F.cross_entropy(xd, targets, reduction="none")
    assert rel(loss, want.numpy()) <= TOL[dtype]
