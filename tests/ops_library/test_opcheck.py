"""``torch.library.opcheck`` on every ``torch.ops.kaio`` custom op: the schema, the fake
implementation against the real one, the autograd registration, and AOT dispatch with dynamic
shapes. Inputs require grad when the op has a backward (its gradients go through AOT autograd)."""

import contextlib

import pytest

torch = pytest.importorskip("torch")
import kaio.torch  # noqa: E402, F401

from kaio.ops_library.autograd import on_device  # noqa: E402

from . import torch_op_samples as samples  # noqa: E402

TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("name", samples.kaio_custom_ops())
def test_opcheck(name, rng):
    args = samples.custom_op_args(name, rng, requires_grad=samples.has_backward(name))
    op = getattr(torch.ops.kaio, name).default
    device = samples.CUSTOM_OP_DEVICES.get(name)  # an op the default simulator's arch lacks
    tests = tuple(t for t in TESTS if t not in samples.OPCHECK_SKIPS.get(name, ()))
    with on_device(device) if device is not None else contextlib.nullcontext():
        torch.library.opcheck(op, args, test_utils=tests)


def test_every_library_op_is_a_custom_op():
    """The ops routed through torch.ops.kaio (attention included, so torch.compile sees it)."""
    ops = set(samples.kaio_custom_ops())
    assert {"softmax", "layer_norm", "rms_norm", "add_rms_norm", "rope", "gated_activation",
            "cross_entropy", "matmul", "matmul_out", "attention"} <= ops, ops  # fmt: skip
