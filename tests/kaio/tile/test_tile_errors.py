"""Bad tile kernels get a KaioCompileError at the user's line naming both shapes or types;
bad launches the same KaioTypeError/KaioLaunchError as gpu kernels."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kaio
from kaio.errors import KaioCompileError, KaioLaunchError, KaioTypeError

_counter = itertools.count()


def define(tmp_path: Path, body: str, decorator: str = "@kaio.tile_kernel(num_warps=4)"):  # type: ignore[no-untyped-def]
    """Decorate a kernel written in a fresh file (the frontend reads the source)."""
    name = f"tile_error_case_{next(_counter)}"
    path = tmp_path / f"{name}.py"
    code = "import kaio\nimport kaio.tile as kt\nfrom kaio.prelude import *\n\n" + decorator + "\n" + textwrap.dedent(body)
    path.write_text(code)
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


CASES = {
    "dot shapes": (
        """
        def k(a: Array[f16], c: MutArray[f32], n: i32):
            x = kt.load(a, (0, 0), (32, 16), (n, n))
            y = kt.load(a, (0, 0), (32, 16), (n, n))
            acc = kt.dot(x, y, kt.zeros((32, 16), f32))
        """,
        r"kt.dot of A \(32, 16\) and B \(32, 16\)",
        "acc = kt.dot(x, y",
    ),
    "elementwise shapes": (
        """
        def k(a: Array[f32], c: MutArray[f32], n: i32):
            x = kt.load(a, (0, 0), (32, 16), (n, n))
            y = kt.load(a, (0, 0), (16, 32), (n, n))
            kt.store(c, (0, 0), x + y, (n, n))
        """,
        r"tiles of shapes \(32, 16\) and \(16, 32\) do not broadcast",
        "x + y",
    ),
    "broadcast_to": (
        """
        def k(a: Array[f32], c: MutArray[f32], n: i32):
            x = kt.load(a, (0,), (32,), (n,))
            kt.store(c, (0, 0), kt.broadcast_to(x, (32, 64)), (n, n))
        """,
        r"\(32,\) and \(32, 64\) do not broadcast",
        "kt.broadcast_to",
    ),
    "store shape": (
        """
        def k(a: Array[f32], c: MutArray[f32], n: i32):
            x = kt.load(a, (0, 0), (32, 32), (n, n))
            kt.store(c, (0,), x, (n,))
        """,
        r"offsets needs 2 value",
        "kt.store(c, (0,), x, (n,))",
    ),
    "non power of two": (
        """
        def k(a: Array[f32], n: i32):
            x = kt.load(a, (0,), (100,), (n,))
        """,
        r"tile dims must be powers of two, got \(100,\)",
        "(100,)",
    ),
    "dtype mix": (
        """
        def k(a: Array[f16], b: Array[f32], c: MutArray[f32], n: i32):
            x = kt.load(a, (0,), (64,), (n,))
            y = kt.load(b, (0,), (64,), (n,))
            kt.store(c, (0,), x + y, (n,))
        """,
        r"f16.*f32|f32.*f16",
        "x + y",
    ),
    "too large": (
        """
        def k(a: Array[f32], n: i32):
            x = kt.zeros((512, 512), f32)
        """,
        r"more than the 65536",
        "kt.zeros((512, 512), f32)",
    ),
    "store type": (
        """
        def k(a: Array[f32], c: MutArray[f16], n: i32):
            x = kt.load(a, (0,), (64,), (n,))
            kt.store(c, (0,), x, (n,))
        """,
        r"cannot store a tile<64xf32> into `c` of f16",
        "kt.store(c, (0,), x, (n,))",
    ),
    "read-only store": (
        """
        def k(a: Array[f32], n: i32):
            kt.store(a, (0,), kt.zeros((64,), f32), (n,))
        """,
        r"cannot write to `a`",
        "kt.store(a",
    ),
    "dot accumulator type": (
        """
        def k(a: Array[f16], n: i32):
            x = kt.load(a, (0, 0), (16, 16), (n, n))
            y = kt.dot(x, x, kt.zeros((16, 16), f16))
        """,
        r"accumulates in f32",
        "kt.dot(x, x",
    ),
    "tile condition": (
        """
        def k(a: Array[f32], n: i32):
            x = kt.load(a, (0,), (64,), (n,))
            y = x if x > 0.0 else 0.0
        """,
        r"kt.where",
        "x if x > 0.0 else 0.0",
    ),
    "reduction axis": (
        """
        def k(a: Array[f32], n: i32):
            x = kt.load(a, (0,), (64,), (n,))
            s = kt.sum(x, 1)
        """,
        r"axis must be a compile-time int in range",
        "kt.sum(x, 1)",
    ),
    "gather index type": (
        """
        def k(a: Array[f32], n: i32):
            x = kt.load(a, (0,), (64,), (n,))
            y = kt.load(a, x)
        """,
        r"indices are i32 or u32 tiles, got tile<64xf32>",
        "kt.load(a, x)",
    ),
    "tile used in the SIMT language": (
        """
        def k(a: Array[f32], n: u32):
            x = kt.load(a, (0,), (64,), (n,))
        """,
        r"only be used in a @kaio.tile_kernel",
        "kt.load",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_tile_kernels_point_at_the_line(tmp_path, case):
    body, message, snippet = CASES[case]
    decorator = "@kaio.gpu_kernel" if "SIMT" in case else "@kaio.tile_kernel(num_warps=4)"
    with pytest.raises(KaioCompileError, match=message) as info:
        define(tmp_path, body, decorator)
    text = str(info.value)
    assert snippet in text and ".py:" in text  # file:line:col, then the source line


@pytest.mark.parametrize("option", ["num_warps=3", "num_warps=64", "num_stages=-1", "num_warps='4'"])
def test_bad_decorator_options(tmp_path, option):
    with pytest.raises(KaioCompileError, match=option.split("=")[0]):
        define(tmp_path, "def k(a: Array[f32]):\n    pass\n", f"@kaio.tile_kernel({option})")


def test_bad_launches_are_refused_before_running(tmp_path):
    module = define(
        tmp_path,
        """
        def k(a: Array[f32], c: MutArray[f32], n: i32):
            kt.store(c, (0,), kt.load(a, (0,), (64,), (n,)), (n,))
        """,
    )
    dev = kaio.Device("sim")
    a = dev.alloc_from(np.zeros(64, np.float32))
    c = dev.alloc_from(np.zeros(64, np.float32))
    with pytest.raises(KaioTypeError, match="parameter `n"):
        module.k[1](a, c, 2.5)
    with pytest.raises(KaioTypeError, match="parameter `a"):
        module.k[1](dev.alloc_from(np.zeros(64, np.float16)), c, 64)
    with pytest.raises(KaioTypeError, match="parameter `c"):
        module.k[1](a, 3, 64)
    with pytest.raises(KaioLaunchError):
        module.k[0](a, c, 64)
