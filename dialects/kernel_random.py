"""``kernel.philox``: counter-based random bits, one thread's view (part of the ``kernel``
dialect, listed in its ``Kernel`` object).

Philox 4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) with Triton's
constants and rounds: a 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key ``(k0, k1)`` give
four 32-bit words; the same counter and key give the same words on every GPU and every run, with
no state in memory. ``tl.rand``/``tl.randint`` are this with the seed as the key and the offset
as the counter, and so are ``kt.rand``/``kt.randint`` (kaio.frontend.random_builtins). Each
round:

    hi0, lo0 = mul.hi(B, c2), mul.lo(B, c2)      B = 0xCD9E8D57
    hi1, lo1 = mul.hi(A, c0), mul.lo(A, c0)      A = 0xD2511F53
    c0, c1, c2, c3 = hi0 ^ c1 ^ k0, lo0, hi1 ^ c3 ^ k1, lo1
    k0, k1 = k0 + 0x9E3779B9, k1 + 0xBB67AE85

``lower-to-ptx`` spells the rounds out as 32-bit ``mul.hi``/``mul.lo``/``xor``/``add``
(passes/to_ptx/random.py); :mod:`kaio.random` is the same function in numpy, for the host.
"""

from __future__ import annotations

from xdsl.dialects.builtin import I32, IntegerAttr, i32
from xdsl.ir import SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

MAX_ROUNDS = 64  # Philox is specified for any count; 10 is Triton's (and Random123's) default


@irdl_op_definition
class PhiloxOp(IRDLOperation):
    """Four random words from a counter and a key (see the module doc); i32 operands and
    results (signless: the frontend reads them as u32 or i32)."""

    name = "kernel.philox"
    c0 = operand_def(i32)
    c1 = operand_def(i32)
    c2 = operand_def(i32)
    c3 = operand_def(i32)
    k0 = operand_def(i32)
    k1 = operand_def(i32)
    rounds = prop_def(IntegerAttr[I32])
    r0 = result_def(i32)
    r1 = result_def(i32)
    r2 = result_def(i32)
    r3 = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "$c0 `,` $c1 `,` $c2 `,` $c3 `key` $k0 `,` $k1 `rounds` $rounds attr-dict"

    def __init__(self, counter: tuple[SSAValue, SSAValue, SSAValue, SSAValue], key: tuple[SSAValue, SSAValue], rounds: int = 10):
        super().__init__(operands=[*counter, *key], result_types=[i32] * 4, properties={"rounds": IntegerAttr(rounds, i32)})

    def verify_(self) -> None:
        if not 1 <= self.rounds.value.data <= MAX_ROUNDS:
            raise VerifyException(f"kernel.philox: rounds must be 1 .. {MAX_ROUNDS}, got {self.rounds.value.data}")


RANDOM_OPS = [PhiloxOp]

__all__ = ["MAX_ROUNDS", "RANDOM_OPS", "PhiloxOp"]
