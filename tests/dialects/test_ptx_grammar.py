"""The ptx verifier's modifier grammar (kaio.dialects.ptx_grammar) against ptxas: every recorded
instruction (ptx_grammar_cases.txt) is accepted or refused by the verifier as ptxas does, and
the recorded verdicts are ptxas' own (re-asked where a ptxas is installed, as in CI)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from xdsl.dialects.builtin import f32, f64, i1, i16, i32, i64
from xdsl.utils.exceptions import VerifyException

import kaio
from kaio.dialects import ptx
from kaio.errors import KaioCompileError
from kaio.targets.ptx import toolchain
from kaio.tools.kaio_opt import main as kaio_opt

CASES_FILE = Path(__file__).with_name("ptx_grammar_cases.txt")
CASES = [
    (line[7:], line[:7].strip())
    for line in CASES_FILE.read_text().splitlines()
    if line and not line.startswith("#")
]
_OPS = {op.name: op for op in ptx.Ptx.operations}
_REGISTERS = {"%fd": f64, "%rd": i64, "%f": f32, "%r": i32, "%h": i16, "%p": i1}


def _value(token: str):
    for prefix, t in _REGISTERS.items():
        if token.startswith(prefix) and token[len(prefix):].isdigit():
            return ptx.RegOp(t).result
    return ptx.ConstOp(int(token), i32).result


def build(line: str) -> ptx.PtxInstr:
    """The ptx op of one PTX line: its mnemonic's op class, the spec, a fresh register per
    operand (``{..}`` groups and ``[..]`` addresses flattened); the first operand is the
    result, except for a store."""
    opcode, _, rest = line.partition(" ")
    mnemonic, _, spec = opcode.partition(".")
    operands = [
        [t.strip() for t in group.strip("{}[]").split(",")]
        for group in re.findall(r"\{[^}]*\}|\[[^\]]*\]|[^,\s]+", rest)
    ]
    if mnemonic == "st":
        outs, srcs = [], [t for group in operands for t in group]
    else:
        outs, srcs = operands[0], [t for group in operands[1:] for t in group]
    return _OPS[f"ptx.{mnemonic}"](spec, [_value(t) for t in srcs], [_value(t).type for t in outs])


def verifies(line: str) -> bool:
    try:
        build(line).verify()
    except VerifyException:
        return False
    return True


def test_the_cases_cover_each_family_and_both_verdicts():
    verdicts = {v for _, v in CASES}
    assert verdicts == {"ok", "err", "strict"}
    families = {line.split(".")[0] for line, _ in CASES}
    assert {"add", "mul", "mad", "fma", "div", "cvt", "setp", "ld", "st", "rcp", "ex2"} <= families
    assert len(CASES) > 200


@pytest.mark.parametrize("line, verdict", CASES, ids=[line for line, _ in CASES])
def test_verifier_agrees_with_ptxas(line: str, verdict: str):
    assert verifies(line) == (verdict == "ok"), f"ptxas: {verdict}"


def test_the_recorded_verdicts_are_ptxas_own():
    ptxas = toolchain.find_ptxas()
    if ptxas is None:
        pytest.skip("no ptxas installed (the test extras bring one)")
    head = [
        ".version 8.5",
        ".target sm_90a",
        ".address_size 64",
        ".visible .entry k() {",
        ".reg .b16 %h<9>; .reg .b32 %r<9>; .reg .f32 %f<9>; .reg .b64 %rd<9>; .reg .f64 %fd<9>; .reg .pred %p<3>;",
        "mov.u64 %rd1, 0;",
    ]
    source = "\n".join([*head, *(f"{line};" for line, _ in CASES), "ret;", "}", ""])
    out = subprocess.run(
        [str(ptxas), "-arch=sm_90a", "-o", "/dev/null", "-"], input=source,
        capture_output=True, text=True, check=False,
    )
    # ptxas reports every refused line (several errors per line at times) and goes on
    refused = {int(n) - len(head) - 1 for n in re.findall(r"line (\d+); error", out.stderr)}
    assert out.returncode != 0 and refused
    wrong = [
        (line, verdict)
        for i, (line, verdict) in enumerate(CASES)
        if (i in refused) != (verdict == "err")
    ]
    assert not wrong, wrong


@pytest.mark.parametrize(
    "line, message",
    [
        ("mul.lo.f32 %f1, %f2, %f3", r"mul\.lo\.f32: \.lo does not apply to \.f32"),
        ("add.rn.s32 %r1, %r2, %r3", r"add\.rn\.s32: \.rn does not apply to \.s32"),
        ("ld.global.v8.f32 {%f1,%f2,%f3,%f4,%f5,%f6,%f7,%f8}, [%rd1]", r"ld\.global\.v8\.f32: unknown modifier"),
        ("ld.global.v4.f64 {%fd1,%fd2,%fd3,%fd4}, [%rd1]", r"ld\.global\.v4\.f64: a vector access moves at most 128 bits"),
        ("mul.u32 %r1, %r2, %r3", r"mul\.u32: \.u32 needs exactly one of \.hi/\.lo/\.wide"),
        ("ld.global.shared.f32 %f1, [%rd1]", r"one state space"),
        ("cvt.rn.s32.f32 %r1, %f1", r"takes an integer rounding"),
    ],
)
def test_planted_spec_is_refused_naming_the_instruction(line: str, message: str):
    with pytest.raises(VerifyException, match=message):
        build(line).verify()


PLANTED_MODULE = """builtin.module {
  ptx.entry @k params ["k_a"] types ["f32"] maxntid array<i32: 32, 1, 1> {
    %0 = ptx.ld param.f32 [@k_a] : () -> (f32)
    %1 = ptx.mul lo.f32 %0, %0 : (f32, f32) -> (f32)
    ptx.ret : () -> ()
  }
}
"""


def test_load_ir_refuses_a_planted_spec_naming_it():
    with pytest.raises(KaioCompileError, match=r"does not verify: mul\.lo\.f32: \.lo does not apply to \.f32") as refused:
        kaio.load_ir(PLANTED_MODULE)
    err = refused.value  # at the op's line of IR, as a parse error is
    assert (err.filename, err.line, err.col) == ("<ir>", 4, 4)
    assert err.source_line is not None and "ptx.mul lo.f32" in err.source_line
    with pytest.raises(KaioCompileError) as sound:  # the same IR with .rn verifies (and lacks its dump folder)
        kaio.load_ir(PLANTED_MODULE.replace("lo.f32", "rn.f32"))
    assert "does not verify" not in str(sound.value)


def test_kaio_opt_refuses_a_planted_spec_naming_it(tmp_path, capsys):
    planted = tmp_path / "planted.mlir"
    planted.write_text(PLANTED_MODULE)
    with pytest.raises(SystemExit) as exited:
        kaio_opt([str(planted)])
    assert exited.value.code not in (0, None)
    assert "mul.lo.f32: .lo does not apply to .f32" in capsys.readouterr().err
    sound = tmp_path / "sound.mlir"
    sound.write_text(PLANTED_MODULE.replace("lo.f32", "rn.f32"))
    kaio_opt([str(sound)])
    assert "ptx.mul rn.f32" in capsys.readouterr().out
