"""kaio.aot.export and kaio-aot: the files, the C they hold (gcc -Wall -Werror against the
wheel's cuda.h), the manifest, and bad input (a kaio error naming the argument, nothing written)."""

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kaio.aot import export
from kaio.aot.c_expressions import evaluate, to_c
from kaio.errors import KaioError, KaioTargetError, KaioTypeError
from kaio.ops_library import matmul
from kaio.tools import kaio_aot

sys.path.insert(0, str(Path(__file__).parent))
import aot_kernels  # noqa: E402
from fake_cuda import GCC, WARNINGS, need_gcc  # noqa: E402



def compile_c(source: Path, tmp: Path) -> subprocess.CompletedProcess:
    gcc, include = need_gcc()
    # -isystem: cuda.h itself uses unnamed unions, which -pedantic C99 flags; the generated code does not
    return subprocess.run([gcc, *WARNINGS, "-fPIC", "-c", "-isystem", str(include), str(source),
                           "-o", str(tmp / (source.stem + ".o"))], capture_output=True, text=True)  # fmt: skip


def test_simt_kernel_files_and_c(tmp_path):
    files = export(aot_kernels.saxpy, tmp_path, arch=("sm_80", "sm_90a"), grid=("cdiv(n, 128)",), cubin=False, rust=True)
    names = sorted(p.name for p in files)
    assert names == sorted(["saxpy.h", "saxpy.c", "saxpy.json", "saxpy.rs", "saxpy_sm_90a_0.ptx", "saxpy_sm_80_1.ptx"])
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # nothing else (no staging folder)
    manifest = json.loads((tmp_path / "saxpy.json").read_text())
    assert manifest["launch"] == "saxpy_launch" and manifest["grid_rule"] == ["cdiv(n, 128)"]
    v80 = manifest["variants"][1]
    assert v80["arch"] == "sm_80" and v80["block"] == [128, 1, 1] and v80["cubin"] is None
    assert [p["name"] for p in v80["params"]] == ["x", "y", "alpha", "n"]
    assert (tmp_path / v80["ptx"]).read_text().startswith("//") or ".entry saxpy" in (tmp_path / v80["ptx"]).read_text()
    header = (tmp_path / "saxpy.h").read_text()
    assert "CUresult saxpy_launch(CUstream stream, const unsigned int grid[3], CUdeviceptr x, CUdeviceptr y, float alpha, uint32_t n);" in header
    result = compile_c(tmp_path / "saxpy.c", tmp_path)
    assert result.returncode == 0, result.stderr


def test_tile_kernel_and_matmul_compile_warning_free(tmp_path):
    tile = export(aot_kernels.bias_gelu, tmp_path / "tile", arch=("sm_80", "sm_90a"), grid=aot_kernels.BIAS_GELU_GRID,
                  specialization=[[("cols", 64)], None], cubin=False)  # fmt: skip
    assert sum(p.suffix == ".ptx" for p in tile) == 4
    mm = export(matmul, tmp_path / "mm", arch=("sm_80", "sm_90a"), cubin=False)
    manifest = json.loads((tmp_path / "mm" / "matmul.json").read_text())
    hopper = manifest["variants"][0]
    assert hopper["arch"] == "sm_90a" and len(hopper["tensor_maps"]) == 3 and hopper["dynamic_shared_bytes"] > 48 * 1024
    assert manifest["grid_rule"] == ["cdiv(m, BM) * cdiv(n, BN)"]
    for c_file in (tmp_path / "tile" / "bias_gelu.c", tmp_path / "mm" / "matmul.c"):
        result = compile_c(c_file, tmp_path)
        assert result.returncode == 0, result.stderr
    assert "cuTensorMapEncodeTiled" in (tmp_path / "mm" / "matmul.c").read_text()
    assert any(p.name == "matmul.h" for p in mm)


def test_cubin_where_ptxas_is_installed(tmp_path):
    from kaio.targets.ptx.toolchain import find_ptxas

    if find_ptxas() is None:
        with pytest.raises(KaioError, match="ptxas"):
            export(aot_kernels.saxpy, tmp_path, cubin=True)
        return
    files = export(aot_kernels.saxpy, tmp_path, arch="sm_80", cubin=True)
    cubin = next(p for p in files if p.suffix == ".cubin")
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert "kaio_cubin_0" in (tmp_path / "saxpy.c").read_text()


