"""Extending kaio without editing it: a user package (``kaio_demo_ext``: a dialect, an op, a
kernel builtin that is also a tile function, a pass and a PTX lowering, public API only) works
with ``kaio.compile``, dumps, ``kaio.load_ir`` and ``kaio-opt``: in this process through
``kaio.register_dialect`` / ``kaio.register_pass``, in a fresh one through the package's
``xdsl.universe`` entry point alone."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import kaio

HERE = Path(__file__).parent
N = 300


def install(root: Path, *, entry_point: bool) -> Path:
    """The package (and the kernels using it) in ``root``; with ``entry_point``, the metadata
    an installed distribution carries, so ``importlib.metadata`` finds its universe."""
    shutil.copytree(HERE / "kaio_demo_ext", root / "kaio_demo_ext")
    shutil.copy(HERE / "demo_kernels.py", root / "demo_kernels.py")
    if entry_point:
        dist = root / "kaio_demo_ext-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kaio-demo-ext\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text("[xdsl.universe]\ndemo = kaio_demo_ext:UNIVERSE\n")
    return root


@pytest.fixture(scope="module")
def ext(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    root = install(tmp_path_factory.mktemp("site"), entry_point=False)
    sys.path.insert(0, str(root))
    try:
        package = importlib.import_module("kaio_demo_ext")
        kernels = importlib.import_module("demo_kernels")
    finally:
        sys.path.remove(str(root))
    kaio.register_dialect(package.Demo)
    kaio.register_pass(package.FoldSaturate)
    return package, kernels


def _inputs(dev: kaio.Device) -> tuple[np.ndarray, kaio.Buffer, kaio.Buffer]:
    x = np.random.default_rng().standard_normal(N).astype(np.float32)
    return x, dev.alloc_from(x), dev.alloc_from(np.full(N, np.nan, np.float32))


def _want(x: np.ndarray) -> np.ndarray:
    return np.clip(2 * x, 0, 1)


@pytest.mark.parametrize("which", ["simt", "tile"])
def test_the_builtin_runs_in_simt_and_tile_kernels(ext, which: str):
    _, kernels = ext
    dev = kaio.Device("sim")
    x, xd, yd = _inputs(dev)
    if which == "simt":
        kernels.clamp_simt[kaio.cdiv(N, 128)](xd, yd, N)
    else:
        kernels.clamp_tile[kaio.cdiv(N, 128)](xd, yd, N, BLOCK=128)
    np.testing.assert_array_equal(yd.to_host(), _want(x))


def test_the_users_pass_runs_from_a_pipeline_string(ext):
    package, kernels = ext
    default = kernels.clamp_tile.default_pipeline("sm_80")
    folded = default.insert(package.FoldSaturate(), before="lower-to-ptx")
    plain = kaio.compile(kernels.clamp_tile, "sm_80", pipeline=default, BLOCK=128)
    by_name = kaio.compile(kernels.clamp_tile, "sm_80", pipeline=str(folded), BLOCK=128)
    assert "demo-fold-saturate" in str(folded)
    # the lowering gives one cvt.sat per saturate a thread applies: the pass halves them
    assert plain.ptx.count("cvt.sat.f32.f32") == 2 * by_name.ptx.count("cvt.sat.f32.f32") > 0


def test_a_dumped_stage_loads_back_and_runs(ext, tmp_path: Path):
    package, kernels = ext
    pipeline = kernels.clamp_simt.default_pipeline("sm_80").insert(package.FoldSaturate(), before="lower-to-ptx")
    kaio.compile(kernels.clamp_simt, "sm_80", pipeline=pipeline, dump_ir=tmp_path)
    (folder,) = tmp_path.iterdir()
    frontend = folder / "00-frontend.mlir"
    assert frontend.read_text().count("demo.saturate") == 2
    loaded = kaio.load_ir(frontend)  # the rest of the dumped pipeline, the user's pass included
    assert loaded.ptx.count("cvt.sat.f32.f32") == 1
    dev = kaio.Device("sim")
    x, xd, yd = _inputs(dev)
    loaded[kaio.cdiv(N, 128)](xd, yd, N)
    np.testing.assert_array_equal(yd.to_host(), _want(x))


def _fresh(root: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, env=env, check=False
    )


def _dump(ext, tmp_path: Path) -> Path:
    package, kernels = ext
    pipeline = kernels.clamp_simt.default_pipeline("sm_80").insert(package.FoldSaturate(), before="lower-to-ptx")
    kaio.compile(kernels.clamp_simt, "sm_80", pipeline=pipeline, dump_ir=tmp_path / "dump")
    (folder,) = (tmp_path / "dump").iterdir()
    return folder / "00-frontend.mlir"


_LOAD_AND_RUN = """
    import sys
    import numpy as np
    import kaio
    k = kaio.load_ir(sys.argv[1])
    dev = kaio.Device("sim")
    x = np.random.default_rng().standard_normal(300).astype(np.float32)
    y = dev.alloc_from(np.full(300, np.nan, np.float32))
    k[3](dev.alloc_from(x), y, 300)
    assert (y.to_host() == np.clip(2 * x, 0, 1)).all()
    print("ran", k.ptx.count("cvt.sat.f32.f32"))
"""


def test_kaio_opt_in_this_process_sees_the_registered_dialect_and_pass(ext, tmp_path: Path, capsys):
    from kaio.tools.kaio_opt import main

    stage = _dump(ext, tmp_path)
    main([str(stage), "-p", "demo-fold-saturate"])
    assert capsys.readouterr().out.count("demo.saturate") == 1


def test_a_fresh_process_finds_the_extension_by_its_entry_point(ext, tmp_path: Path):
    stage = _dump(ext, tmp_path)
    (tmp_path / "site").mkdir()
    root = install(tmp_path / "site", entry_point=True)
    opt = _fresh(root, "from kaio.tools.kaio_opt import main; main()", str(stage), "-p", "demo-fold-saturate")
    assert opt.returncode == 0, opt.stderr
    assert opt.stdout.count("demo.saturate") == 1
    loaded = _fresh(root, _LOAD_AND_RUN, str(stage))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["ran", "1"]


def test_without_an_entry_point_load_ir_names_the_unknown_op_until_registered(ext, tmp_path: Path):
    stage = _dump(ext, tmp_path)
    (tmp_path / "site").mkdir()
    root = install(tmp_path / "site", entry_point=False)
    refused = _fresh(root, "import sys, kaio\ntry:\n    kaio.load_ir(sys.argv[1])\nexcept kaio.KaioCompileError as e:\n    print(e)", str(stage))
    assert refused.returncode == 0, refused.stderr
    assert "demo.saturate" in refused.stdout and "cannot parse" in refused.stdout
    registered = "import kaio, kaio_demo_ext as d\nkaio.register_dialect(d.Demo)\nkaio.register_pass(d.FoldSaturate)\n"
    loaded = _fresh(root, registered + textwrap.dedent(_LOAD_AND_RUN), str(stage))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["ran", "1"]


def test_register_dialect_refuses_a_taken_name_and_what_is_not_a_dialect(ext):
    from xdsl.ir import Dialect

    package, _ = ext
    assert kaio.register_dialect(package.Demo) is package.Demo  # again: harmless
    with pytest.raises(kaio.KaioCompileError, match="'demo' is taken"):
        kaio.register_dialect(Dialect("demo", []))
    with pytest.raises(kaio.KaioCompileError, match="'arith' is taken"):
        kaio.register_dialect(Dialect("arith", []))
    with pytest.raises(kaio.KaioTypeError, match="must be an xdsl Dialect"):
        kaio.register_dialect("demo")  # type: ignore[arg-type]
