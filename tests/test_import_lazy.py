"""``import kaio`` and ``import kaio.ops_library`` load nothing heavy (xDSL, cuda-python, numpy,
torch, the op modules) until a name is used, and every public name still resolves to what it
named when the package imported its ops eagerly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("xdsl", "cuda", "numpy", "torch", "ml_dtypes", "triton", "kaio.ops_library.", "kaio.frontend",
         "kaio.runtime", "kaio.dialects", "kaio.passes", "kaio.targets")  # fmt: skip


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_importing_the_packages_loads_no_heavy_module():
    out = _run("import json, sys, kaio, kaio.ops_library; print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(out)
    heavy = [m for m in loaded if m.startswith(HEAVY) or m in ("cuda", "numpy", "xdsl")]
    assert heavy == []
    assert "kaio.ops_library" in loaded and "kaio.dtypes" in loaded  # the check itself sees them


def test_a_name_loads_its_module_on_first_use_and_ops_stay_ops_beside_their_modules():
    out = _run(
        "import sys, kaio.ops_library as ops\n"
        "assert 'kaio.ops_library.softmax' not in sys.modules\n"
        "f = ops.softmax\n"
        "assert 'kaio.ops_library.softmax' in sys.modules and callable(f) and f.__module__ == 'kaio.ops_library.softmax'\n"
        "import kaio.ops_library.matmul_kernel  # imports the module `matmul`: the name stays the op\n"
        "from kaio.ops_library.matmul import Matmul\n"
        "assert isinstance(ops.matmul, Matmul), ops.matmul\n"
        "from kaio.ops_library import attention, Attention, rows\n"
        "assert isinstance(attention, Attention) and rows.__name__ == 'kaio.ops_library.rows'\n"
        "print('ok')\n"
    )
    assert out.strip() == "ok"


def test_every_public_name_resolves_and_unknown_names_raise_attribute_error():
    import kaio.ops_library as ops

    for name in ops.__all__:
        value = getattr(ops, name)
        assert not isinstance(value, type(sys)), f"{name} is a module"
        assert name in dir(ops)
    with pytest.raises(AttributeError, match="no_such_op"):
        ops.no_such_op  # noqa: B018
    with pytest.raises(ImportError):
        from kaio.ops_library import no_such_op  # noqa: F401


def test_the_dtype_helpers_work_with_and_without_numpy_loaded():
    out = _run(
        "import sys, kaio\n"
        "from kaio import dtypes\n"
        "assert dtypes.is_int_value(3) and not dtypes.is_int_value(True) and not dtypes.is_int_value(3.0)\n"
        "assert 'numpy' not in sys.modules\n"
        "import numpy as np\n"
        "assert dtypes.is_int_value(np.int64(3)) and not dtypes.is_int_value(np.bool_(True))\n"
        "assert dtypes.from_numpy(np.float16) is dtypes.f16 and type(dtypes.f32(1.5)) is np.float32\n"
        "print('ok')\n"
    )
    assert out.strip() == "ok"


def test_a_disk_cache_hit_in_a_fresh_process_imports_no_pass(tmp_path):
    # the key is made from the default pipeline's text: nothing under kaio.passes but the
    # registry package and the lowering table loads before the cache answers
    code = (
        "import json, sys, kaio\n"
        "from kaio import dtypes\n"
        "from kaio.ops_library.matmul_config import DEFAULT_CONFIG\n"
        "from kaio.ops_library.matmul_kernel import MatmulKernel\n"
        "kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG)\n"
        "compiled = kaio.compile(kernel, 'sm_80')\n"
        "print(json.dumps([compiled.ptx.count('mma.sync'), sorted(sys.modules)]))\n"
    )
    env = {**__import__("os").environ, "KAIO_CACHE": "1", "KAIO_CACHE_DIR": str(tmp_path)}

    def run() -> tuple[int, list[str]]:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
        assert proc.returncode == 0, proc.stderr
        return tuple(json.loads(proc.stdout))  # type: ignore[return-value]

    cold_mma, cold = run()
    hit_mma, hit = run()
    assert hit_mma == cold_mma > 0
    # the check itself: the cold compile loaded the passes and the lowering rules
    assert "kaio.passes.tile_layout" in cold and "kaio.passes.to_ptx.mma_sync" in cold
    loaded = [m for m in hit if m.startswith("kaio.passes.") and m != "kaio.passes.to_ptx"]
    assert loaded == [] and "ml_dtypes" not in hit
    assert "importlib.metadata" not in hit  # no entry points read: every pass named is kaio's or xDSL's
    # nor the compile itself, the ptx dialect or its printer
    assert not {"kaio.module_compiler", "kaio.dialects.ptx", "kaio.targets.ptx.printer"} & set(hit)
    assert {"kaio.module_compiler", "kaio.dialects.ptx"} <= set(cold)
