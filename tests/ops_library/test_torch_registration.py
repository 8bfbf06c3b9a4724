"""The ``torch.ops.kaio`` custom ops are registered explicitly, once: importing a module (any of
``kaio.ops_library``) registers nothing; ``register_torch_ops()``, ``import kaio.torch`` or an
op's first call with torch tensors (eager or traced by ``torch.compile``) registers them all,
and more calls, from any number of threads, change nothing. Each case in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

PRELUDE = """
import sys, pkgutil, importlib, torch
import kaio.ops_library
from torch._library.custom_ops import OPDEFS

def kaio_ops():
    return sorted(name for name in OPDEFS if name.startswith("kaio::"))
"""


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_every_module_registers_nothing_until_asked_and_twice_is_harmless():
    out = _run(
        "for module in pkgutil.iter_modules(kaio.ops_library.__path__):\n"
        "    importlib.import_module(f'kaio.ops_library.{module.name}')\n"
        "assert 'kaio.ops_library.torch_ops' in sys.modules and 'kaio.torch' not in sys.modules\n"
        "assert kaio_ops() == [] and not hasattr(torch.ops.kaio, 'softmax'), kaio_ops()\n"
        "from kaio.ops_library import autograd\n"
        "assert not getattr(autograd.device_label, '_dynamo_marked_constant', False)  # marked by registering\n"
        "from kaio.ops_library.torch_registration import REGISTRATIONS, register_torch_ops\n"
        "register_torch_ops()\n"
        "first = kaio_ops()\n"
        "register_torch_ops()\n"
        "assert kaio_ops() == first and OPDEFS['kaio::softmax']._backward_fn is not None\n"
        "assert getattr(autograd.device_label, '_dynamo_marked_constant', False)\n"
        "assert len(REGISTRATIONS) == len(set(REGISTRATIONS))\n"
        "print(len(first), ' '.join(first))\n"
    )
    count, names = out.split(" ", 1)
    assert int(count) >= 30
    assert {"kaio::softmax", "kaio::matmul", "kaio::matmul_out", "kaio::attention", "kaio::dropout",
            "kaio::softmax_backward", "kaio::rms_norm_fwd", "kaio::gguf_matmul"} <= set(names.split())  # fmt: skip


def test_import_kaio_torch_registers_and_is_the_same_registration():
    out = _run(
        "import kaio.torch\n"
        "first = kaio_ops()\n"
        "from kaio.ops_library.torch_registration import register_torch_ops\n"
        "register_torch_ops()\n"
        "assert kaio_ops() == first\n"
        "print(len(first))\n"
    )
    assert int(out) >= 30


def test_registering_from_many_threads_at_once_registers_once():
    out = _run(
        "import threading\n"
        "from kaio.ops_library.torch_registration import register_torch_ops\n"
        "errors, start = [], threading.Barrier(8)\n"
        "def race():\n"
        "    start.wait()\n"
        "    try:\n"
        "        register_torch_ops()\n"
        "    except Exception as e:\n"
        "        errors.append(e)\n"
        "threads = [threading.Thread(target=race) for _ in range(8)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "assert errors == [], errors\n"
        "print(len(kaio_ops()))\n"
    )
    assert int(out) >= 30


def test_an_op_s_first_torch_call_registers_without_kaio_torch():
    out = _run(
        "x = torch.randn(4, 8)\n"
        "assert kaio_ops() == []\n"
        "y = kaio.ops_library.softmax(x)\n"
        "assert torch.allclose(y, torch.softmax(x, -1), atol=1e-6)\n"
        "assert 'kaio::softmax' in kaio_ops() and 'kaio.torch' not in sys.modules\n"
        "print('ok')\n"
    )
    assert out == "ok"


def test_a_first_call_traced_by_torch_compile_registers_without_kaio_torch():
    # Dynamo runs the import of the registration list and register_torch_ops (a constant to
    # it) while tracing; importlib it would not run, and fullgraph allows no break
    out = _run(
        "f = torch.compile(lambda x: kaio.ops_library.softmax(x) * 2, fullgraph=True, backend='eager')\n"
        "x = torch.randn(4, 8)\n"
        "assert torch.allclose(f(x), torch.softmax(x, -1) * 2, atol=1e-6)\n"
        "assert 'kaio::softmax' in kaio_ops() and 'kaio.torch' not in sys.modules\n"
        "print('ok')\n"
    )
    assert out == "ok"
