"""The PTX parser and loader: what they accept, and the line numbers they report."""

from __future__ import annotations

import pytest
from kaio.targets.sim.lexer import PtxSyntaxError
from kaio.targets.sim.parser import parse_module
from kaio.targets.sim.syntax import (
    AddrOperand,
    ImmOperand,
    Instruction,
    PairOperand,
    RegOperand,
    SymOperand,
    VecOperand,
)

from kaio.errors import KaioLaunchError

from .conftest import HEADER


def test_operand_forms():
    mod = parse_module(HEADER + """
.entry k()
{
	.reg .b32 %r<3>, %extra;
	setp.lt.and.f32 %p1|%p2, %f1, 0fBF800000, !%p3;
	ld.global.v2.u32 {%r1, _}, [%rd1+-8];
	st.shared.u32 [smem+12], 0x10;
	@!%p1 bra $L__BB0_1;
$L__BB0_1:
	ret;
}
""")
    (fn,) = mod.functions
    assert fn.body[0].names == ("%r0", "%r1", "%r2", "%extra")  # type: ignore[union-attr]
    setp, ld, st, bra = (s for s in fn.body if isinstance(s, Instruction) and s.mnemonic != "ret")
    assert setp.operands[0] == PairOperand("%p1", "%p2")
    assert setp.operands[2] == ImmOperand(0xBF800000, "f32bits")
    assert ld.operands[1] == AddrOperand(RegOperand("%rd1"), -8)
    assert isinstance(ld.operands[0], VecOperand) and len(ld.operands[0].items) == 2
    assert st.operands[0] == AddrOperand(SymOperand("smem"), 12)
    assert bra.guard == "%p1" and bra.guard_negated


def test_line_numbers_survive_block_comments():
    text = HEADER + "/* one\n two\n three */\n.entry k()\n{\n\tadd.s32 %r1 %r2;\n}\n"
    with pytest.raises(PtxSyntaxError) as info:
        parse_module(text)
    assert info.value.line == 9


def test_unterminated_comment_and_stray_character():
    with pytest.raises(PtxSyntaxError, match="unterminated /\\* comment") as info:
        parse_module(HEADER + "\n/* never closed\n.entry k() { ret; }\n")
    assert info.value.line == 5
    with pytest.raises(PtxSyntaxError, match="unexpected character '#'"):
        parse_module(HEADER + "#include <x>\n")


def test_unexpected_module_directive_and_truncated_function():
    with pytest.raises(PtxSyntaxError, match="unexpected '.bogus' at module level"):
        parse_module(HEADER + ".bogus 1;\n")
    with pytest.raises(PtxSyntaxError, match="unexpected end of input"):
        parse_module(HEADER + ".entry k()\n{\n\tret;\n")


def test_labels_are_scoped_to_blocks(sim):
    ok = HEADER + ".entry k()\n{\n\t{\nL: \n\tbra L;\n\t}\n\t{\nL:\n\tret;\n\t}\n}\n"
    sim.load(ok)
    twice = HEADER + ".entry k()\n{\nL:\n\tret;\nL:\n\tret;\n}\n"
    with pytest.raises(KaioLaunchError, match="label L defined twice"):
        sim.load(twice)


def test_declarations_without_bodies_and_several_entries(sim):
    text = HEADER + """
.extern .func (.param .b32 r) ext_fn (.param .b32 a);
.visible .entry first() { ret; }
.visible .entry second(.param .u32 x) { ret; }
.entry declared_only(.param .u32 y);
"""
    module = sim.load(text)
    assert list(module.entries) == ["first", "second"]


def test_maxntid_is_enforced(sim):
    module = sim.load(HEADER + ".entry k() .maxntid 64, 1, 1\n{\n\tret;\n}\n")
    module.launch("k", (1, 1, 1), (64, 1, 1), [])
    with pytest.raises(KaioLaunchError, match="at most 64 threads"):
        module.launch("k", (1, 1, 1), (65, 1, 1), [])
