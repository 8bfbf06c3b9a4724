"""kaio-opt's input errors: each is one line on stderr naming the problem (with ``file:line:col``
for IR that does not parse), exit status 1, and no Python traceback; ``--traceback`` keeps the
traceback for a bug report. Happy paths print what they printed before."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import kaio
from kaio.prelude import Array, MutArray, f32, thread_idx_x, u32
from kaio.tools.kaio_opt import main

DEEP = 5000


@kaio.gpu_kernel(block_size=128)
def saxpy_kernel(x: Array[f32], y: MutArray[f32], a: f32, n: u32):
    i = thread_idx_x()
    if i < n:
        y[i] = a * x[i] + y[i]


def frontend_stage() -> str:
    """The kernel's IR as ``KAIO_DUMP_IR`` writes it before any pass."""
    stages: dict[str, str] = {}
    kaio.compile(saxpy_kernel, "sm_80", dump_ir=lambda stage, text: stages.setdefault(stage, text))
    return stages["frontend"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """kaio-opt in this process: (exit status, stdout, stderr)."""
    try:
        main(list(args))
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return status, out, err


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def saxpy(tmp_path: Path) -> str:
    return write(tmp_path, "saxpy.mlir", frontend_stage())


# Each case: the arguments (given the test's folder) and what the one line must contain (the
# path stands for the input file's path).
CASES: dict[str, tuple[Callable[[Path], list[str]], list[str]]] = {
    "missing file": (lambda d: [str(d / "missing.mlir")], ["{path}", "No such file or directory"]),
    "a directory": (lambda d: [str(d)], ["{path}", "Is a directory"]),
    "binary file": (
        lambda d: [write(d, "bin.mlir", b"\x00\xff\xfe\x80 garbage")],
        ["{path}", "not UTF-8 text (byte 0xff at offset 1)"],
    ),
    f"{DEEP}-deep nesting": (
        lambda d: [write(d, "deep.mlir", "builtin.module {" * DEEP + "}" * DEEP)],
        ["reading the input", "nested too deeply"],
    ),
    "a float literal that overflows": (
        lambda d: [write(d, "inf.mlir", "builtin.module { %0 = arith.constant 1.0e+99999 : f32 }")],
        ["{path}:1:38:", "1.0e+99999 overflows a 64-bit float"],
    ),
    "an overflowing element of a dense constant": (
        lambda d: [
            write(
                d,
                "dense.mlir",
                "builtin.module {\n  %0 = arith.constant dense<[1.0, -2.5e+400]> : tensor<2xf64>\n}",
            )
        ],
        ["{path}:2:36:", "2.5e+400 overflows"],
    ),
    "IR that does not parse": (
        lambda d: [write(d, "open.mlir", "builtin.module { %0 = arith.constant 1.0 : f32\n")],
        ["{path}:2:1:"],
    ),
    "an op refusing its operand types while parsing": (
        lambda d: [
            write(
                d,
                "types.mlir",
                "builtin.module {\n %0 = arith.constant 1 : i32\n %1 = arith.addf %0, %0 : i32\n}",
            )
        ],
        ["{path}:3:2:", "Unexpected attribute i32"],
    ),
    "IR that does not verify": (
        lambda d: [write(d, "verify.mlir", 'builtin.module { %0 = "arith.addi"() : () -> i32 }')],
        ["verifying the input:", "operand"],
    ),
    "a typo in a pass name": (
        lambda d: [saxpy(d), "-p", "canonicalise"],
        ["unknown pass 'canonicalise'", "did you mean 'canonicalize'"],
    ),
    "an unknown pass": (
        lambda d: [saxpy(d), "-p", "cse,frobnicate"],
        ["unknown pass 'frobnicate'", "--help"],
    ),
    "an empty pass between commas": (
        lambda d: [saxpy(d), "-p", "canonicalize,,cse"],
        ["malformed pass pipeline 'canonicalize,,cse' at column 14", "Expected pass name"],
    ),
    "an unfinished option": (
        lambda d: [saxpy(d), "-p", "lower-to-ptx{arch="],
        ["malformed pass pipeline 'lower-to-ptx{arch=' at column 19"],
    ),
    "options without a pass": (
        lambda d: [saxpy(d), "-p", "{}"],
        ["malformed pass pipeline '{}' at column 1"],
    ),
    "an unknown pass option": (
        lambda d: [saxpy(d), "-p", "lower-to-ptx{foo=1}"],
        ["pass pipeline 'lower-to-ptx{foo=1}'", '"foo"', '"arch"'],
    ),
    "an unknown arch": (
        lambda d: [saxpy(d), "-p", "lower-to-ptx{arch=sm_1}"],
        ["in pass 'lower-to-ptx':", "unknown GPU architecture 'sm_1'"],
    ),
    "ptx of a module never lowered": (
        lambda d: [saxpy(d), "-t", "ptx"],
        ["target 'ptx':", "`kernel.func` unlowered", "lower-to-ptx"],
    ),
    "ptx of a module lowered only partly": (
        lambda d: [saxpy(d), "-p", "cse", "-t", "ptx"],
        ["`kernel.func` unlowered after pass 'cse'"],
    ),
    "ptx of an empty module": (
        lambda d: [write(d, "empty.mlir", "builtin.module {\n}\n"), "-t", "ptx"],
        ["no ptx.entry"],
    ),
}


@pytest.mark.parametrize("make_args, expected", CASES.values(), ids=CASES.keys())
def test_an_input_error_is_one_line_and_exit_1(
    make_args: Callable[[Path], list[str]],
    expected: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = make_args(tmp_path)
    status, out, err = run(capsys, *args)
    assert status == 1, err
    assert out == "", "nothing is printed for an input that failed"
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kaio-opt: error: "), err
    for fragment in expected:
        assert fragment.replace("{path}", args[0]) in lines[0], lines[0]


def test_traceback_keeps_the_python_traceback(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        main([str(tmp_path / "missing.mlir"), "--traceback"])


def test_the_happy_paths_print_what_they_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Byte-identical replays of kaio.compile are tests/kaio/test_kaio_opt.py's; here: the
    overrides (frontend, pipeline tracking, the ptx check) pass sound input through."""
    path = saxpy(tmp_path)
    status, out, err = run(capsys, path)
    assert (status, err) == (0, "") and "kernel.func @saxpy_kernel" in out
    args = [path, "-p", "canonicalize,cse,lower-to-ptx{arch=sm_80}", "-t", "ptx"]
    status, out, err = run(capsys, *args)
    assert (status, err) == (0, "") and ".visible .entry saxpy_kernel(" in out
    assert "fma.rn.f32" in out or "mul.rn.f32" in out
    finite = "builtin.module {\n  %0 = arith.constant 3.4028234663852886e+38 : f32\n}"
    status, out, err = run(capsys, write(tmp_path, "finite.mlir", finite))
    assert (status, err) == (0, "") and "arith.constant" in out


def test_the_installed_tool_prints_one_line(tmp_path: Path) -> None:
    exe = shutil.which("kaio-opt", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("kaio-opt is not installed in this environment")
    proc = subprocess.run(
        [exe, str(tmp_path / "missing.mlir")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"kaio-opt: error: {tmp_path / 'missing.mlir'}: No such file or directory"
    ]