@pytest.mark.parametrize("arguments, error, words", [
    (dict(arch="sm_99"), KaioTargetError, "`arch`"),
    (dict(arch=("sm_80", "80")), KaioTypeError, "`arch`"),
    (dict(constexprs={"R": "sixteen"}), KaioError, "R"),
    (dict(constexprs={"NOPE": 3}), KaioError, "NOPE"),
    (dict(specialization=[("nope", 16)]), KaioError, "nope"),
    (dict(name="bad-name"), KaioTypeError, "`name`"),
    (dict(grid=("cdiv(rows, Q)",)), KaioTypeError, "grid"),
    (dict(grid=("rows.bit_length()",)), KaioTypeError, "grid"),
])  # fmt: skip
def test_bad_input_names_the_argument_and_writes_nothing(tmp_path, arguments, error, words):
    out = tmp_path / "out"
    with pytest.raises(error, match=words.replace("(", r"\(").replace("`", "`")):
        export(aot_kernels.bias_gelu, out, **{"grid": aot_kernels.BIAS_GELU_GRID, "cubin": False, **arguments})
    assert not out.exists()


def test_unwritable_out_dir_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(KaioError, match="`out_dir`"):
        export(aot_kernels.saxpy, blocker / "out", cubin=False)
    assert sorted(tmp_path.iterdir()) == [blocker]


def test_split_k_matmul_is_refused(tmp_path):
    kernel = matmul.aot_kernel("sm_80")
    from dataclasses import replace

    split = replace(kernel, config=kernel.config.with_split_k(2))
    with pytest.raises(KaioTypeError, match="split"):
        export(split, tmp_path / "out", cubin=False)
    assert not (tmp_path / "out").exists()


def test_expressions_in_c_agree_with_python(tmp_path):
    """The C translation of grid rules and tensor-map recipes floors as Python does."""
    texts = ["cdiv(a, b) * 3 - a // b", "min(a, b) + max(a - 7, -b)", "-(a + 5) // (b - 2)", "(a * b) // 7"]
    rng = random.Random(0)
    cases = [(rng.randint(-500, 500), rng.choice([v for v in range(-40, 41) if v not in (0, 2)])) for _ in range(60)]
    if GCC is None:
        pytest.skip("needs gcc")
    from kaio.aot.c_expressions import helpers_for

    body = "\n".join(f"    printf(\"%lld\\n\", (long long){to_c(t, ['a', 'b'], what='t', calls=True)});" for t in texts)
    code = ("#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n" + helpers_for(body) +
            "int main(int argc, char **argv) {\n    int64_t a = atoll(argv[1]), b = atoll(argv[2]);\n"
            f"    (void)argc;\n{body}\n    return 0;\n}}\n")  # fmt: skip
    (tmp_path / "e.c").write_text(code)
    subprocess.run([GCC, *WARNINGS, str(tmp_path / "e.c"), "-o", str(tmp_path / "e")], check=True)
    for a, b in cases:
        out = subprocess.run([str(tmp_path / "e"), str(a), str(b)], capture_output=True, text=True, check=True)
        assert [int(v) for v in out.stdout.split()] == [evaluate(t, {"a": a, "b": b}) for t in texts], (a, b)


def test_cli_writes_and_fails_in_one_line(tmp_path, capsys):
    kernels = str(Path(aot_kernels.__file__))
    kaio_aot.main([f"{kernels}:bias_gelu", "--arch", "sm_80", "--constexpr", "C=32", "--fact", "cols=32",
                   "--grid", "cdiv(rows, R)", "--grid", "cdiv(cols, C)", "--out", str(tmp_path / "o"), "--no-cubin"])  # fmt: skip
    printed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in printed) == ["bias_gelu.c", "bias_gelu.h", "bias_gelu.json", "bias_gelu_sm_80_0.ptx"]
    manifest = json.loads((tmp_path / "o" / "bias_gelu.json").read_text())
    assert manifest["variants"][0]["constexprs"]["C"] == 32 and manifest["variants"][0]["facts"] == [["cols", 32]]
    with pytest.raises(SystemExit) as exit_info:
        kaio_aot.main([f"{kernels}:nothing", "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kaio-aot: error:" in err and "nothing" in err
    assert not (tmp_path / "x").exists()


def test_rust_module_type_checks(tmp_path):
    rustc = shutil.which("rustc") or shutil.which("rustc", path=str(Path.home() / ".cargo" / "bin"))
    if rustc is None:
        pytest.skip("needs rustc")
    export(matmul, tmp_path, arch=("sm_80", "sm_90a"), cubin=False, rust=True)
    text = (tmp_path / "matmul.rs").read_text()
    assert "pub unsafe fn launch(stream: CUstream, grid: Option<[u32; 3]>, a: CUdeviceptr" in text
    result = subprocess.run([rustc, "--edition", "2021", "--crate-type", "lib", "--emit", "metadata", "-D", "warnings",
                             "--out-dir", str(tmp_path), str(tmp_path / "matmul.rs")], capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
